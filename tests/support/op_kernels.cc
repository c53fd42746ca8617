// Kernels declared as ops by tests/support/op_kernels.py (tensorplug.op), for the op tests of
// every framework (tests/*/test_op*.py). Host memory, float32 and float64, any strides in;
// results are new contiguous tensors from the caller's allocator.
#include <tensorplug/tensorplug.h>

#include <optional>
#include <tuple>
#include <vector>

namespace tp = tensorplug;

namespace {

void CheckHost(const tp::TensorView& x, const char* fn) {
  TENSORPLUG_CHECK(x.device().device_type == kDLCPU, ValueError) << fn << ": expected a CPU tensor";
}

// Element offsets of x in row-major order (ForEachOffset collected), for two-tensor loops.
std::vector<int64_t> Offsets(const tp::TensorView& x) {
  std::vector<int64_t> offsets;
  offsets.reserve(static_cast<size_t>(x.numel()));
  tp::ForEachOffset(x, [&](int64_t o) { offsets.push_back(o); });
  return offsets;
}

// out = alpha * x + y, written into the caller's `out` (destination passing).
void Axpy(tp::TensorView x, tp::TensorView y, tp::MutableView out, double alpha) {
  CheckHost(x, "axpy");
  TENSORPLUG_CHECK(x.sizes() == y.sizes() && x.sizes() == out.sizes(), ValueError)
      << "axpy: x, y and out must have one shape, got " << x.sizes() << ", " << y.sizes() << ", " << out.sizes();
  TENSORPLUG_CHECK(x.dtype() == y.dtype() && x.dtype() == out.dtype(), TypeError) << "axpy: dtype mismatch";
  const auto ox = Offsets(x), oy = Offsets(y), oo = Offsets(out);
  TENSORPLUG_DISPATCH_FLOATING_TYPES(x, "axpy", [&] {
    const scalar_t* px = x.data_ptr<scalar_t>();
    const scalar_t* py = y.data_ptr<scalar_t>();
    scalar_t* po = out.mutable_data_ptr<scalar_t>();
    for (size_t i = 0; i < ox.size(); ++i) po[oo[i]] = static_cast<scalar_t>(alpha) * px[ox[i]] + py[oy[i]];
  });
}

// alpha * x (+ bias, when given) in a new tensor like x.
tp::Tensor Scale(tp::TensorView x, double alpha, std::optional<tp::TensorView> bias) {
  CheckHost(x, "scale");
  if (bias) {
    TENSORPLUG_CHECK(bias->sizes() == x.sizes() && bias->dtype() == x.dtype(), ValueError)
        << "scale: bias must be like x";
  }
  tp::Tensor out = tp::Tensor::FromEnvAlloc(x.shape(), x.dtype(), x.device());
  const auto ox = Offsets(x);
  const auto ob = bias ? Offsets(*bias) : std::vector<int64_t>();
  TENSORPLUG_DISPATCH_FLOATING_TYPES(x, "scale", [&] {
    const scalar_t* px = x.data_ptr<scalar_t>();
    const scalar_t* pb = bias ? bias->data_ptr<scalar_t>() : nullptr;
    scalar_t* po = out.mutable_data_ptr<scalar_t>();
    for (size_t i = 0; i < ox.size(); ++i) {
      po[i] = static_cast<scalar_t>(alpha) * px[ox[i]] + (pb != nullptr ? pb[ob[i]] : scalar_t(0));
    }
  });
  return out;
}

// The sums of the rows of a 2-d x: shape (x.shape[0],), x's dtype.
tp::Tensor RowSum(tp::TensorView x) {
  CheckHost(x, "row_sum");
  TENSORPLUG_CHECK(x.dim() == 2, ValueError) << "row_sum: expected a 2-d tensor, got " << x.dim() << " dimensions";
  tp::Tensor out = tp::Tensor::FromEnvAlloc({x.size(0)}, x.dtype(), x.device());
  TENSORPLUG_DISPATCH_FLOATING_TYPES(x, "row_sum", [&] {
    const scalar_t* px = x.data_ptr<scalar_t>();
    scalar_t* po = out.mutable_data_ptr<scalar_t>();
    for (int64_t i = 0; i < x.size(0); ++i) {
      scalar_t total = 0;
      for (int64_t j = 0; j < x.size(1); ++j) total += px[i * x.stride(0) + j * x.stride(1)];
      po[i] = total;
    }
  });
  return out;
}

// x (1-d) with `before` copies of `value` in front and `after` behind.
tp::Tensor Pad(tp::TensorView x, int64_t before, int64_t after, double value) {
  CheckHost(x, "pad");
  TENSORPLUG_CHECK(x.dim() == 1 && before >= 0 && after >= 0, ValueError)
      << "pad: expected a 1-d tensor and before, after >= 0";
  tp::Tensor out = tp::Tensor::FromEnvAlloc({before + x.size(0) + after}, x.dtype(), x.device());
  TENSORPLUG_DISPATCH_FLOATING_TYPES(x, "pad", [&] {
    const scalar_t* px = x.data_ptr<scalar_t>();
    scalar_t* po = out.mutable_data_ptr<scalar_t>();
    for (int64_t i = 0; i < out.numel(); ++i) {
      const int64_t j = i - before;
      po[i] = (j >= 0 && j < x.size(0)) ? px[j * x.stride(0)] : static_cast<scalar_t>(value);
    }
  });
  return out;
}

// [0, 1, ..., n-1] of `dtype` on `device` (no tensor argument).
tp::Tensor Arange(int64_t n, DLDataType dtype, DLDevice device) {
  TENSORPLUG_CHECK(n >= 0, ValueError) << "arange: n must be >= 0, got " << n;
  TENSORPLUG_CHECK(device.device_type == kDLCPU, ValueError) << "arange: CPU only";
  tp::Tensor out = tp::Tensor::FromEnvAlloc({n}, dtype, device);
  TENSORPLUG_DISPATCH_FLOATING_TYPES(dtype, "arange", [&] {
    scalar_t* po = out.mutable_data_ptr<scalar_t>();
    for (int64_t i = 0; i < n; ++i) po[i] = static_cast<scalar_t>(i);
  });
  return out;
}

// (x + 1, 2 * x): two tensors like x.
std::tuple<tp::Tensor, tp::Tensor> PlusAndTwice(tp::TensorView x) {
  CheckHost(x, "plus_and_twice");
  tp::Tensor plus = tp::Tensor::FromEnvAlloc(x.shape(), x.dtype(), x.device());
  tp::Tensor twice = tp::Tensor::FromEnvAlloc(x.shape(), x.dtype(), x.device());
  const auto ox = Offsets(x);
  TENSORPLUG_DISPATCH_FLOATING_TYPES(x, "plus_and_twice", [&] {
    const scalar_t* px = x.data_ptr<scalar_t>();
    scalar_t* pp = plus.mutable_data_ptr<scalar_t>();
    scalar_t* pt = twice.mutable_data_ptr<scalar_t>();
    for (size_t i = 0; i < ox.size(); ++i) {
      pp[i] = px[ox[i]] + 1;
      pt[i] = 2 * px[ox[i]];
    }
  });
  return {plus, twice};
}

}  // namespace

TENSORPLUG_EXPORT(axpy, Axpy, "x", "y", "out", "alpha");
TENSORPLUG_EXPORT(scale, Scale, "x", "alpha", "bias");
TENSORPLUG_EXPORT(row_sum, RowSum, "x");
TENSORPLUG_EXPORT(pad, Pad, "x", "before", "after", "value");
TENSORPLUG_EXPORT(arange, Arange, "n", "dtype", "device");
TENSORPLUG_EXPORT(plus_and_twice, PlusAndTwice, "x");
