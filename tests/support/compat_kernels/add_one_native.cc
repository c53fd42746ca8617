// Native twin of add_one.cc.
#include <tensorplug/tensorplug.h>

namespace tp = tensorplug;

void AddOne(tp::TensorView x, tp::MutableView y) {
  TENSORPLUG_ICHECK(x.dim() == 1) << "x must be a 1D tensor";
  TENSORPLUG_ICHECK(x.dtype() == tp::kFloat32) << "x must be a float tensor";
  TENSORPLUG_ICHECK(y.dim() == 1) << "y must be a 1D tensor";
  TENSORPLUG_ICHECK(y.dtype() == tp::kFloat32) << "y must be a float tensor";
  TENSORPLUG_ICHECK(x.size(0) == y.size(0)) << "x and y must have the same shape";
  const float* xp = x.data_ptr<float>();
  float* yp = y.mutable_data_ptr<float>();
  for (int64_t i = 0; i < x.size(0); ++i) yp[i * y.stride(0)] = xp[i * x.stride(0)] + 1;
}

TENSORPLUG_EXPORT(add_one, AddOne);
