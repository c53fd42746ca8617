"""Kernels and ops for the sharding tests (tests/*/test_sharding*.py and their worker processes).

float32, contiguous, CPU; each op is declared with a sharding rule of the kind its kernel
needs, plus twins that show what a missing or wrong rule does.
"""

from __future__ import annotations

SOURCE = r"""
#include <cmath>
namespace tp = tensorplug;

// alpha * x: elementwise.
tp::Tensor scale(tp::TensorView x, double alpha) {
  TENSORPLUG_CHECK(x.is_contiguous(), ValueError) << "scale: contiguous tensors only";
  tp::Tensor y = tp::Tensor::FromEnvAlloc(x.shape(), x.dtype(), x.device());
  const float* px = x.data_ptr<float>();
  float* py = y.mutable_data_ptr<float>();
  for (int64_t i = 0; i < x.numel(); ++i) py[i] = static_cast<float>(alpha) * px[i];
  return y;
}

// Running sum along each row: the row must stay whole on one device.
tp::Tensor cumsum_rows(tp::TensorView x) {
  TENSORPLUG_CHECK(x.ndim() == 2 && x.is_contiguous(), ValueError) << "cumsum_rows: a contiguous matrix only";
  tp::Tensor y = tp::Tensor::FromEnvAlloc(x.shape(), x.dtype(), x.device());
  const int64_t n = x.size(1);
  const float* px = x.data_ptr<float>();
  float* py = y.mutable_data_ptr<float>();
  for (int64_t i = 0; i < x.size(0); ++i) {
    float sum = 0;
    for (int64_t j = 0; j < n; ++j) py[i * n + j] = sum += px[i * n + j];
  }
  return y;
}

// a @ w: the inner dimension must stay whole.
tp::Tensor matmul(tp::TensorView a, tp::TensorView w) {
  TENSORPLUG_CHECK(a.ndim() == 2 && w.ndim() == 2 && a.size(1) == w.size(0), ValueError)
      << "matmul: (b, i) @ (i, j) only";
  TENSORPLUG_CHECK(a.is_contiguous() && w.is_contiguous(), ValueError) << "matmul: contiguous tensors only";
  const int64_t b = a.size(0), k = a.size(1), n = w.size(1);
  tp::Tensor y = tp::Tensor::FromEnvAlloc({b, n}, a.dtype(), a.device());
  const float* pa = a.data_ptr<float>();
  const float* pw = w.data_ptr<float>();
  float* py = y.mutable_data_ptr<float>();
  for (int64_t r = 0; r < b; ++r)
    for (int64_t c = 0; c < n; ++c) {
      float sum = 0;
      for (int64_t i = 0; i < k; ++i) sum += pa[r * k + i] * pw[i * n + c];
      py[r * n + c] = sum;
    }
  return y;
}

// The first n items of x.
tp::Tensor head(tp::TensorView x, int64_t n) {
  TENSORPLUG_CHECK(x.ndim() == 1 && n <= x.size(0), ValueError) << "head: n is larger than x";
  tp::Tensor y = tp::Tensor::FromEnvAlloc({n}, x.dtype(), x.device());
  for (int64_t i = 0; i < n; ++i) y.mutable_data_ptr<float>()[i] = x.data_ptr<float>()[i];
  return y;
}

// out += alpha * x, written in place.
void axpy(tp::TensorView x, tp::MutableView out, double alpha) {
  TENSORPLUG_CHECK(x.numel() == out.numel(), ValueError) << "axpy: x and out differ in size";
  const float* px = x.data_ptr<float>();
  float* po = out.mutable_data_ptr<float>();
  for (int64_t i = 0; i < x.numel(); ++i) po[i] += static_cast<float>(alpha) * px[i];
}
"""

FUNCTIONS = ["scale", "cumsum_rows", "matmul", "head", "axpy"]


def load():
    from tensorplug import cpp

    return cpp.load_inline("sharding_test_kernels", SOURCE, functions=FUNCTIONS)


def declare(mod, namespace: str = "tpshard") -> dict:
    """The test ops, declared once per process under ``namespace``."""
    import tensorplug

    like_x = tensorplug.like("x")
    return {
        "scale": tensorplug.op(f"{namespace}::scale", mod.scale, returns=like_x, sharding="elementwise"),
        "scale_no_rule": tensorplug.op(f"{namespace}::scale_no_rule", mod.scale, returns=like_x),
        "cumsum_rows": tensorplug.op(f"{namespace}::cumsum_rows", mod.cumsum_rows, returns=like_x,
                                     sharding="b [n] -> b [n]"),
        "matmul": tensorplug.op(f"{namespace}::matmul", mod.matmul,
                                returns=tensorplug.Output(("a.shape[0]", "w.shape[1]"), "a"),
                                sharding="b i, i j -> b j"),
        # Wrong on purpose: the output rule makes n items on every shard, the sharding rule a shard of b.
        "head_bad": tensorplug.op(f"{namespace}::head_bad", mod.head, returns=tensorplug.Output(("n",), "x"),
                                  sharding="b -> b"),
        "axpy": tensorplug.op(f"{namespace}::axpy", mod.axpy, sharding="n, n ->"),
    }
