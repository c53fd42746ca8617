// The CUDA variant of add_one.cc in the other project's style: device guard, the caller's
// stream through TVMFFIEnvGetStream, TVM_FFI_CHECK_CUDA_ERROR after the launch.
#include <tvm/ffi/container/tensor.h>
#include <tvm/ffi/error.h>
#include <tvm/ffi/extra/c_env_api.h>
#include <tvm/ffi/extra/cuda/device_guard.h>
#include <tvm/ffi/function.h>

namespace ffi = tvm::ffi;

__global__ void AddOneKernel(const float* x, float* y, int64_t n) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n) y[i] = x[i] + 1;
}

static cudaStream_t get_stream(DLDevice device) {
  return static_cast<cudaStream_t>(TVMFFIEnvGetStream(device.device_type, device.device_id));
}

void AddOneCUDA(ffi::TensorView x, ffi::TensorView y) {
  TVM_FFI_CHECK(x.device().device_type == kDLCUDA, ValueError) << "add_one_cuda: x must be on a CUDA device";
  TVM_FFI_CHECK(x.IsContiguous() && y.IsContiguous(), ValueError) << "add_one_cuda: contiguous tensors only";
  TVM_FFI_CHECK(x.dtype() == DLDataType({kDLFloat, 32, 1}), TypeError) << "add_one_cuda: float32 only";
  TVM_FFI_CHECK_EQ(x.numel(), y.numel(), ValueError) << "add_one_cuda: x and y differ in size";
  ffi::CUDADeviceGuard guard(x.device().device_id);
  const int64_t n = x.numel();
  const int threads = 256;
  const int blocks = static_cast<int>((n + threads - 1) / threads);
  if (n > 0) {
    AddOneKernel<<<blocks, threads, 0, get_stream(x.device())>>>(static_cast<const float*>(x.data_ptr()),
                                                                  static_cast<float*>(y.data_ptr()), n);
    TVM_FFI_CHECK_CUDA_ERROR(cudaGetLastError());
  }
}

TVM_FFI_DLL_EXPORT_TYPED_FUNC(add_one_cuda, AddOneCUDA);
