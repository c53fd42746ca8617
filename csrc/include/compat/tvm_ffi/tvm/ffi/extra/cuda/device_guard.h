/*
 * <tvm/ffi/extra/cuda/device_guard.h> (compatibility layer): CUDADeviceGuard, which makes a
 * device current for its scope and restores the previous one (tensorplug::CUDADeviceGuard).
 */
#ifndef TENSORPLUG_COMPAT_TVM_FFI_EXTRA_CUDA_DEVICE_GUARD_H_
#define TENSORPLUG_COMPAT_TVM_FFI_EXTRA_CUDA_DEVICE_GUARD_H_

#include "tensorplug/cuda.h"
#include "tvm/ffi/extra/cuda/base.h"

namespace tvm {
namespace ffi {
using ::tensorplug::CUDADeviceGuard;
}  // namespace ffi
}  // namespace tvm

#endif  // TENSORPLUG_COMPAT_TVM_FFI_EXTRA_CUDA_DEVICE_GUARD_H_
