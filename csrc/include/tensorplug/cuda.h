/*
 * tensorplug/cuda.h -- CUDA helpers. Included by tensorplug.h under nvcc or when
 * TENSORPLUG_WITH_CUDA is defined; needs the CUDA runtime headers (link cudart).
 */
#ifndef TENSORPLUG_CUDA_H_
#define TENSORPLUG_CUDA_H_

#include <cuda_runtime_api.h>

#include "tensorplug/c_api.h"
#include "tensorplug/error.h"

/*!
 * \brief Evaluate a cudaError_t expression; RuntimeError naming the expression and CUDA's
 * error string when it is not cudaSuccess.
 */
#define TENSORPLUG_CUDA_CHECK(expr)                                                    \
  do {                                                                                 \
    const cudaError_t tensorplug_cuda_status_ = (expr);                                \
    if (tensorplug_cuda_status_ != cudaSuccess) {                                      \
      TENSORPLUG_THROW(RuntimeError) << #expr << " failed: "                           \
                                     << cudaGetErrorString(tensorplug_cuda_status_);   \
    }                                                                                  \
  } while (false)

namespace tensorplug {

/*!
 * \brief Makes `device_id` the current CUDA device for its scope and restores the previous
 * one on exit (kernels must not leave the caller's current device changed).
 */
class CUDADeviceGuard {
 public:
  explicit CUDADeviceGuard(int device_id) {
    TENSORPLUG_CUDA_CHECK(cudaGetDevice(&original_));
    if (device_id != original_) TENSORPLUG_CUDA_CHECK(cudaSetDevice(device_id));
    current_ = device_id;
  }
  /*! \brief Guard for `device.device_id` (a CUDA device). */
  explicit CUDADeviceGuard(DLDevice device) : CUDADeviceGuard(static_cast<int>(device.device_id)) {}
  ~CUDADeviceGuard() {
    if (current_ != original_) cudaSetDevice(original_);  // a destructor cannot report errors
  }
  CUDADeviceGuard(const CUDADeviceGuard&) = delete;
  CUDADeviceGuard& operator=(const CUDADeviceGuard&) = delete;

  /*! \brief The device that was current before this guard. */
  int original_device() const noexcept { return original_; }

 private:
  int original_ = 0;
  int current_ = 0;
};

/*!
 * \brief The calling thread's current stream of CUDA device `device_id` (set from the
 * calling framework during a call from Python; NULL is the legacy default stream).
 */
inline cudaStream_t GetCurrentCUDAStream(int device_id) noexcept {
  return static_cast<cudaStream_t>(TPEnvGetStream(kDLCUDA, device_id));
}

}  // namespace tensorplug

#endif  // TENSORPLUG_CUDA_H_
