// A checked kernel with dtype dispatch: out = alpha * x, for float32/float64/int32/int64.
#include <tvm/ffi/container/tensor.h>
#include <tvm/ffi/error.h>
#include <tvm/ffi/function.h>

#include <cstdint>

using tvm::ffi::TensorView;

template <typename T>
static void ScaleImpl(TensorView x, TensorView out, double alpha) {
  const T* src = static_cast<const T*>(x.data_ptr());
  T* dst = static_cast<T*>(out.data_ptr());
  for (int64_t i = 0; i < x.numel(); ++i) dst[i] = static_cast<T>(src[i] * alpha);
}

void Scale(TensorView x, TensorView out, double alpha) {
  TVM_FFI_CHECK(x.IsContiguous(), ValueError) << "scale: x must be contiguous";
  TVM_FFI_CHECK(out.IsContiguous(), ValueError) << "scale: out must be contiguous";
  TVM_FFI_CHECK_EQ(x.ndim(), out.ndim(), ValueError) << "scale: x and out differ in rank";
  for (int i = 0; i < x.ndim(); ++i) {
    TVM_FFI_CHECK_EQ(x.size(i), out.size(i), ValueError) << "scale: shape mismatch in dim " << i;
  }
  TVM_FFI_CHECK_EQ(x.dtype(), out.dtype(), TypeError) << "scale: x and out differ in dtype";
  TVM_FFI_CHECK(x.device().device_type == kDLCPU, ValueError) << "scale: CPU only";
  const DLDataType dtype = x.dtype();
  if (dtype.code == kDLFloat && dtype.bits == 32) {
    ScaleImpl<float>(x, out, alpha);
  } else if (dtype.code == kDLFloat && dtype.bits == 64) {
    ScaleImpl<double>(x, out, alpha);
  } else if (dtype.code == kDLInt && dtype.bits == 32) {
    ScaleImpl<int32_t>(x, out, alpha);
  } else if (dtype.code == kDLInt && dtype.bits == 64) {
    ScaleImpl<int64_t>(x, out, alpha);
  } else {
    TVM_FFI_THROW(TypeError) << "scale: unsupported dtype " << dtype;
  }
}

TVM_FFI_DLL_EXPORT_TYPED_FUNC(scale, Scale);
