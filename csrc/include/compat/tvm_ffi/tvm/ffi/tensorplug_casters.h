/*
 * tvm/ffi/tensorplug_casters.h (compatibility layer, no counterpart in the other project):
 * how the compatibility types cross tensorplug's calling convention, through the public
 * extension point tensorplug::TypeCaster<T> (tensorplug/caster.h). Each one reuses the
 * caster of its native counterpart, so a kernel written with them has the same signature
 * kinds, the same argument checks and the same error messages as its native twin:
 *
 *   tvm::ffi type      native type it behaves as      kind
 *   TensorView         tensorplug::TensorView         view
 *   Tensor             tensorplug::Tensor             tensor
 *   Optional<T>        std::optional<T>               ?kind of T
 *   String             std::string                    str
 *   Function           tensorplug::Function           func
 *   Tuple<Ts...>       std::tuple<Ts...>              tuple (results)
 *   Shape, Array<T>    see container/array.h
 */
#ifndef TENSORPLUG_COMPAT_TVM_FFI_TENSORPLUG_CASTERS_H_
#define TENSORPLUG_COMPAT_TVM_FFI_TENSORPLUG_CASTERS_H_

#include <optional>
#include <string>
#include <tuple>
#include <utility>

#include "tensorplug/caster.h"
#include "tensorplug/function.h"
#include "tvm/ffi/container/tensor.h"
#include "tvm/ffi/container/tuple.h"
#include "tvm/ffi/optional.h"
#include "tvm/ffi/string.h"

namespace tvm {
namespace ffi {
class Function;
}  // namespace ffi
}  // namespace tvm

namespace tensorplug {

template <>
struct TypeCaster<::tvm::ffi::TensorView> : TypeCaster<TensorView> {
  static ::tvm::ffi::TensorView Convert(const TPAny& v) noexcept {
    return ::tvm::ffi::TensorView(TypeCaster<TensorView>::Convert(v));
  }
};

template <>
struct TypeCaster<::tvm::ffi::Tensor> : TypeCaster<Tensor> {
  static ::tvm::ffi::Tensor Convert(const TPAny& v) { return ::tvm::ffi::Tensor(TypeCaster<Tensor>::Convert(v)); }
};

template <class T>
struct TypeCaster<::tvm::ffi::Optional<T>> : TypeCaster<std::optional<T>> {
  using Native = TypeCaster<std::optional<T>>;
  static ::tvm::ffi::Optional<T> Convert(const TPAny& v) { return ::tvm::ffi::Optional<T>(Native::Convert(v)); }
  static void PackResult(::tvm::ffi::Optional<T> value, TPAny* out) {
    Native::PackResult(std::move(value).std_optional(), out);
  }
  static ArgMode PackArg(const ::tvm::ffi::Optional<T>& value, TPAny* out) {
    return Native::PackArg(value.std_optional(), out);
  }
};

template <>
struct TypeCaster<::tvm::ffi::String> : TypeCaster<std::string> {
  using Native = TypeCaster<std::string>;
  static ::tvm::ffi::String Convert(const TPAny& v) { return ::tvm::ffi::String(Native::Convert(v)); }
  static void PackResult(const ::tvm::ffi::String& value, TPAny* out) { Native::PackResult(value.str(), out); }
  // Lends the String's own buffer: it outlives the call.
  static ArgMode PackArg(const ::tvm::ffi::String& value, TPAny* out) noexcept {
    return Native::PackArg(value.str(), out);
  }
};

// Results only; the elements use their own casters (a Tensor is the caller's framework type).
template <class... Ts>
struct TypeCaster<::tvm::ffi::Tuple<Ts...>> : TypeCaster<std::tuple<Ts...>> {};

}  // namespace tensorplug

#endif  // TENSORPLUG_COMPAT_TVM_FFI_TENSORPLUG_CASTERS_H_
