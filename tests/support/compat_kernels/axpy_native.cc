// Native twin of axpy.cc.
#include <tensorplug/tensorplug.h>

#include <optional>

namespace tp = tensorplug;

void Axpy(tp::TensorView x, tp::MutableView out, std::optional<tp::TensorView> bias, std::optional<double> alpha) {
  TENSORPLUG_CHECK(x.dim() == 1, ValueError) << "axpy: x must be 1-D";
  TENSORPLUG_CHECK(out.size(0) == x.size(0), ValueError) << "axpy: out must match x";
  TENSORPLUG_CHECK(x.dtype() == tp::kFloat32, TypeError) << "axpy: float32 only";
  const float a = static_cast<float>(alpha.value_or(1.0));
  if (bias) TENSORPLUG_CHECK(bias->size(0) == x.size(0), ValueError) << "axpy: bias must match x";
  const float* xp = x.data_ptr<float>();
  float* op = out.mutable_data_ptr<float>();
  for (int64_t i = 0; i < x.size(0); ++i) {
    const float b = bias ? bias->data_ptr<float>()[i * bias->stride(0)] : 0.0f;
    op[i * out.stride(0)] = a * xp[i * x.stride(0)] + b;
  }
}

TENSORPLUG_EXPORT(axpy, Axpy, "x", "out", "bias", "alpha");
