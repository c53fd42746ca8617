// Native twin of activate.cc.
#include <tensorplug/tensorplug.h>

#include <string>

namespace tp = tensorplug;

void Activate(tp::MutableView x, std::string kind) {
  TENSORPLUG_CHECK(x.is_contiguous(), ValueError) << "activate: x must be contiguous";
  TENSORPLUG_CHECK(x.dtype() == tp::kFloat32, TypeError) << "activate: float32 only";
  float slope = 0.0f;
  if (kind == "leaky_relu") {
    slope = 0.01f;
  } else if (kind != "relu") {
    TENSORPLUG_THROW(ValueError) << "activate: unknown activation '" << kind << "'";
  }
  float* p = x.mutable_data_ptr<float>();
  for (int64_t i = 0; i < x.numel(); ++i) p[i] = p[i] > 0 ? p[i] : slope * p[i];
}

TENSORPLUG_EXPORT(activate, Activate, "x", "kind");
