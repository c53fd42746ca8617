/*
 * <tvm/ffi/object.h> is not part of tensorplug's tvm-ffi compatibility layer: Map/Dict, List,
 * Variant, Object and reflection, and Module are out of its scope. Its names are declared so
 * that a source including it compiles; using one fails with a message (tensorplug_not_provided.h). docs/migration.md
 * ("Not supported") shows the tensorplug way to do the same (a closure as a Function for a
 * stateful runner, TENSORPLUG_REGISTER_GLOBAL, Storage, separate arguments for a map).
 */
#ifndef TENSORPLUG_COMPAT_TVM_FFI_OBJECT_H_
#define TENSORPLUG_COMPAT_TVM_FFI_OBJECT_H_

#include <tvm/ffi/tensorplug_not_provided.h>

namespace tvm {
namespace ffi {
TENSORPLUG_COMPAT_NOT_PROVIDED_CLASS(Object, "tvm::ffi::Object", "object.h");
TENSORPLUG_COMPAT_NOT_PROVIDED_CLASS(ObjectRef, "tvm::ffi::ObjectRef", "object.h");
TENSORPLUG_COMPAT_NOT_PROVIDED_TEMPLATE(ObjectPtr, "tvm::ffi::ObjectPtr", "object.h");
TENSORPLUG_COMPAT_NOT_PROVIDED_FUNCTION(make_object, "tvm::ffi::make_object", "object.h");
TENSORPLUG_COMPAT_NOT_PROVIDED_FUNCTION(GetRef, "tvm::ffi::GetRef", "object.h");
TENSORPLUG_COMPAT_NOT_PROVIDED_FUNCTION(GetObjectPtr, "tvm::ffi::GetObjectPtr", "object.h");
}  // namespace ffi
}  // namespace tvm

#define TVM_FFI_DECLARE_OBJECT_INFO(...) \
  TENSORPLUG_COMPAT_NOT_PROVIDED_MACRO("TVM_FFI_DECLARE_OBJECT_INFO", "object.h")
#define TVM_FFI_DECLARE_OBJECT_INFO_FINAL(...) \
  TENSORPLUG_COMPAT_NOT_PROVIDED_MACRO("TVM_FFI_DECLARE_OBJECT_INFO_FINAL", "object.h")
#define TVM_FFI_DEFINE_OBJECT_REF_METHODS_NULLABLE(...) \
  TENSORPLUG_COMPAT_NOT_PROVIDED_MACRO("TVM_FFI_DEFINE_OBJECT_REF_METHODS_NULLABLE", "object.h")
#define TVM_FFI_DEFINE_OBJECT_REF_METHODS_NOTNULLABLE(...) \
  TENSORPLUG_COMPAT_NOT_PROVIDED_MACRO("TVM_FFI_DEFINE_OBJECT_REF_METHODS_NOTNULLABLE", "object.h")
#define TVM_FFI_DEFINE_MUTABLE_OBJECT_REF_METHODS(...) \
  TENSORPLUG_COMPAT_NOT_PROVIDED_MACRO("TVM_FFI_DEFINE_MUTABLE_OBJECT_REF_METHODS", "object.h")

#endif  // TENSORPLUG_COMPAT_TVM_FFI_OBJECT_H_
