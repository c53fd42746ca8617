/*
 * <tvm/ffi/any.h> (compatibility layer): Any, the result of a Function call
 * (tensorplug::Any: `f(x).cast<int64_t>()`). Unlike the other project's Any it is
 * move-only; cast<T>() reads it as often as needed.
 */
#ifndef TENSORPLUG_COMPAT_TVM_FFI_ANY_H_
#define TENSORPLUG_COMPAT_TVM_FFI_ANY_H_

#include "tensorplug/function.h"

namespace tvm {
namespace ffi {
using Any = ::tensorplug::Any;
}  // namespace ffi
}  // namespace tvm

#endif  // TENSORPLUG_COMPAT_TVM_FFI_ANY_H_
