// An allocating kernel: returns x * x as a new tensor made by the caller's framework.
#include <tvm/ffi/container/tensor.h>
#include <tvm/ffi/error.h>
#include <tvm/ffi/extra/c_env_api.h>
#include <tvm/ffi/function.h>

namespace ffi = tvm::ffi;

ffi::Tensor Square(ffi::TensorView x) {
  TVM_FFI_ICHECK(x.IsContiguous()) << "x must be contiguous";
  TVM_FFI_CHECK(x.dtype() == DLDataType({kDLFloat, 32, 1}), TypeError) << "square: x must be float32";
  ffi::Tensor y = ffi::Tensor::FromEnvAlloc(TVMFFIEnvTensorAlloc, x.shape(), x.dtype(), x.device());
  const float* src = static_cast<const float*>(x.data_ptr());
  float* dst = static_cast<float*>(y.data_ptr());
  for (int64_t i = 0; i < x.numel(); ++i) dst[i] = src[i] * src[i];
  return y;
}

TVM_FFI_DLL_EXPORT_TYPED_FUNC(square, Square);
