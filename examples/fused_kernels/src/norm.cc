// RMSNorm and fused residual-add + RMSNorm, forward and backward.
//
//   rms_norm(x, weight, eps)             = x / sqrt(mean(x^2, -1) + eps) * weight
//   add_rms_norm(x, residual, weight, eps) = (rms_norm(h, weight, eps), h), h = x + residual
//
// One pass over a row computes its sum of squares, a second writes the output (the row is
// in L1 by then). Rows are spread over the thread pool; the sums run in float32.
#include "common.h"

#include <tuple>

namespace fused {
namespace {

// The checks common to the norms: x is [..., n] float, weight is [n] float.
void CheckNormArgs(const char* fn, const tp::TensorView& x, const tp::TensorView& weight, double eps) {
  CheckCpu(x, fn, "x");
  CheckCpu(weight, fn, "weight");
  FloatElem(x, fn, "x");
  FloatElem(weight, fn, "weight");
  TENSORPLUG_CHECK(x.dim() >= 1, ValueError) << fn << "() argument 'x': expected at least 1 dimension, got a scalar";
  TENSORPLUG_CHECK(weight.dim() == 1 && weight.size(0) == x.size(-1), ValueError)
      << fn << "() argument 'weight': expected shape [" << x.size(-1) << "] (the last dimension of 'x'), got "
      << weight.sizes();
  TENSORPLUG_CHECK(eps >= 0 && std::isfinite(eps), ValueError)
      << fn << "() argument 'eps': expected a finite number >= 0, got " << eps;
}

std::vector<float> WeightAsFloat(const tp::TensorView& weight) {
  const int64_t n = weight.size(0);
  std::vector<float> w(static_cast<size_t>(n));
  const float* p = LoadRow(weight.data_ptr(), FloatElem(weight, "", ""), 0, n, weight.stride(0), w.data());
  if (p != w.data()) std::memcpy(w.data(), p, static_cast<size_t>(n) * 4);
  return w;
}

inline float InvRms(const float* h, int64_t n, float eps) {
  float ss = 0;
#pragma omp simd reduction(+ : ss)
  for (int64_t i = 0; i < n; ++i) ss += h[i] * h[i];
  return 1.0f / std::sqrt(ss / static_cast<float>(n) + eps);
}

inline void Normalize(const float* h, const float* w, float inv, int64_t n, float* out) {
#pragma omp simd
  for (int64_t i = 0; i < n; ++i) out[i] = h[i] * inv * w[i];
}

tp::Tensor RmsNorm(tp::TensorView x, tp::TensorView weight, double eps) {
  CheckNormArgs("rms_norm", x, weight, eps);
  const Elem e = FloatElem(x, "rms_norm", "x");
  const Rows rows(x);
  const int64_t n = rows.cols;
  tp::Tensor out = tp::Tensor::FromEnvAlloc(x.shape(), x.dtype(), x.device());
  const std::vector<float> w = WeightAsFloat(weight);
  const void* px = x.data_ptr();
  void* po = out.mutable_data_ptr();
  const float feps = static_cast<float>(eps);
  ForRows(rows.rows, 2 * n, [&](int64_t begin, int64_t end) {
    float* in = Scratch(0, n);
    float* res = Scratch(1, n);
    for (int64_t r = begin; r < end; ++r) {
      const float* h = LoadRow(px, e, rows.Offset(r), n, rows.col_stride, in);
      Normalize(h, w.data(), InvRms(h, n, feps), n, res);
      StoreRow(res, po, e, r * n, n, 1);
    }
  });
  return out;
}

std::tuple<tp::Tensor, tp::Tensor> AddRmsNorm(tp::TensorView x, tp::TensorView residual, tp::TensorView weight,
                                              double eps) {
  CheckNormArgs("add_rms_norm", x, weight, eps);
  CheckCpu(residual, "add_rms_norm", "residual");
  TENSORPLUG_CHECK(residual.sizes() == x.sizes(), ValueError)
      << "add_rms_norm() argument 'residual': expected the shape of 'x' " << x.sizes() << ", got "
      << residual.sizes();
  const Elem e = FloatElem(x, "add_rms_norm", "x");
  TENSORPLUG_CHECK(FloatElem(residual, "add_rms_norm", "residual") == e, TypeError)
      << "add_rms_norm() argument 'residual': expected the dtype of 'x' (" << x.dtype() << "), got "
      << residual.dtype();
  const Rows xr(x), rr(residual);
  const int64_t n = xr.cols;
  tp::Tensor out = tp::Tensor::FromEnvAlloc(x.shape(), x.dtype(), x.device());
  tp::Tensor sum = tp::Tensor::FromEnvAlloc(x.shape(), x.dtype(), x.device());
  const std::vector<float> w = WeightAsFloat(weight);
  const void* px = x.data_ptr();
  const void* pr = residual.data_ptr();
  void* po = out.mutable_data_ptr();
  void* ps = sum.mutable_data_ptr();
  const float feps = static_cast<float>(eps);
  ForRows(xr.rows, 3 * n, [&](int64_t begin, int64_t end) {
    float* a = Scratch(0, n);
    float* b = Scratch(1, n);
    float* h = Scratch(2, n);
    for (int64_t r = begin; r < end; ++r) {
      const float* xa = LoadRow(px, e, xr.Offset(r), n, xr.col_stride, a);
      const float* ra = LoadRow(pr, e, rr.Offset(r), n, rr.col_stride, b);
#pragma omp simd
      for (int64_t i = 0; i < n; ++i) h[i] = xa[i] + ra[i];
      StoreRow(h, ps, e, r * n, n, 1);
      // Normalize the sum as stored (rounded to bfloat16 for bfloat16), as the unfused
      // x + residual followed by rms_norm does.
      const float* hs = e == Elem::kFloat32 ? h : LoadRow(ps, e, r * n, n, 1, a);
      Normalize(hs, w.data(), InvRms(hs, n, feps), n, b);
      StoreRow(b, po, e, r * n, n, 1);
    }
  });
  return {std::move(out), std::move(sum)};
}

// Backward of y = h * inv * w, inv = (mean(h^2) + eps)^-1/2, per row:
//   dh = inv * (g*w - hhat * mean(g*w*hhat)),  hhat = h * inv;   dw = sum over rows of g * hhat.
// `extra` (may be undefined) is added to dh: the gradient reaching h from another use (the
// residual stream in add_rms_norm).
std::tuple<tp::Tensor, tp::Tensor> NormBackward(const char* fn, const tp::TensorView& grad, const tp::TensorView& h,
                                                const tp::TensorView& extra, const tp::TensorView& weight,
                                                double eps) {
  CheckNormArgs(fn, h, weight, eps);
  CheckCpu(grad, fn, "grad");
  TENSORPLUG_CHECK(grad.sizes() == h.sizes(), ValueError)
      << fn << "() argument 'grad': expected the shape " << h.sizes() << ", got " << grad.sizes();
  const Elem e = FloatElem(h, fn, "x");
  const Elem eg = FloatElem(grad, fn, "grad");
  Elem ee = e;
  if (extra.defined()) {
    CheckCpu(extra, fn, "grad_residual");
    ee = FloatElem(extra, fn, "grad_residual");
    TENSORPLUG_CHECK(extra.sizes() == h.sizes(), ValueError)
        << fn << "() argument 'grad_residual': expected the shape " << h.sizes() << ", got " << extra.sizes();
  }
  const Rows hr(h), gr(grad);
  const Rows xr = extra.defined() ? Rows(extra) : Rows(h);
  const int64_t n = hr.cols;
  tp::Tensor dh = tp::Tensor::FromEnvAlloc(h.shape(), h.dtype(), h.device());
  tp::Tensor dw = tp::Tensor::FromEnvAlloc(weight.shape(), weight.dtype(), weight.device());
  const std::vector<float> w = WeightAsFloat(weight);
  const int threads = ThreadPool::Get().threads();
  std::vector<float> dw_parts(static_cast<size_t>(threads + 1) * static_cast<size_t>(n), 0.0f);
  std::atomic<int> next_part{0};
  const float feps = static_cast<float>(eps);
  ForRows(hr.rows, 4 * n, [&](int64_t begin, int64_t end) {
    float* dw_acc = dw_parts.data() + static_cast<size_t>(next_part.fetch_add(1)) * static_cast<size_t>(n);
    float* a = Scratch(0, n);
    float* b = Scratch(1, n);
    float* c = Scratch(2, n);
    float* out = Scratch(3, n);
    for (int64_t r = begin; r < end; ++r) {
      const float* hv = LoadRow(h.data_ptr(), e, hr.Offset(r), n, hr.col_stride, a);
      const float* g = LoadRow(grad.data_ptr(), eg, gr.Offset(r), n, gr.col_stride, b);
      const float inv = InvRms(hv, n, feps);
      float dot = 0;
#pragma omp simd reduction(+ : dot)
      for (int64_t i = 0; i < n; ++i) dot += g[i] * w[i] * hv[i];
      const float mean = dot * inv / static_cast<float>(n);
#pragma omp simd
      for (int64_t i = 0; i < n; ++i) {
        const float hhat = hv[i] * inv;
        out[i] = inv * (g[i] * w[i] - hhat * mean);
        dw_acc[i] += g[i] * hhat;
      }
      if (extra.defined()) {
        const float* x = LoadRow(extra.data_ptr(), ee, xr.Offset(r), n, xr.col_stride, c);
#pragma omp simd
        for (int64_t i = 0; i < n; ++i) out[i] += x[i];
      }
      StoreRow(out, dh.mutable_data_ptr(), e, r * n, n, 1);
    }
  });
  float* total = dw_parts.data();
  for (int p = 1; p < next_part.load(); ++p) {
    const float* part = dw_parts.data() + static_cast<size_t>(p) * static_cast<size_t>(n);
    for (int64_t i = 0; i < n; ++i) total[i] += part[i];
  }
  StoreRow(total, dw.mutable_data_ptr(), FloatElem(weight, fn, "weight"), 0, n, 1);
  return {std::move(dh), std::move(dw)};
}

std::tuple<tp::Tensor, tp::Tensor> RmsNormBackward(tp::TensorView grad, tp::TensorView x, tp::TensorView weight,
                                                   double eps) {
  return NormBackward("rms_norm_backward", grad, x, tp::TensorView(), weight, eps);
}

// add_rms_norm's backward: the gradient of the output `grad` and of the returned sum
// `grad_residual`; returns the gradients of x, residual and weight. x and residual have one
// gradient (that of h = x + residual); it is returned twice, as two tensors, because a
// custom operator's results must not alias (torch.library refuses it): the copy costs one
// pass over [rows, n], small beside the backward's own three.
std::tuple<tp::Tensor, tp::Tensor, tp::Tensor> AddRmsNormBackward(tp::TensorView grad, tp::TensorView grad_residual,
                                                                  tp::TensorView h, tp::TensorView weight,
                                                                  double eps) {
  // Allocated first: under jax.jit allocation k is result k of the op's output rule.
  tp::Tensor dx = tp::Tensor::FromEnvAlloc(h.shape(), h.dtype(), h.device());
  auto [dh, dw] = NormBackward("add_rms_norm_backward", grad, h, grad_residual, weight, eps);
  std::memcpy(dx.mutable_data_ptr(), dh.data_ptr(), static_cast<size_t>(dh.numel() * dh.element_size()));
  return {std::move(dx), std::move(dh), std::move(dw)};
}

}  // namespace
}  // namespace fused

TENSORPLUG_EXPORT(rms_norm, fused::RmsNorm, "x", "weight", "eps");
TENSORPLUG_EXPORT(add_rms_norm, fused::AddRmsNorm, "x", "residual", "weight", "eps");
TENSORPLUG_EXPORT(rms_norm_backward, fused::RmsNormBackward, "grad", "x", "weight", "eps");
TENSORPLUG_EXPORT(add_rms_norm_backward, fused::AddRmsNormBackward, "grad", "grad_residual", "h", "weight", "eps");
