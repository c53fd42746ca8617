// Native twin of sum_list.cc: a list of tensors is a std::vector<TensorView>.
#include <tensorplug/tensorplug.h>

#include <vector>

namespace tp = tensorplug;

void SumList(std::vector<tp::TensorView> xs, tp::MutableView out) {
  TENSORPLUG_CHECK(!xs.empty(), ValueError) << "sum_list: xs is empty";
  float* dst = out.mutable_data_ptr<float>();
  for (int64_t i = 0; i < out.size(0); ++i) dst[i * out.stride(0)] = 0;
  for (size_t k = 0; k < xs.size(); ++k) {
    TENSORPLUG_CHECK(xs[k].size(0) == out.size(0), ValueError) << "sum_list: xs[" << k << "] has another length";
    TENSORPLUG_CHECK(xs[k].dtype() == tp::kFloat32, TypeError) << "sum_list: float32 only";
    const float* src = xs[k].data_ptr<float>();
    for (int64_t i = 0; i < out.size(0); ++i) dst[i * out.stride(0)] += src[i * xs[k].stride(0)];
  }
}

TENSORPLUG_EXPORT(sum_list, SumList, "xs", "out");
