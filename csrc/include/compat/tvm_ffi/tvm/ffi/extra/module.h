/*
 * <tvm/ffi/extra/module.h> is not part of tensorplug's tvm-ffi compatibility layer: Map/Dict, List,
 * Variant, Object and reflection, and Module are out of its scope. docs/migration.md
 * ("Not supported") shows the tensorplug way to do the same (a closure as a Function for a
 * stateful runner, TENSORPLUG_REGISTER_GLOBAL, Storage, separate arguments for a map).
 */
#ifndef TENSORPLUG_COMPAT_TVM_FFI_EXTRA_MODULE_H_
#define TENSORPLUG_COMPAT_TVM_FFI_EXTRA_MODULE_H_
#error "tvm/ffi/extra/module.h is not provided by tensorplug's tvm-ffi compatibility layer; see docs/migration.md (Not supported)"
#endif
