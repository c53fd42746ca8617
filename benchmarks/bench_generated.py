"""Per-call cost of generated kernels against a hand-written exported function (README.md).

    python benchmarks/bench_generated.py [--repeat N] [--calls N] [--frameworks numpy,torch] [--no-halide]

One kernel, `out = alpha * x + 1` on 4 float32 elements (so the numbers are call overhead),
in two forms: allocating (`f(x, alpha) -> out`, from the caller's allocator) and
destination passing (`f(x, alpha, out)`). Implementations: hand-written C++
(`TENSORPLUG_EXPORT`), C emitted with `tensorplug/generated.h`, a Numba kernel
(`tensorplug.numba`), and for destination passing a Halide pipeline (examples/halide).
The variants of a row run interleaved, in reverse order every other round; the best round
is kept (ns per call).
"""

from __future__ import annotations

import argparse
import gc
import sys
import tempfile
import time
from itertools import repeat
from pathlib import Path

import numpy as np

import tensorplug
from tensorplug import cpp

ROOT = Path(__file__).resolve().parents[1]

HAND = r"""
namespace tp = tensorplug;
tp::Tensor axpb(tp::TensorView x, double alpha) {
  TENSORPLUG_CHECK((x.is_contiguous() && x.dtype() == DLDataType{kDLFloat, 32, 1}), ValueError)
      << "axpb: contiguous float32 only";
  auto out = tp::Tensor::FromEnvAlloc(x.shape(), x.dtype(), x.device());
  const float* in = x.data_ptr<float>();
  float* po = out.mutable_data_ptr<float>();
  for (int64_t i = 0; i < x.numel(); ++i) po[i] = static_cast<float>(alpha) * in[i] + 1.0f;
  return out;
}
void axpb_into(tp::TensorView x, double alpha, tp::MutableView out) {
  TENSORPLUG_CHECK(x.is_contiguous() && out.is_contiguous() && x.numel() == out.numel(), ValueError)
      << "axpb_into: contiguous tensors of one size only";
  const float* in = x.data_ptr<float>();
  float* po = out.mutable_data_ptr<float>();
  for (int64_t i = 0; i < x.numel(); ++i) po[i] = static_cast<float>(alpha) * in[i] + 1.0f;
}
"""

GENERATED = r"""
#include <tensorplug/generated.h>

TP_EXPORT const char* __tensorplugsig_axpb(void) { return "x:view;alpha:float->tensor"; }
TP_EXPORT int __tensorplug_axpb(void* self, const TPAny* args, int32_t nargs, TPAny* result) {
  TPGenCall call;
  DLTensor* x;
  double alpha;
  DLManagedTensorVersioned* out;
  const float* in;
  float* po;
  int64_t i, n;
  (void)self;
  TPGenBegin(&call, "axpb", args, nargs, result);
  TPGenArity(&call, 2);
  x = TPGenTensor(&call, 0, "x", TPGenDType(kDLFloat, 32), -1, kDLCPU, TPGEN_CONTIGUOUS);
  alpha = TPGenFloat(&call, 1, "alpha");
  out = TPGenAllocLike(&call, x);
  if (call.failed) return TPGenFinish(&call);
  in = (const float*)TPGenData(x);
  po = (float*)TPGenData(&out->dl_tensor);
  n = TPGenNumel(x);
  for (i = 0; i < n; ++i) po[i] = (float)alpha * in[i] + 1.0f;
  TPGenReturnTensor(&call, out);
  return TPGenFinish(&call);
}

TP_EXPORT const char* __tensorplugsig_axpb_into(void) { return "x:view;alpha:float;out:mview->void"; }
TP_EXPORT int __tensorplug_axpb_into(void* self, const TPAny* args, int32_t nargs, TPAny* result) {
  TPGenCall call;
  DLTensor* x;
  DLTensor* out;
  double alpha;
  const float* in;
  float* po;
  int64_t i, n;
  (void)self;
  TPGenBegin(&call, "axpb_into", args, nargs, result);
  TPGenArity(&call, 3);
  x = TPGenTensor(&call, 0, "x", TPGenDType(kDLFloat, 32), -1, kDLCPU, TPGEN_CONTIGUOUS);
  alpha = TPGenFloat(&call, 1, "alpha");
  out = TPGenTensor(&call, 2, "out", TPGenDType(kDLFloat, 32), -1, kDLCPU, TPGEN_CONTIGUOUS | TPGEN_WRITTEN);
  if (!call.failed && TPGenNumel(x) != TPGenNumel(out)) TPGenFail(&call, "ValueError", "x and out differ in size");
  if (call.failed) return TPGenFinish(&call);
  in = (const float*)TPGenData(x);
  po = (float*)TPGenData(out);
  n = TPGenNumel(x);
  for (i = 0; i < n; ++i) po[i] = (float)alpha * in[i] + 1.0f;
  return TPGenFinish(&call);
}
"""


def build(halide: bool, work: Path) -> dict[str, dict[str, object]]:
    """{form: {implementation: function}}."""
    hand = cpp.load_inline("bench_generated_hand", HAND, functions=["axpb", "axpb_into"])
    (work / "generated.c").write_text(GENERATED)
    generated = tensorplug.load_module(cpp.build("bench_generated_c", [work / "generated.c"], build_directory=work))
    import tensorplug.numba as tpn

    @tpn.kernel({"x": "float32[:]", "alpha": "float64"}, returns=tensorplug.like("x"))
    def numba_axpb(x, alpha, out):
        for i in range(x.shape[0]):
            out[i] = np.float32(alpha) * x[i] + np.float32(1)

    @tpn.kernel({"x": "float32[:]", "alpha": "float64", "out": "float32[:]"}, writes="out")
    def numba_axpb_into(x, alpha, out):
        for i in range(x.shape[0]):
            out[i] = np.float32(alpha) * x[i] + np.float32(1)

    forms = {"alloc": {"hand-written": hand.axpb, "generated C": generated.axpb, "numba": numba_axpb},
             "dest": {"hand-written": hand.axpb_into, "generated C": generated.axpb_into, "numba": numba_axpb_into}}
    if halide:
        sys.path.insert(0, str(ROOT / "examples" / "halide"))
        import build as halide_build

        runtime, kernels = halide_build.build(work / "halide")
        tensorplug.load_library(runtime, global_symbols=True)
        forms["dest"]["halide"] = tensorplug.load_module(kernels).brighten
    return forms


def make_arrays(framework: str):
    if framework == "numpy":
        return np.arange(4, dtype=np.float32), np.empty(4, np.float32)
    import torch

    return torch.arange(4, dtype=torch.float32), torch.empty(4, dtype=torch.float32)


def timed(f, args, calls: int) -> float:
    start = time.perf_counter_ns()
    if len(args) == 2:
        a, b = args
        for _ in repeat(None, calls):
            f(a, b)
    else:
        a, b, c = args
        for _ in repeat(None, calls):
            f(a, b, c)
    return (time.perf_counter_ns() - start) / calls


def run_row(variants: dict, args, repeat_count: int, calls: int) -> dict[str, float]:
    names = list(variants)
    for name in names:
        expected = variants[names[0]](*args)
        got = variants[name](*args)
        if len(args) == 2:
            np.testing.assert_allclose(np.asarray(got), np.asarray(expected))
        timed(variants[name], args, calls // 10)  # warm-up
    best = {name: float("inf") for name in names}
    gc.disable()
    try:
        for round_ in range(repeat_count):
            for name in names if round_ % 2 == 0 else reversed(names):
                best[name] = min(best[name], timed(variants[name], args, calls))
    finally:
        gc.enable()
    return best


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=7)
    parser.add_argument("--calls", type=int, default=50000)
    parser.add_argument("--frameworks", default="numpy,torch")
    parser.add_argument("--no-halide", action="store_true", help="leave the Halide pipeline out")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        forms = build(not args.no_halide, Path(tmp))
        print(f"{'framework':<10} {'form':<6} {'implementation':<15} {'ns/call':>8} {'/ hand':>7}")
        for framework in args.frameworks.split(","):
            x, out = make_arrays(framework)
            for form, variants in forms.items():
                call_args = (x, 2.0) if form == "alloc" else (x, 2.0, out)
                best = run_row(variants, call_args, args.repeat, args.calls)
                for name, ns in best.items():
                    print(f"{framework:<10} {form:<6} {name:<15} {ns:>8.0f} {ns / best['hand-written']:>7.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
