// A fused RMSNorm and its backward: y = x / sqrt(mean(x^2, last dim) + eps) * weight.
// x is 2-d (rows, features), weight 1-d (features); float32 or float64, host memory, any strides.
// Declared as one op with its backward in train.py, and trained from torch and from jax.
#include <tensorplug/tensorplug.h>

#include <cmath>
#include <tuple>
#include <vector>

namespace tp = tensorplug;

namespace {

void Check(const tp::TensorView& x, const tp::TensorView& weight, const char* fn) {
  TENSORPLUG_CHECK(x.device().device_type == kDLCPU && weight.device().device_type == kDLCPU, ValueError)
      << fn << ": expected CPU tensors";
  TENSORPLUG_CHECK(x.dim() == 2 && weight.dim() == 1 && weight.size(0) == x.size(1), ValueError)
      << fn << ": expected x of shape (rows, n) and weight of shape (n,), got " << x.sizes() << " and "
      << weight.sizes();
  TENSORPLUG_CHECK(x.dtype() == weight.dtype(), TypeError) << fn << ": x and weight must have one dtype";
}

// 1 / sqrt(mean(x[i]^2) + eps) of each row i.
template <typename T>
std::vector<double> InverseRms(const tp::TensorView& x, double eps) {
  const T* px = x.data_ptr<T>();
  std::vector<double> r(static_cast<size_t>(x.size(0)));
  for (int64_t i = 0; i < x.size(0); ++i) {
    double total = 0;
    for (int64_t j = 0; j < x.size(1); ++j) {
      const double v = px[i * x.stride(0) + j * x.stride(1)];
      total += v * v;
    }
    r[i] = 1.0 / std::sqrt(total / static_cast<double>(x.size(1)) + eps);
  }
  return r;
}

tp::Tensor RmsNorm(tp::TensorView x, tp::TensorView weight, double eps) {
  Check(x, weight, "rms_norm");
  tp::Tensor y = tp::Tensor::FromEnvAlloc(x.shape(), x.dtype(), x.device());
  TENSORPLUG_DISPATCH_FLOATING_TYPES(x, "rms_norm", [&] {
    const auto r = InverseRms<scalar_t>(x, eps);
    const scalar_t* px = x.data_ptr<scalar_t>();
    const scalar_t* pw = weight.data_ptr<scalar_t>();
    scalar_t* py = y.mutable_data_ptr<scalar_t>();
    const int64_t n = x.size(1);
    for (int64_t i = 0; i < x.size(0); ++i) {
      for (int64_t j = 0; j < n; ++j) {
        py[i * n + j] = static_cast<scalar_t>(px[i * x.stride(0) + j * x.stride(1)] * r[i] * pw[j * weight.stride(0)]);
      }
    }
  });
  return y;
}

// With r the row's inverse rms and n the features:
//   grad_x[i, j]  = r g[i, j] w[j] - x[i, j] r^3 / n * sum_k g[i, k] w[k] x[i, k]
//   grad_weight[j] = sum_i g[i, j] x[i, j] r_i
std::tuple<tp::Tensor, tp::Tensor> RmsNormBackward(tp::TensorView grad, tp::TensorView x, tp::TensorView weight,
                                                    double eps) {
  Check(x, weight, "rms_norm_backward");
  TENSORPLUG_CHECK(grad.sizes() == x.sizes() && grad.dtype() == x.dtype(), ValueError)
      << "rms_norm_backward: grad must be like x, got " << grad.sizes();
  tp::Tensor grad_x = tp::Tensor::FromEnvAlloc(x.shape(), x.dtype(), x.device());
  tp::Tensor grad_weight = tp::Tensor::FromEnvAlloc(weight.shape(), weight.dtype(), weight.device());
  TENSORPLUG_DISPATCH_FLOATING_TYPES(x, "rms_norm_backward", [&] {
    const auto r = InverseRms<scalar_t>(x, eps);
    const scalar_t* pg = grad.data_ptr<scalar_t>();
    const scalar_t* px = x.data_ptr<scalar_t>();
    const scalar_t* pw = weight.data_ptr<scalar_t>();
    scalar_t* pgx = grad_x.mutable_data_ptr<scalar_t>();
    scalar_t* pgw = grad_weight.mutable_data_ptr<scalar_t>();
    const int64_t n = x.size(1);
    std::vector<double> gw(static_cast<size_t>(n), 0.0);
    for (int64_t i = 0; i < x.size(0); ++i) {
      auto g = [&](int64_t j) { return static_cast<double>(pg[i * grad.stride(0) + j * grad.stride(1)]); };
      auto xv = [&](int64_t j) { return static_cast<double>(px[i * x.stride(0) + j * x.stride(1)]); };
      auto w = [&](int64_t j) { return static_cast<double>(pw[j * weight.stride(0)]); };
      double dot = 0;
      for (int64_t k = 0; k < n; ++k) dot += g(k) * w(k) * xv(k);
      const double ri = r[i], coef = ri * ri * ri * dot / static_cast<double>(n);
      for (int64_t j = 0; j < n; ++j) {
        pgx[i * n + j] = static_cast<scalar_t>(ri * g(j) * w(j) - xv(j) * coef);
        gw[j] += g(j) * xv(j) * ri;
      }
    }
    for (int64_t j = 0; j < n; ++j) pgw[j] = static_cast<scalar_t>(gw[j]);
  });
  return {grad_x, grad_weight};
}

}  // namespace

TENSORPLUG_EXPORT(rms_norm, RmsNorm, "x", "weight", "eps");
TENSORPLUG_EXPORT(rms_norm_backward, RmsNormBackward, "grad", "x", "weight", "eps");
