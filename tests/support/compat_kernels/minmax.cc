// A Tuple result: the minimum and maximum of each row of a 2-D float32 tensor.
#include <tvm/ffi/container/tensor.h>
#include <tvm/ffi/container/tuple.h>
#include <tvm/ffi/error.h>
#include <tvm/ffi/extra/c_env_api.h>
#include <tvm/ffi/function.h>

namespace ffi = tvm::ffi;

ffi::Tuple<ffi::Tensor, ffi::Tensor> RowMinMax(ffi::TensorView x) {
  TVM_FFI_CHECK_EQ(x.ndim(), 2, ValueError) << "row_minmax: x must be 2-D";
  TVM_FFI_CHECK_GT(x.size(1), 0, ValueError) << "row_minmax: rows must not be empty";
  TVM_FFI_CHECK(x.dtype() == DLDataType({kDLFloat, 32, 1}), TypeError) << "row_minmax: float32 only";
  ffi::Tensor lo = ffi::Tensor::FromEnvAlloc(TVMFFIEnvTensorAlloc, {x.size(0)}, x.dtype(), x.device());
  ffi::Tensor hi = ffi::Tensor::FromEnvAlloc(TVMFFIEnvTensorAlloc, {x.size(0)}, x.dtype(), x.device());
  const float* src = static_cast<const float*>(x.data_ptr());
  for (int64_t r = 0; r < x.size(0); ++r) {
    float a = src[r * x.stride(0)], b = a;
    for (int64_t c = 1; c < x.size(1); ++c) {
      const float v = src[r * x.stride(0) + c * x.stride(1)];
      a = v < a ? v : a;
      b = v > b ? v : b;
    }
    static_cast<float*>(lo.data_ptr())[r] = a;
    static_cast<float*>(hi.data_ptr())[r] = b;
  }
  return ffi::Tuple<ffi::Tensor, ffi::Tensor>(lo, hi);
}

TVM_FFI_DLL_EXPORT_TYPED_FUNC(row_minmax, RowMinMax);
