// Sampling the next token from logits [batch, vocab]:
//   sample_greedy(logits)                        -> int64 [batch], argmax (the first on ties)
//   sample_top_k(logits, k, temperature, seed)   -> int64 [batch], a draw from the softmax of
//       the k largest logits divided by temperature (ties between equal logits broken by the
//       lower index). The draw is reproducible: seed and row give the random number
//       (splitmix64), so one seed gives the same tokens in every framework.
#include "common.h"

#include <numeric>

namespace fused {
namespace {

void CheckLogits(const char* fn, const tp::TensorView& logits) {
  CheckCpu(logits, fn, "logits");
  FloatElem(logits, fn, "logits");
  CheckDim(logits, 2, fn, "logits");
  TENSORPLUG_CHECK(logits.size(1) > 0, ValueError)
      << fn << "() argument 'logits': expected [batch, vocab] with vocab > 0, got shape " << logits.sizes();
}

tp::Tensor SampleGreedy(tp::TensorView logits) {
  CheckLogits("sample_greedy", logits);
  const Elem e = FloatElem(logits, "sample_greedy", "logits");
  const Rows rows(logits);
  const int64_t v = rows.cols;
  tp::Tensor out = tp::Tensor::FromEnvAlloc({rows.rows}, tp::kInt64, logits.device());
  int64_t* po = out.mutable_data_ptr<int64_t>();
  ForRows(rows.rows, v, [&](int64_t begin, int64_t end) {
    float* in = Scratch(0, v);
    for (int64_t r = begin; r < end; ++r) {
      const float* x = LoadRow(logits.data_ptr(), e, rows.Offset(r), v, rows.col_stride, in);
      // The maximum first (vectorized), then its first index.
      float m = x[0];
#pragma omp simd reduction(max : m)
      for (int64_t i = 0; i < v; ++i) m = std::max(m, x[i]);
      int64_t best = 0;
      while (best < v && !(x[best] == m)) ++best;
      po[r] = best < v ? best : 0;  // all NaN: token 0
    }
  });
  return out;
}

inline uint64_t SplitMix64(uint64_t z) {
  z += 0x9e3779b97f4a7c15ull;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

tp::Tensor SampleTopK(tp::TensorView logits, int64_t k, double temperature, int64_t seed) {
  CheckLogits("sample_top_k", logits);
  const Elem e = FloatElem(logits, "sample_top_k", "logits");
  const Rows rows(logits);
  const int64_t v = rows.cols;
  TENSORPLUG_CHECK(k >= 1 && k <= v, ValueError)
      << "sample_top_k() argument 'k': expected 1 <= k <= vocab (" << v << "), got " << k;
  TENSORPLUG_CHECK(temperature > 0 && std::isfinite(temperature), ValueError)
      << "sample_top_k() argument 'temperature': expected a finite number > 0, got " << temperature;
  tp::Tensor out = tp::Tensor::FromEnvAlloc({rows.rows}, tp::kInt64, logits.device());
  int64_t* po = out.mutable_data_ptr<int64_t>();
  const float inv_t = static_cast<float>(1.0 / temperature);
  ForRows(rows.rows, 4 * v, [&](int64_t begin, int64_t end) {
    float* in = Scratch(0, v);
    std::vector<int64_t> idx(static_cast<size_t>(v));
    std::vector<double> p(static_cast<size_t>(k));
    for (int64_t r = begin; r < end; ++r) {
      const float* x = LoadRow(logits.data_ptr(), e, rows.Offset(r), v, rows.col_stride, in);
      std::iota(idx.begin(), idx.end(), int64_t{0});
      auto before = [x](int64_t a, int64_t b) { return x[a] > x[b] || (x[a] == x[b] && a < b); };
      std::partial_sort(idx.begin(), idx.begin() + k, idx.end(), before);
      const float top = x[idx[0]];
      double total = 0;
      for (int64_t i = 0; i < k; ++i) total += p[i] = std::exp(static_cast<double>((x[idx[i]] - top) * inv_t));
      // A uniform number in [0, 1) from 53 random bits.
      const uint64_t bits = SplitMix64(static_cast<uint64_t>(seed) ^ SplitMix64(static_cast<uint64_t>(r)));
      const double u = static_cast<double>(bits >> 11) * (1.0 / 9007199254740992.0) * total;
      int64_t pick = k - 1;
      double acc = 0;
      for (int64_t i = 0; i < k; ++i) {
        acc += p[i];
        if (u < acc) {
          pick = i;
          break;
        }
      }
      po[r] = idx[pick];
    }
  });
  return out;
}

}  // namespace
}  // namespace fused

TENSORPLUG_EXPORT(sample_greedy, fused::SampleGreedy, "logits");
TENSORPLUG_EXPORT(sample_top_k, fused::SampleTopK, "logits", "k", "temperature", "seed");
