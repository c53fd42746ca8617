// Weight-only int8 linear layers: y = x @ (w * scales[:, None]).T with w int8 [n, k] and
// one float32 scale per output channel (row of w), x float32 or bfloat16.
//
// Decoding is bound by reading the weights: int8 reads a quarter of the bytes of float32.
// The kernel converts int8 to float in registers and never writes a dequantized weight:
//   - int8_matvec: x [k] -> [n]; each output is one dot product over a weight row, rows
//     spread over the thread pool;
//   - int8_matmul: x [m, k] -> [m, n]; a block of 4 weight rows is converted to float once
//     (scratch, in L1/L2) and used for all m rows of x.
// quantize_int8(w) makes the (int8 weight, scales) pair: symmetric, per row, scale = max|w| / 127.
#include "common.h"

#include <tuple>

namespace fused {
namespace {

struct Weights {
  const int8_t* data;
  int64_t n, k, row_stride;
  std::vector<float> scales;
};

Weights CheckWeights(const char* fn, const tp::TensorView& w, const tp::TensorView& scales, int64_t k) {
  CheckCpu(w, fn, "w");
  CheckCpu(scales, fn, "scales");
  CheckDtype(w, tp::kInt8, fn, "w");
  CheckDim(w, 2, fn, "w");
  TENSORPLUG_CHECK(w.size(1) == k, ValueError)
      << fn << "() argument 'w': expected [n, " << k << "] (k = the last dimension of 'x'), got shape "
      << w.sizes();
  TENSORPLUG_CHECK(w.stride(1) == 1 || w.size(1) == 1, ValueError)
      << fn << "() argument 'w': expected rows of unit stride (a weight as quantize_int8 makes it, or a slice of "
      << "its rows), got strides " << w.strides();
  CheckDtype(scales, tp::kFloat32, fn, "scales");
  TENSORPLUG_CHECK(scales.dim() == 1 && scales.size(0) == w.size(0), ValueError)
      << fn << "() argument 'scales': expected shape [" << w.size(0) << "] (one per row of 'w'), got "
      << scales.sizes();
  Weights out{w.data_ptr<int8_t>(), w.size(0), k, w.size(0) > 1 ? w.stride(0) : k, {}};
  out.scales.resize(static_cast<size_t>(out.n));
  const float* ps = scales.data_ptr<float>();
  for (int64_t i = 0; i < out.n; ++i) out.scales[i] = ps[i * scales.stride(0)];
  return out;
}

inline float DotInt8(const float* x, const int8_t* w, int64_t k) {
  float acc = 0;
#pragma omp simd reduction(+ : acc)
  for (int64_t i = 0; i < k; ++i) acc += x[i] * static_cast<float>(w[i]);
  return acc;
}

tp::Tensor Int8Matvec(tp::TensorView x, tp::TensorView w, tp::TensorView scales) {
  CheckCpu(x, "int8_matvec", "x");
  const Elem e = FloatElem(x, "int8_matvec", "x");
  CheckDim(x, 1, "int8_matvec", "x");
  const int64_t k = x.size(0);
  const Weights wt = CheckWeights("int8_matvec", w, scales, k);
  tp::Tensor out = tp::Tensor::FromEnvAlloc({wt.n}, x.dtype(), x.device());
  std::vector<float> xs(static_cast<size_t>(k));
  const float* xv = LoadRow(x.data_ptr(), e, 0, k, x.stride(0), xs.data());
  std::vector<float> y(static_cast<size_t>(wt.n));
  ForRows(wt.n, k, [&](int64_t begin, int64_t end) {
    for (int64_t j = begin; j < end; ++j) y[j] = DotInt8(xv, wt.data + j * wt.row_stride, k) * wt.scales[j];
  });
  StoreRow(y.data(), out.mutable_data_ptr(), e, 0, wt.n, 1);
  return out;
}

tp::Tensor Int8Matmul(tp::TensorView x, tp::TensorView w, tp::TensorView scales) {
  CheckCpu(x, "int8_matmul", "x");
  const Elem e = FloatElem(x, "int8_matmul", "x");
  CheckDim(x, 2, "int8_matmul", "x");
  const int64_t m = x.size(0), k = x.size(1);
  const Weights wt = CheckWeights("int8_matmul", w, scales, k);
  const int64_t n = wt.n;
  tp::Tensor out = tp::Tensor::FromEnvAlloc({m, n}, x.dtype(), x.device());
  // x as float32 rows, contiguous (read n/4 times: worth one copy).
  std::vector<float> xs(static_cast<size_t>(m * k));
  const Rows xr(x);
  for (int64_t r = 0; r < m; ++r) {
    const float* row = LoadRow(x.data_ptr(), e, xr.Offset(r), k, xr.col_stride, xs.data() + r * k);
    if (row != xs.data() + r * k) std::memcpy(xs.data() + r * k, row, static_cast<size_t>(k) * 4);
  }
  std::vector<float> y(static_cast<size_t>(m * n));
  constexpr int64_t kBlock = 4;
  const int64_t blocks = (n + kBlock - 1) / kBlock;
  ForRows(blocks, kBlock * k * m, [&](int64_t begin, int64_t end) {
    float* wf = Scratch(0, kBlock * k);
    for (int64_t b = begin; b < end; ++b) {
      const int64_t j0 = b * kBlock, nb = std::min(kBlock, n - j0);
      for (int64_t jj = 0; jj < nb; ++jj) {
        const int8_t* src = wt.data + (j0 + jj) * wt.row_stride;
        float* dst = wf + jj * k;
#pragma omp simd
        for (int64_t i = 0; i < k; ++i) dst[i] = static_cast<float>(src[i]);
      }
      for (int64_t r = 0; r < m; ++r) {
        const float* xv = xs.data() + r * k;
        if (nb == kBlock) {
          float a0 = 0, a1 = 0, a2 = 0, a3 = 0;
          const float *w0 = wf, *w1 = wf + k, *w2 = wf + 2 * k, *w3 = wf + 3 * k;
#pragma omp simd reduction(+ : a0, a1, a2, a3)
          for (int64_t i = 0; i < k; ++i) {
            a0 += xv[i] * w0[i];
            a1 += xv[i] * w1[i];
            a2 += xv[i] * w2[i];
            a3 += xv[i] * w3[i];
          }
          float* yr = y.data() + r * n + j0;
          yr[0] = a0 * wt.scales[j0];
          yr[1] = a1 * wt.scales[j0 + 1];
          yr[2] = a2 * wt.scales[j0 + 2];
          yr[3] = a3 * wt.scales[j0 + 3];
        } else {
          for (int64_t jj = 0; jj < nb; ++jj) {
            float acc = 0;
            const float* wr = wf + jj * k;
#pragma omp simd reduction(+ : acc)
            for (int64_t i = 0; i < k; ++i) acc += xv[i] * wr[i];
            y[r * n + j0 + jj] = acc * wt.scales[j0 + jj];
          }
        }
      }
    }
  });
  StoreRow(y.data(), out.mutable_data_ptr(), e, 0, m * n, 1);
  return out;
}

std::tuple<tp::Tensor, tp::Tensor> QuantizeInt8(tp::TensorView w) {
  CheckCpu(w, "quantize_int8", "w");
  const Elem e = FloatElem(w, "quantize_int8", "w");
  CheckDim(w, 2, "quantize_int8", "w");
  const Rows rows(w);
  const int64_t n = rows.rows, k = rows.cols;
  tp::Tensor q = tp::Tensor::FromEnvAlloc({n, k}, tp::kInt8, w.device());
  tp::Tensor scales = tp::Tensor::FromEnvAlloc({n}, tp::kFloat32, w.device());
  int8_t* pq = q.mutable_data_ptr<int8_t>();
  float* ps = scales.mutable_data_ptr<float>();
  ForRows(n, 2 * k, [&](int64_t begin, int64_t end) {
    float* in = Scratch(0, k);
    for (int64_t r = begin; r < end; ++r) {
      const float* v = LoadRow(w.data_ptr(), e, rows.Offset(r), k, rows.col_stride, in);
      float amax = 0;
#pragma omp simd reduction(max : amax)
      for (int64_t i = 0; i < k; ++i) amax = std::max(amax, std::fabs(v[i]));
      const float scale = amax > 0 ? amax / 127.0f : 1.0f;
      const float inv = 1.0f / scale;
      for (int64_t i = 0; i < k; ++i) {
        pq[r * k + i] = static_cast<int8_t>(std::max(-127.0f, std::min(127.0f, std::nearbyint(v[i] * inv))));
      }
      ps[r] = scale;
    }
  });
  return {std::move(q), std::move(scales)};
}

}  // namespace
}  // namespace fused

TENSORPLUG_EXPORT(int8_matvec, fused::Int8Matvec, "x", "w", "scales");
TENSORPLUG_EXPORT(int8_matmul, fused::Int8Matmul, "x", "w", "scales");
TENSORPLUG_EXPORT(quantize_int8, fused::QuantizeInt8, "w");
