// An owning Shape from a shared utility header: sum of a float32/float64 tensor along one
// dimension, allocated with the caller's allocator. Works for any strides.
#include <tvm/ffi/function.h>

#include "common.h"

template <typename T>
static void SumDimImpl(ffi::TensorView x, int64_t dim, ffi::Tensor out) {
  const ffi::Shape out_shape = out.shape();
  const int64_t n = x.size(dim);
  const T* src = static_cast<const T*>(x.data_ptr()) + x.byte_offset() / sizeof(T);
  T* dst = static_cast<T*>(out.data_ptr());
  std::vector<int64_t> index(out_shape.size(), 0);
  for (int64_t o = 0; o < out_shape.Product(); ++o) {
    int64_t rest = o;  // row-major multi-index of output element o
    for (size_t k = out_shape.size(); k-- > 0;) {
      index[k] = rest % out_shape[k];
      rest /= out_shape[k];
    }
    int64_t base = 0;
    for (int64_t d = 0, k = 0; d < x.ndim(); ++d) {
      if (d != dim) base += index[k++] * x.stride(d);
    }
    T acc = 0;
    for (int64_t i = 0; i < n; ++i) acc += src[base + i * x.stride(dim)];
    dst[o] = acc;
  }
}

ffi::Tensor SumDim(ffi::TensorView x, int64_t dim) {
  dim = dim_index(x.shape(), dim);
  ffi::Shape out_shape = drop_dim(x.shape(), dim);
  ffi::Tensor out = alloc_tensor(out_shape, x.dtype(), x.device());
  if (x.dtype() == DLDataType{kDLFloat, 32, 1}) {
    SumDimImpl<float>(x, dim, out);
  } else if (x.dtype() == DLDataType{kDLFloat, 64, 1}) {
    SumDimImpl<double>(x, dim, out);
  } else {
    TVM_FFI_THROW(TypeError) << "sum_dim: unsupported dtype " << x.dtype();
  }
  return out;
}

TVM_FFI_DLL_EXPORT_TYPED_FUNC(sum_dim, SumDim);
