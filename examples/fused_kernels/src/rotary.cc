// Rotary position embedding applied in place to queries and keys (the "rotate half" form of
// GPT-NeoX and Llama): for each head vector x = [x1, x2] (halves of head_dim) at position p,
//
//   x1' = x1 * cos - x2 * sin,   x2' = x2 * cos + x1 * sin,   cos, sin = cos_sin_cache[p]
//
// cos_sin_cache is [max_positions, head_dim] float32: cos in its first half, sin in its
// second. q is [..., heads, head_dim] and k [..., kv_heads, head_dim], with one position per
// token (positions has the leading dimensions' count of elements). The backward is the
// inverse rotation (sin negated), applied in place to the gradients.
#include "common.h"

namespace fused {
namespace {

void RotateRows(const char* fn, const char* arg, const tp::MutableView& x, const int64_t* pos, int64_t tokens,
                const float* cache, int64_t max_pos, float sign) {
  CheckCpu(x, fn, arg);
  const Elem e = FloatElem(x, fn, arg);
  TENSORPLUG_CHECK(x.dim() >= 2, ValueError)
      << fn << "() argument '" << arg << "': expected [..., heads, head_dim], got shape " << x.sizes();
  const Rows rows(x);
  const int64_t d = rows.cols, heads = x.size(-2);
  TENSORPLUG_CHECK(rows.rows == tokens * heads, ValueError)
      << fn << "() argument '" << arg << "': expected one position per token (" << tokens
      << " positions), got shape " << x.sizes();
  const int64_t half = d / 2;
  void* px = x.mutable_data_ptr();
  ForRows(rows.rows, 4 * d, [&](int64_t begin, int64_t end) {
    float* in = Scratch(0, d);
    float* res = Scratch(1, d);
    for (int64_t r = begin; r < end; ++r) {
      const int64_t p = pos[r / heads];
      const float* c = cache + p * d;
      const float* s = c + half;
      const float* v = LoadRow(px, e, rows.Offset(r), d, rows.col_stride, in);
#pragma omp simd
      for (int64_t i = 0; i < half; ++i) {
        const float x1 = v[i], x2 = v[half + i], sn = sign * s[i];
        res[i] = x1 * c[i] - x2 * sn;
        res[half + i] = x2 * c[i] + x1 * sn;
      }
      StoreRow(res, px, e, rows.Offset(r), d, rows.col_stride);
    }
  });
  (void)max_pos;
}

void Rotary(const char* fn, const char* q_name, const char* k_name, tp::TensorView positions, tp::MutableView q,
            tp::MutableView k, tp::TensorView cos_sin_cache, float sign) {
  CheckCpu(positions, fn, "positions");
  const DLDataType pt = positions.dtype();
  TENSORPLUG_CHECK(pt.code == kDLInt && (pt.bits == 64 || pt.bits == 32) && pt.lanes == 1, TypeError)
      << fn << "() argument 'positions': expected an int64 or int32 tensor, got " << pt;
  CheckCpu(cos_sin_cache, fn, "cos_sin_cache");
  CheckDtype(cos_sin_cache, tp::kFloat32, fn, "cos_sin_cache");
  CheckDim(cos_sin_cache, 2, fn, "cos_sin_cache");
  TENSORPLUG_CHECK(cos_sin_cache.is_contiguous(), ValueError)
      << fn << "() argument 'cos_sin_cache': expected a contiguous tensor (it is made once per model)";
  const int64_t d = cos_sin_cache.size(1), max_pos = cos_sin_cache.size(0);
  TENSORPLUG_CHECK(d % 2 == 0, ValueError)
      << fn << "() argument 'cos_sin_cache': expected an even head_dim, got shape " << cos_sin_cache.sizes();
  for (const tp::MutableView* x : {&q, &k}) {
    const char* arg = x == &q ? q_name : k_name;
    CheckCpu(*x, fn, arg);
    FloatElem(*x, fn, arg);
    TENSORPLUG_CHECK(x->dim() >= 2 && x->size(-1) == d, ValueError)
        << fn << "() argument '" << arg << "': expected [..., heads, " << d
        << "] (head_dim of 'cos_sin_cache'), got shape " << x->sizes();
  }
  // Positions, gathered to a contiguous list and range-checked before anything is written.
  const int64_t tokens = positions.numel();
  std::vector<int64_t> pos(static_cast<size_t>(tokens));
  int64_t i = 0;
  if (pt.bits == 64) {
    const int64_t* pp = positions.data_ptr<int64_t>();
    tp::ForEachOffset(positions, [&](int64_t o) { pos[static_cast<size_t>(i++)] = pp[o]; });
  } else {  // jax without x64
    const int32_t* pp = positions.data_ptr<int32_t>();
    tp::ForEachOffset(positions, [&](int64_t o) { pos[static_cast<size_t>(i++)] = pp[o]; });
  }
  for (int64_t t = 0; t < tokens; ++t) {
    TENSORPLUG_CHECK(pos[t] >= 0 && pos[t] < max_pos, IndexError)
        << fn << "() argument 'positions': position " << pos[t] << " (token " << t << ") is outside the cache's "
        << max_pos << " positions";
  }
  for (const tp::MutableView* x : {&q, &k}) {
    const char* arg = x == &q ? q_name : k_name;
    Rows rows(*x);
    TENSORPLUG_CHECK(rows.rows == tokens * x->size(-2), ValueError)
        << fn << "() argument '" << arg << "': expected one position per token (" << tokens
        << " positions), got shape " << x->sizes();
  }
  const float* cache = cos_sin_cache.data_ptr<float>();
  RotateRows(fn, q_name, q, pos.data(), tokens, cache, max_pos, sign);
  RotateRows(fn, k_name, k, pos.data(), tokens, cache, max_pos, sign);
}

void RotaryEmbedding(tp::TensorView positions, tp::MutableView q, tp::MutableView k, tp::TensorView cos_sin_cache) {
  Rotary("rotary_embedding", "q", "k", positions, q, k, cos_sin_cache, 1.0f);
}

void RotaryEmbeddingBackward(tp::TensorView positions, tp::MutableView grad_q, tp::MutableView grad_k,
                             tp::TensorView cos_sin_cache) {
  Rotary("rotary_embedding_backward", "grad_q", "grad_k", positions, grad_q, grad_k, cos_sin_cache, -1.0f);
}

}  // namespace
}  // namespace fused

TENSORPLUG_EXPORT(rotary_embedding, fused::RotaryEmbedding, "positions", "q", "k", "cos_sin_cache");
TENSORPLUG_EXPORT(rotary_embedding_backward, fused::RotaryEmbeddingBackward, "positions", "grad_q", "grad_k",
                  "cos_sin_cache");
