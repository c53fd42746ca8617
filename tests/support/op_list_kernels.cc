// Kernels for tests/ops/test_op_lists.py: ops taking lists of tensors (kind "views") and int
// lists (kind "ints"). float32, 1-d inputs of one length unless said otherwise.
#include <cstdint>
#include <optional>

#include "tensorplug/tensorplug.h"

namespace tp = tensorplug;

namespace {

void CheckItems(tp::TensorViewList xs, int64_t n, const char* what) {
  for (int64_t j = 0; j < static_cast<int64_t>(xs.size()); ++j) {
    TENSORPLUG_CHECK(xs[j].dim() == 1 && xs[j].numel() == n && xs[j].dtype() == tp::kFloat32, ValueError)
        << what << ": every tensor of the list must be float32[" << n << "]";
  }
}

// out[i] = sum over j of weights[j] * xs[j][i] (destination passing).
void WeightedSum(tp::TensorViewList xs, tp::IntArrayView weights, tp::MutableView out) {
  TENSORPLUG_CHECK(static_cast<int64_t>(xs.size()) == static_cast<int64_t>(weights.size()), ValueError)
      << "weighted_sum: " << xs.size() << " tensors but " << weights.size() << " weights";
  CheckItems(xs, out.numel(), "weighted_sum");
  float* po = out.mutable_data_ptr<float>();
  for (int64_t i = 0; i < out.numel(); ++i) po[i] = 0;
  for (int64_t j = 0; j < static_cast<int64_t>(xs.size()); ++j) {
    const float* px = xs[j].data_ptr<float>();
    for (int64_t i = 0; i < out.numel(); ++i) po[i] += static_cast<float>(weights[j]) * px[i];
  }
}

// A new [len(xs), n] tensor whose row j is scales[j] * xs[j].
tp::Tensor StackScaled(tp::TensorViewList xs, tp::IntArrayView scales) {
  TENSORPLUG_CHECK(!xs.empty() && xs.size() == scales.size(), ValueError)
      << "stack_scaled: expected as many scales as tensors (at least one)";
  const int64_t n = xs[0].numel();
  CheckItems(xs, n, "stack_scaled");
  tp::Tensor out = tp::Tensor::FromEnvAlloc({static_cast<int64_t>(xs.size()), n}, xs[0].dtype(), xs[0].device());
  float* po = out.mutable_data_ptr<float>();
  for (int64_t j = 0; j < static_cast<int64_t>(xs.size()); ++j) {
    const float* px = xs[j].data_ptr<float>();
    for (int64_t i = 0; i < n; ++i) po[j * n + i] = static_cast<float>(scales[j]) * px[i];
  }
  return out;
}

// A new tensor of shape `shape`, every element value + the sum of x.
tp::Tensor Filled(tp::TensorView x, tp::IntArrayView shape, double value) {
  TENSORPLUG_CHECK(x.dtype() == tp::kFloat32 && x.is_contiguous(), ValueError) << "filled: x must be float32";
  float total = 0;
  const float* px = x.data_ptr<float>();
  for (int64_t i = 0; i < x.numel(); ++i) total += px[i];
  tp::Tensor out = tp::Tensor::FromEnvAlloc(shape, x.dtype(), x.device());
  float* po = out.mutable_data_ptr<float>();
  for (int64_t i = 0; i < out.numel(); ++i) po[i] = static_cast<float>(value) + total;
  return out;
}

// x + the sum of extra (when given) + the sum of offsets (when given), as a new tensor like x.
tp::Tensor PlusOptional(tp::TensorView x, std::optional<tp::TensorViewList> extra,
                        std::optional<tp::IntArrayView> offsets) {
  TENSORPLUG_CHECK(x.dim() == 1 && x.dtype() == tp::kFloat32, ValueError) << "plus_optional: x must be float32 1-d";
  if (extra) CheckItems(*extra, x.numel(), "plus_optional");
  float shift = 0;
  if (offsets)
    for (int64_t v : *offsets) shift += static_cast<float>(v);
  tp::Tensor out = tp::Tensor::FromEnvAlloc(x.shape(), x.dtype(), x.device());
  float* po = out.mutable_data_ptr<float>();
  const float* px = x.data_ptr<float>();
  for (int64_t i = 0; i < x.numel(); ++i) {
    po[i] = px[i] + shift;
    if (extra)
      for (tp::TensorView e : *extra) po[i] += e.data_ptr<float>()[i];
  }
  return out;
}

}  // namespace

TENSORPLUG_EXPORT(weighted_sum, WeightedSum, "xs", "weights", "out");
TENSORPLUG_EXPORT(stack_scaled, StackScaled, "xs", "scales");
TENSORPLUG_EXPORT(filled, Filled, "x", "shape", "value");
TENSORPLUG_EXPORT(plus_optional, PlusOptional, "x", "extra", "offsets");
