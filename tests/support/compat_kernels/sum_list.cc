// A list of tensors: out = the elementwise sum of xs (1-D float32 tensors of one length).
#include <tvm/ffi/container/array.h>
#include <tvm/ffi/container/tensor.h>
#include <tvm/ffi/error.h>
#include <tvm/ffi/function.h>

namespace ffi = tvm::ffi;

void SumList(ffi::Array<ffi::Tensor> xs, ffi::TensorView out) {
  TVM_FFI_CHECK(!xs.empty(), ValueError) << "sum_list: xs is empty";
  float* dst = static_cast<float*>(out.data_ptr());
  for (int64_t i = 0; i < out.size(0); ++i) dst[i * out.stride(0)] = 0;
  for (size_t k = 0; k < xs.size(); ++k) {
    const ffi::Tensor& x = xs[k];
    TVM_FFI_CHECK_EQ(x.size(0), out.size(0), ValueError) << "sum_list: xs[" << k << "] has another length";
    TVM_FFI_CHECK(x.dtype() == DLDataType({kDLFloat, 32, 1}), TypeError) << "sum_list: float32 only";
    const float* src = static_cast<const float*>(x.data_ptr());
    for (int64_t i = 0; i < out.size(0); ++i) dst[i * out.stride(0)] += src[i * x.stride(0)];
  }
}

TVM_FFI_DLL_EXPORT_TYPED_FUNC(sum_list, SumList);
