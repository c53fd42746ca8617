// Native twin of plan_run.cc: the plan is a std::vector<int64_t> (an integer array).
#include <tensorplug/tensorplug.h>

#include <algorithm>
#include <vector>

namespace tp = tensorplug;

std::vector<int64_t> Plan(int64_t n, int64_t chunk_size) {
  TENSORPLUG_CHECK(chunk_size > 0, ValueError) << "plan: chunk_size must be positive";
  TENSORPLUG_CHECK(n >= 0, ValueError) << "plan: n must not be negative";
  const int64_t chunks = (n + chunk_size - 1) / chunk_size;
  std::vector<int64_t> plan = {n, chunks};
  for (int64_t c = 0; c < chunks; ++c) {
    plan.push_back(c * chunk_size);
    plan.push_back(std::min(n, (c + 1) * chunk_size));
  }
  return plan;
}

void Run(tp::TensorView x, tp::MutableView out, std::vector<int64_t> plan) {
  TENSORPLUG_CHECK(plan.size() >= 2 && plan.size() == 2 + 2 * static_cast<size_t>(plan[1]), ValueError)
      << "run: plan is malformed";
  TENSORPLUG_CHECK(x.size(0) == plan[0] && out.size(0) == plan[0], ValueError) << "run: tensors do not match the plan";
  const float* src = x.data_ptr<float>();
  float* dst = out.mutable_data_ptr<float>();
  for (int64_t c = 0; c < plan[1]; ++c) {
    float acc = 0;
    for (int64_t i = plan[2 + 2 * c]; i < plan[3 + 2 * c]; ++i) {
      acc += src[i * x.stride(0)];
      dst[i * out.stride(0)] = acc;
    }
  }
}

TENSORPLUG_EXPORT(plan, Plan, "n", "chunk_size");
TENSORPLUG_EXPORT(run, Run, "x", "out", "plan");
