/*
 * <tvm/ffi/tvm_ffi.h> (compatibility layer): every name the layer provides. Sources written
 * for apache tvm-ffi's C++ API compile against tensorplug with only an include-path
 * change: add `tensorplug config --compat-includedir` (or link the CMake target
 * tensorplug::compat_tvm_ffi, or pass compat="tvm_ffi" to cpp.load_inline).
 * docs/migration.md lists the names, the behaviour differences and what is not provided
 * (Map/Dict, Object and reflection, Module, Variant).
 */
#ifndef TENSORPLUG_COMPAT_TVM_FFI_TVM_FFI_H_
#define TENSORPLUG_COMPAT_TVM_FFI_TVM_FFI_H_

#include "tvm/ffi/any.h"
#include "tvm/ffi/c_api.h"
#include "tvm/ffi/container/array.h"
#include "tvm/ffi/container/shape.h"
#include "tvm/ffi/container/tensor.h"
#include "tvm/ffi/container/tuple.h"
#include "tvm/ffi/dtype.h"
#include "tvm/ffi/error.h"
#include "tvm/ffi/extra/c_env_api.h"
#include "tvm/ffi/function.h"
#include "tvm/ffi/optional.h"
#include "tvm/ffi/string.h"

#endif  // TENSORPLUG_COMPAT_TVM_FFI_TVM_FFI_H_
