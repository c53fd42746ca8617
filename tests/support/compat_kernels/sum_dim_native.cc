// Native twin of sum_dim.cc.
#include <tensorplug/tensorplug.h>

#include <vector>

namespace tp = tensorplug;

template <class T>
static void SumDimImpl(tp::TensorView x, int64_t dim, const tp::Tensor& out) {
  const int64_t n = x.size(dim);
  const T* src = x.data_ptr<T>();
  T* dst = out.mutable_data_ptr<T>();
  std::vector<int64_t> index(static_cast<size_t>(out.dim()), 0);
  for (int64_t o = 0; o < out.numel(); ++o) {
    int64_t rest = o;
    for (int64_t k = out.dim() - 1; k >= 0; --k) {
      index[k] = rest % out.size(k);
      rest /= out.size(k);
    }
    int64_t base = 0;
    for (int64_t d = 0, k = 0; d < x.dim(); ++d) {
      if (d != dim) base += index[k++] * x.stride(d);
    }
    T acc = 0;
    for (int64_t i = 0; i < n; ++i) acc += src[base + i * x.stride(dim)];
    dst[o] = acc;
  }
}

tp::Tensor SumDim(tp::TensorView x, int64_t dim) {
  if (dim < 0) dim += x.dim();
  TENSORPLUG_CHECK(dim >= 0 && dim < x.dim(), IndexError) << "dim out of range for a " << x.dim() << "-D tensor";
  std::vector<int64_t> shape;
  for (int64_t d = 0; d < x.dim(); ++d) {
    if (d != dim) shape.push_back(x.size(d));
  }
  tp::Tensor out = tp::Tensor::FromEnvAlloc(shape, x.dtype(), x.device());
  if (x.dtype() == tp::kFloat32) {
    SumDimImpl<float>(x, dim, out);
  } else if (x.dtype() == tp::kFloat64) {
    SumDimImpl<double>(x, dim, out);
  } else {
    TENSORPLUG_THROW(TypeError) << "sum_dim: unsupported dtype " << x.dtype();
  }
  return out;
}

TENSORPLUG_EXPORT(sum_dim, SumDim, "x", "dim");
