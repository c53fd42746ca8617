/*
 * <tvm/ffi/reflection/registry.h> is not part of tensorplug's tvm-ffi compatibility layer: Map/Dict, List,
 * Variant, Object and reflection, and Module are out of its scope. Its names are declared so
 * that a source including it compiles; using one fails with a message (tensorplug_not_provided.h). docs/migration.md
 * ("Not supported") shows the tensorplug way to do the same (a closure as a Function for a
 * stateful runner, TENSORPLUG_REGISTER_GLOBAL, Storage, separate arguments for a map).
 */
#ifndef TENSORPLUG_COMPAT_TVM_FFI_REFLECTION_REGISTRY_H_
#define TENSORPLUG_COMPAT_TVM_FFI_REFLECTION_REGISTRY_H_

#include <tvm/ffi/tensorplug_not_provided.h>

namespace tvm {
namespace ffi {
namespace reflection {
TENSORPLUG_COMPAT_NOT_PROVIDED_TEMPLATE(ObjectDef, "tvm::ffi::reflection::ObjectDef", "reflection/registry.h");
TENSORPLUG_COMPAT_NOT_PROVIDED_CLASS(GlobalDef, "tvm::ffi::reflection::GlobalDef", "reflection/registry.h");
TENSORPLUG_COMPAT_NOT_PROVIDED_TEMPLATE(TypeAttrDef, "tvm::ffi::reflection::TypeAttrDef", "reflection/registry.h");
}  // namespace reflection
}  // namespace ffi
}  // namespace tvm

// Used as `TVM_FFI_STATIC_INIT_BLOCK() { ... }`: the block becomes a function's body.
#define TVM_FFI_STATIC_INIT_BLOCK()                                                        \
  TENSORPLUG_COMPAT_NOT_PROVIDED_MACRO("TVM_FFI_STATIC_INIT_BLOCK", "reflection/registry.h"); \
  [[maybe_unused]] static void tensorplug_not_provided_static_init_block()

#endif  // TENSORPLUG_COMPAT_TVM_FFI_REFLECTION_REGISTRY_H_
