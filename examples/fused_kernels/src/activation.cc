// SiLU-and-multiply (the gated MLP's activation) and softmax over the last dimension,
// forward and backward.
//
//   silu_and_mul(x) = silu(x[..., :d]) * x[..., d:],  silu(a) = a * sigmoid(a),  x is [..., 2d]
//   softmax(x)      = exp(x - max) / sum(exp(x - max))   along the last dimension
//
// One kernel instead of the framework's two or three: the intermediate (silu(a), or exp(x))
// never goes to memory. Exp is the vectorizable one of common.h.
#include "common.h"

namespace fused {
namespace {

void CheckRowsArg(const char* fn, const char* arg, const tp::TensorView& x) {
  CheckCpu(x, fn, arg);
  FloatElem(x, fn, arg);
  TENSORPLUG_CHECK(x.dim() >= 1 && x.size(-1) > 0, ValueError)
      << fn << "() argument '" << arg << "': expected at least 1 dimension and a non-empty last one, got shape "
      << x.sizes();
}

std::vector<int64_t> HalfLast(const tp::TensorView& x) {
  std::vector<int64_t> shape = x.shape().vec();
  shape.back() /= 2;
  return shape;
}

tp::Tensor SiluAndMul(tp::TensorView x) {
  CheckRowsArg("silu_and_mul", "x", x);
  TENSORPLUG_CHECK(x.size(-1) % 2 == 0, ValueError)
      << "silu_and_mul() argument 'x': expected an even last dimension (gate and up halves), got shape "
      << x.sizes();
  const Elem e = FloatElem(x, "silu_and_mul", "x");
  const Rows rows(x);
  const int64_t d = rows.cols / 2;
  tp::Tensor out = tp::Tensor::FromEnvAlloc(HalfLast(x), x.dtype(), x.device());
  const void* px = x.data_ptr();
  void* po = out.mutable_data_ptr();
  ForRows(rows.rows, 4 * d, [&](int64_t begin, int64_t end) {
    float* in = Scratch(0, 2 * d);
    float* res = Scratch(1, d);
    for (int64_t r = begin; r < end; ++r) {
      const float* v = LoadRow(px, e, rows.Offset(r), 2 * d, rows.col_stride, in);
      const float* up = v + d;
#pragma omp simd
      for (int64_t i = 0; i < d; ++i) res[i] = v[i] * Sigmoid(v[i]) * up[i];
      StoreRow(res, po, e, r * d, d, 1);
    }
  });
  return out;
}

// d/da silu(a) * b = b * s * (1 + a * (1 - s)),  d/db = silu(a),  s = sigmoid(a).
tp::Tensor SiluAndMulBackward(tp::TensorView grad, tp::TensorView x) {
  CheckRowsArg("silu_and_mul_backward", "grad", grad);
  CheckRowsArg("silu_and_mul_backward", "x", x);
  std::vector<int64_t> half = HalfLast(x);
  TENSORPLUG_CHECK(x.size(-1) % 2 == 0 && grad.shape().vec() == half, ValueError)
      << "silu_and_mul_backward() argument 'grad': expected the shape of silu_and_mul(x), "
      << tp::IntArrayView(half) << ", got " << grad.sizes();
  const Elem e = FloatElem(x, "silu_and_mul_backward", "x");
  const Elem eg = FloatElem(grad, "silu_and_mul_backward", "grad");
  const Rows xr(x), gr(grad);
  const int64_t d = xr.cols / 2;
  tp::Tensor dx = tp::Tensor::FromEnvAlloc(x.shape(), x.dtype(), x.device());
  ForRows(xr.rows, 8 * d, [&](int64_t begin, int64_t end) {
    float* in = Scratch(0, 2 * d);
    float* gs = Scratch(1, d);
    float* res = Scratch(2, 2 * d);
    for (int64_t r = begin; r < end; ++r) {
      const float* v = LoadRow(x.data_ptr(), e, xr.Offset(r), 2 * d, xr.col_stride, in);
      const float* g = LoadRow(grad.data_ptr(), eg, gr.Offset(r), d, gr.col_stride, gs);
#pragma omp simd
      for (int64_t i = 0; i < d; ++i) {
        const float a = v[i], b = v[d + i];
        const float s = Sigmoid(a);
        res[i] = g[i] * b * s * (1.0f + a * (1.0f - s));
        res[d + i] = g[i] * a * s;
      }
      StoreRow(res, dx.mutable_data_ptr(), e, r * 2 * d, 2 * d, 1);
    }
  });
  return dx;
}

tp::Tensor Softmax(tp::TensorView x) {
  CheckRowsArg("softmax", "x", x);
  const Elem e = FloatElem(x, "softmax", "x");
  const Rows rows(x);
  const int64_t n = rows.cols;
  tp::Tensor out = tp::Tensor::FromEnvAlloc(x.shape(), x.dtype(), x.device());
  const void* px = x.data_ptr();
  void* po = out.mutable_data_ptr();
  ForRows(rows.rows, 4 * n, [&](int64_t begin, int64_t end) {
    float* in = Scratch(0, n);
    float* res = Scratch(1, n);
    for (int64_t r = begin; r < end; ++r) {
      const float* v = LoadRow(px, e, rows.Offset(r), n, rows.col_stride, in);
      float m = v[0];
#pragma omp simd reduction(max : m)
      for (int64_t i = 0; i < n; ++i) m = std::max(m, v[i]);
      float sum = 0;
#pragma omp simd reduction(+ : sum)
      for (int64_t i = 0; i < n; ++i) {
        res[i] = Exp(v[i] - m);
        sum += res[i];
      }
      const float inv = 1.0f / sum;
#pragma omp simd
      for (int64_t i = 0; i < n; ++i) res[i] *= inv;
      StoreRow(res, po, e, r * n, n, 1);
    }
  });
  return out;
}

// dx = y * (g - sum(g * y)) per row, from the forward's output y.
tp::Tensor SoftmaxBackward(tp::TensorView grad, tp::TensorView y) {
  CheckRowsArg("softmax_backward", "grad", grad);
  CheckRowsArg("softmax_backward", "y", y);
  TENSORPLUG_CHECK(grad.sizes() == y.sizes(), ValueError)
      << "softmax_backward() argument 'grad': expected the shape of 'y' " << y.sizes() << ", got " << grad.sizes();
  const Elem e = FloatElem(y, "softmax_backward", "y");
  const Elem eg = FloatElem(grad, "softmax_backward", "grad");
  const Rows yr(y), gr(grad);
  const int64_t n = yr.cols;
  tp::Tensor dx = tp::Tensor::FromEnvAlloc(y.shape(), y.dtype(), y.device());
  ForRows(yr.rows, 4 * n, [&](int64_t begin, int64_t end) {
    float* a = Scratch(0, n);
    float* b = Scratch(1, n);
    float* res = Scratch(2, n);
    for (int64_t r = begin; r < end; ++r) {
      const float* yv = LoadRow(y.data_ptr(), e, yr.Offset(r), n, yr.col_stride, a);
      const float* g = LoadRow(grad.data_ptr(), eg, gr.Offset(r), n, gr.col_stride, b);
      float dot = 0;
#pragma omp simd reduction(+ : dot)
      for (int64_t i = 0; i < n; ++i) dot += g[i] * yv[i];
#pragma omp simd
      for (int64_t i = 0; i < n; ++i) res[i] = yv[i] * (g[i] - dot);
      StoreRow(res, dx.mutable_data_ptr(), e, r * n, n, 1);
    }
  });
  return dx;
}

}  // namespace
}  // namespace fused

TENSORPLUG_EXPORT(silu_and_mul, fused::SiluAndMul, "x");
TENSORPLUG_EXPORT(silu_and_mul_backward, fused::SiluAndMulBackward, "grad", "x");
TENSORPLUG_EXPORT(softmax, fused::Softmax, "x");
TENSORPLUG_EXPORT(softmax_backward, fused::SoftmaxBackward, "grad", "y");
