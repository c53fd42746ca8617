// A String argument: applies the activation named by `kind` ("relu" or "leaky_relu") in place.
#include <tvm/ffi/container/tensor.h>
#include <tvm/ffi/error.h>
#include <tvm/ffi/function.h>
#include <tvm/ffi/string.h>

namespace ffi = tvm::ffi;

void Activate(ffi::TensorView x, ffi::String kind) {
  TVM_FFI_CHECK(x.IsContiguous(), ValueError) << "activate: x must be contiguous";
  TVM_FFI_CHECK(x.dtype() == DLDataType({kDLFloat, 32, 1}), TypeError) << "activate: float32 only";
  float* p = static_cast<float*>(x.data_ptr());
  float slope;
  if (kind == "relu") {
    slope = 0.0f;
  } else if (kind == "leaky_relu") {
    slope = 0.01f;
  } else {
    TVM_FFI_THROW(ValueError) << "activate: unknown activation '" << kind << "'";
  }
  for (int64_t i = 0; i < x.numel(); ++i) p[i] = p[i] > 0 ? p[i] : slope * p[i];
}

TVM_FFI_DLL_EXPORT_TYPED_FUNC(activate, Activate);
