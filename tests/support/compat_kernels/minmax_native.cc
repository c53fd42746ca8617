// Native twin of minmax.cc.
#include <tensorplug/tensorplug.h>

#include <tuple>

namespace tp = tensorplug;

std::tuple<tp::Tensor, tp::Tensor> RowMinMax(tp::TensorView x) {
  TENSORPLUG_CHECK(x.dim() == 2, ValueError) << "row_minmax: x must be 2-D";
  TENSORPLUG_CHECK(x.size(1) > 0, ValueError) << "row_minmax: rows must not be empty";
  TENSORPLUG_CHECK(x.dtype() == tp::kFloat32, TypeError) << "row_minmax: float32 only";
  tp::Tensor lo = tp::Tensor::FromEnvAlloc({x.size(0)}, x.dtype(), x.device());
  tp::Tensor hi = tp::Tensor::FromEnvAlloc({x.size(0)}, x.dtype(), x.device());
  const float* src = x.data_ptr<float>();
  for (int64_t r = 0; r < x.size(0); ++r) {
    float a = src[r * x.stride(0)], b = a;
    for (int64_t c = 1; c < x.size(1); ++c) {
      const float v = src[r * x.stride(0) + c * x.stride(1)];
      a = v < a ? v : a;
      b = v > b ? v : b;
    }
    lo.mutable_data_ptr<float>()[r] = a;
    hi.mutable_data_ptr<float>()[r] = b;
  }
  return {lo, hi};
}

TENSORPLUG_EXPORT(row_minmax, RowMinMax, "x");
