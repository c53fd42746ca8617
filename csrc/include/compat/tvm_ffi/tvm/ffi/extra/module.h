/*
 * <tvm/ffi/extra/module.h> is not part of tensorplug's tvm-ffi compatibility layer: Map/Dict, List,
 * Variant, Object and reflection, and Module are out of its scope. Its names are declared so
 * that a source including it compiles; using one fails with a message (tensorplug_not_provided.h). docs/migration.md
 * ("Not supported") shows the tensorplug way to do the same (a closure as a Function for a
 * stateful runner, TENSORPLUG_REGISTER_GLOBAL, Storage, separate arguments for a map).
 */
#ifndef TENSORPLUG_COMPAT_TVM_FFI_EXTRA_MODULE_H_
#define TENSORPLUG_COMPAT_TVM_FFI_EXTRA_MODULE_H_

#include <tvm/ffi/tensorplug_not_provided.h>

namespace tvm {
namespace ffi {
TENSORPLUG_COMPAT_NOT_PROVIDED_CLASS(Module, "tvm::ffi::Module", "extra/module.h");
TENSORPLUG_COMPAT_NOT_PROVIDED_CLASS(ModuleObj, "tvm::ffi::ModuleObj", "extra/module.h");
}  // namespace ffi
}  // namespace tvm

#endif  // TENSORPLUG_COMPAT_TVM_FFI_EXTRA_MODULE_H_
