/*
 * <tvm/ffi/function.h> (compatibility layer): Function and the export macro.
 *
 *   void AddOne(tvm::ffi::TensorView x, tvm::ffi::TensorView y) { ... }
 *   TVM_FFI_DLL_EXPORT_TYPED_FUNC(add_one, AddOne);   // the trailing ';' is optional
 *
 * TVM_FFI_DLL_EXPORT_TYPED_FUNC(name, callable) is TENSORPLUG_EXPORT(name, callable): the
 * library exports `name` with its signature, arguments are checked before the call, and
 * exceptions become Python exceptions of their kind. C++ cannot see parameter names, so
 * they are arg0, arg1, ...; the native TENSORPLUG_EXPORT(name, callable, "x", "y") names
 * them (and cpp.load_inline(..., functions=[...]) reads them from the source).
 */
#ifndef TENSORPLUG_COMPAT_TVM_FFI_FUNCTION_H_
#define TENSORPLUG_COMPAT_TVM_FFI_FUNCTION_H_

#include <string>
#include <utility>
#include <vector>

#include "tensorplug/export.h"
#include "tensorplug/function.h"
#include "tvm/ffi/any.h"
#include "tvm/ffi/c_api.h"
#include "tvm/ffi/container/tensor.h"
#include "tvm/ffi/error.h"
#include "tvm/ffi/optional.h"
#include "tvm/ffi/string.h"
#include "tvm/ffi/tensorplug_casters.h"

namespace tvm {
namespace ffi {

/*!
 * \brief A reference-counted packed function (tensorplug::Function): call it with
 * `f(args...)`, which returns an Any. GetGlobal returns an Optional here.
 */
class Function : public ::tensorplug::Function {
  using Base = ::tensorplug::Function;

 public:
  Function() noexcept = default;
  Function(Base function) noexcept : Base(std::move(function)) {}  // NOLINT

  /*! \brief The global function `name`, or an empty Optional when none is registered. */
  static Optional<Function> GetGlobal(const std::string& name) {
    Function f(Base::GetGlobal(name));
    if (!f.defined()) return std::nullopt;
    return f;
  }
  /*! \brief The global function `name`; ValueError "global function 'x' is not registered". */
  static Function GetGlobalRequired(const std::string& name) { return Function(Base::GetGlobalRequired(name)); }
  /*! \brief Wrap a typed callable (its parameter and result types as for an export). */
  template <class Fn>
  static Function FromTyped(Fn callable, std::string name = "<lambda>") {
    return Function(Base::FromTyped(std::move(callable), std::move(name)));
  }
};

}  // namespace ffi
}  // namespace tvm

namespace tensorplug {
template <>
struct TypeCaster<::tvm::ffi::Function> : TypeCaster<Function> {
  static ::tvm::ffi::Function Convert(const TPAny& v) noexcept {
    return ::tvm::ffi::Function(TypeCaster<Function>::Convert(v));
  }
};
}  // namespace tensorplug

/*!
 * \brief Export `Function` (a function or callable object) as `ExportName`. Written with or
 * without a trailing semicolon: the expansion ends in an empty linkage block, after which
 * a ';' is an empty declaration.
 */
#define TVM_FFI_DLL_EXPORT_TYPED_FUNC(ExportName, Function) \
  TENSORPLUG_EXPORT(ExportName, Function);                  \
  extern "C++" {                                            \
  }

/*! \brief Accepted and ignored: tensorplug signatures carry no docstrings. */
#define TVM_FFI_DLL_EXPORT_TYPED_FUNC_DOC(ExportName, DocString) \
  extern "C++" {                                                 \
  }

#endif  // TENSORPLUG_COMPAT_TVM_FFI_FUNCTION_H_
