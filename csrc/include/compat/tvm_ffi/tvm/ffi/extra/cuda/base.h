/*
 * <tvm/ffi/extra/cuda/base.h> (compatibility layer): TVM_FFI_CHECK_CUDA_ERROR(expr), a
 * RuntimeError naming the expression and CUDA's error string (TENSORPLUG_CUDA_CHECK).
 */
#ifndef TENSORPLUG_COMPAT_TVM_FFI_EXTRA_CUDA_BASE_H_
#define TENSORPLUG_COMPAT_TVM_FFI_EXTRA_CUDA_BASE_H_

#include "tensorplug/cuda.h"

#define TVM_FFI_CHECK_CUDA_ERROR(stmt) TENSORPLUG_CUDA_CHECK(stmt)

#endif  // TENSORPLUG_COMPAT_TVM_FFI_EXTRA_CUDA_BASE_H_
