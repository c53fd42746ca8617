// Native twin of square.cc.
#include <tensorplug/tensorplug.h>

namespace tp = tensorplug;

tp::Tensor Square(tp::TensorView x) {
  TENSORPLUG_ICHECK(x.is_contiguous()) << "x must be contiguous";
  TENSORPLUG_CHECK(x.dtype() == tp::kFloat32, TypeError) << "square: x must be float32";
  tp::Tensor y = tp::Tensor::FromEnvAlloc(x.sizes(), x.dtype(), x.device());
  const float* src = x.data_ptr<float>();
  float* dst = y.mutable_data_ptr<float>();
  for (int64_t i = 0; i < x.numel(); ++i) dst[i] = src[i] * src[i];
  return y;
}

TENSORPLUG_EXPORT(square, Square, "x");
