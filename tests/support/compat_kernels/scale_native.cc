// Native twin of scale.cc.
#include <tensorplug/tensorplug.h>

#include <cstdint>

namespace tp = tensorplug;

template <class T>
static void ScaleImpl(tp::TensorView x, tp::MutableView out, double alpha) {
  const T* src = x.data_ptr<T>();
  T* dst = out.mutable_data_ptr<T>();
  for (int64_t i = 0; i < x.numel(); ++i) dst[i] = static_cast<T>(src[i] * alpha);
}

void Scale(tp::TensorView x, tp::MutableView out, double alpha) {
  TENSORPLUG_CHECK(x.is_contiguous(), ValueError) << "scale: x must be contiguous";
  TENSORPLUG_CHECK(out.is_contiguous(), ValueError) << "scale: out must be contiguous";
  TENSORPLUG_CHECK(x.sizes() == out.sizes(), ValueError) << "scale: shape mismatch";
  TENSORPLUG_CHECK(x.dtype() == out.dtype(), TypeError) << "scale: x and out differ in dtype";
  TENSORPLUG_CHECK(x.device().device_type == kDLCPU, ValueError) << "scale: CPU only";
  if (x.dtype() == tp::kFloat32) {
    ScaleImpl<float>(x, out, alpha);
  } else if (x.dtype() == tp::kFloat64) {
    ScaleImpl<double>(x, out, alpha);
  } else if (x.dtype() == tp::kInt32) {
    ScaleImpl<int32_t>(x, out, alpha);
  } else if (x.dtype() == tp::kInt64) {
    ScaleImpl<int64_t>(x, out, alpha);
  } else {
    TENSORPLUG_THROW(TypeError) << "scale: unsupported dtype " << x.dtype();
  }
}

TENSORPLUG_EXPORT(scale, Scale);
