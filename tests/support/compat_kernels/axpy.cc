// Optional arguments: out = alpha * x (+ bias), alpha defaulting to 1 and bias to nothing.
#include <tvm/ffi/container/tensor.h>
#include <tvm/ffi/error.h>
#include <tvm/ffi/function.h>
#include <tvm/ffi/optional.h>

using tvm::ffi::Optional;
using tvm::ffi::TensorView;

void Axpy(TensorView x, TensorView out, Optional<TensorView> bias, Optional<double> alpha) {
  TVM_FFI_CHECK_EQ(x.ndim(), 1, ValueError) << "axpy: x must be 1-D";
  TVM_FFI_CHECK_EQ(out.size(0), x.size(0), ValueError) << "axpy: out must match x";
  TVM_FFI_CHECK(x.dtype() == DLDataType({kDLFloat, 32, 1}), TypeError) << "axpy: float32 only";
  const float a = static_cast<float>(alpha.value_or(1.0));
  const float* b = nullptr;
  int64_t b_stride = 0;
  if (bias.has_value()) {
    TVM_FFI_CHECK_EQ(bias.value().size(0), x.size(0), ValueError) << "axpy: bias must match x";
    b = static_cast<const float*>(bias->data_ptr());
    b_stride = bias->stride(0);
  }
  const float* xp = static_cast<const float*>(x.data_ptr());
  float* op = static_cast<float*>(out.data_ptr());
  for (int64_t i = 0; i < x.size(0); ++i) {
    op[i * out.stride(0)] = a * xp[i * x.stride(0)] + (b != nullptr ? b[i * b_stride] : 0.0f);
  }
}

TVM_FFI_DLL_EXPORT_TYPED_FUNC(axpy, Axpy);
