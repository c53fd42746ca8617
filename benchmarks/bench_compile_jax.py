"""A tensorplug op inside jax.jit against the same kernel as a hand-written XLA FFI handler.

    python benchmarks/bench_compile_jax.py [--repeat N] [--calls N] [--loop N] [--json PATH]

Both sides run the same loop body on the CPU; the native side is an XLA FFI handler written
with jax's own C++ FFI API (xla/ffi/api/ffi.h from ``jax.ffi.include_dir()``, compiled here
for this benchmark only), the tensorplug side is a TENSORPLUG_EXPORT function declared with
``tensorplug.op`` and run by the core's generic handler. Two cases:

- ``add_one``: allocating (y = x + 1 in a result buffer; tensorplug: ``FromEnvAlloc``);
- ``axpy``: destination passing with a float attribute (out += alpha * x, ``out`` aliased
  to the result).

Two ways of calling, per case:

- ``dispatch``: one ``jax.jit`` call per op call (jax's dispatch dominates);
- ``in-jit loop``: one jitted ``lax.fori_loop`` making ``--loop`` op calls, time per op call
  (the handler's own cost dominates; the target row).

Target (issue 11 item 7): tensorplug / native <= 1.2 in every row.
"""

from __future__ import annotations

import argparse
import gc
import json
import platform
import sys
import time
from pathlib import Path

import numpy as np

TARGET_RATIO = 1.2
ELEMENTS = 4  # tiny tensors: the numbers are overhead

TENSORPLUG_SOURCE = r"""
namespace tp = tensorplug;

tp::Tensor add_one(tp::TensorView x) {
  tp::Tensor y = tp::Tensor::FromEnvAlloc(x.shape(), x.dtype(), x.device());
  const float* a = x.data_ptr<float>();
  float* o = y.mutable_data_ptr<float>();
  for (int64_t i = 0, n = x.numel(); i < n; ++i) o[i] = a[i] + 1.0f;
  return y;
}

void axpy(tp::TensorView x, tp::MutableView out, double alpha) {
  const float* a = x.data_ptr<float>();
  float* o = out.mutable_data_ptr<float>();
  for (int64_t i = 0, n = x.numel(); i < n; ++i) o[i] += static_cast<float>(alpha) * a[i];
}
"""

NATIVE_SOURCE = r"""
#include <cstdint>
#include "xla/ffi/api/ffi.h"

namespace ffi = xla::ffi;

static ffi::Error AddOneImpl(ffi::Buffer<ffi::F32> x, ffi::ResultBuffer<ffi::F32> y) {
  const float* a = x.typed_data();
  float* o = y->typed_data();
  for (int64_t i = 0, n = static_cast<int64_t>(x.element_count()); i < n; ++i) o[i] = a[i] + 1.0f;
  return ffi::Error::Success();
}

static ffi::Error AxpyImpl(ffi::Buffer<ffi::F32> x, ffi::Buffer<ffi::F32> out_in, ffi::ResultBuffer<ffi::F32> out,
                           double alpha) {
  const float* a = x.typed_data();
  float* o = out->typed_data();  // aliased to out_in: holds its values
  for (int64_t i = 0, n = static_cast<int64_t>(x.element_count()); i < n; ++i) o[i] += static_cast<float>(alpha) * a[i];
  return ffi::Error::Success();
}

XLA_FFI_DEFINE_HANDLER_SYMBOL(NativeAddOne, AddOneImpl,
                              ffi::Ffi::Bind().Arg<ffi::Buffer<ffi::F32>>().Ret<ffi::Buffer<ffi::F32>>());
XLA_FFI_DEFINE_HANDLER_SYMBOL(NativeAxpy, AxpyImpl,
                              ffi::Ffi::Bind()
                                  .Arg<ffi::Buffer<ffi::F32>>()
                                  .Arg<ffi::Buffer<ffi::F32>>()
                                  .Ret<ffi::Buffer<ffi::F32>>()
                                  .Attr<double>("alpha"));
"""


def build_both():
    """(tensorplug ops, native ffi_call factories) for the two cases."""
    import ctypes

    import jax

    import tensorplug
    from tensorplug import cpp

    mod = cpp.load_inline("bench_compile_jax_tp", TENSORPLUG_SOURCE, functions=["add_one", "axpy"])
    ops = {
        "add_one": tensorplug.op("bench_jax::add_one", mod.add_one, returns=tensorplug.like("x")),
        "axpy": tensorplug.op("bench_jax::axpy", mod.axpy),
    }
    source_dir = cpp.cache_dir() / "sources" / "bench_compile_jax_native"
    source_dir.mkdir(parents=True, exist_ok=True)
    source = source_dir / "native_handlers.cc"
    if not source.exists() or source.read_text() != NATIVE_SOURCE:
        source.write_text(NATIVE_SOURCE)
    lib = ctypes.cdll.LoadLibrary(cpp.build("bench_compile_jax_native", [source],
                                            include_dirs=[jax.ffi.include_dir()],
                                            extra_cflags=["-fvisibility=default"]))
    jax.ffi.register_ffi_target("bench_native_add_one", jax.ffi.pycapsule(lib.NativeAddOne), platform="cpu")
    jax.ffi.register_ffi_target("bench_native_axpy", jax.ffi.pycapsule(lib.NativeAxpy), platform="cpu")

    def native_add_one(x):
        return jax.ffi.ffi_call("bench_native_add_one", jax.ShapeDtypeStruct(x.shape, x.dtype))(x)

    def native_axpy(x, out, alpha):
        return jax.ffi.ffi_call("bench_native_axpy", jax.ShapeDtypeStruct(out.shape, out.dtype),
                                input_output_aliases={1: 0})(x, out, alpha=np.float64(alpha))

    return {
        # (x, acc) -> new acc: the in-jit loop feeds each call's result to the next.
        "add_one": (lambda x, acc: ops["add_one"](acc), lambda x, acc: native_add_one(acc)),
        "axpy": (lambda x, acc: ops["axpy"](x, acc, 0.5), lambda x, acc: native_axpy(x, acc, 0.5)),
    }


def make_runners(body, loop: int):
    """(dispatch runner, in-jit-loop runner) for one op body ``(x, acc) -> new acc``; the
    loop depends on each call's result, so XLA cannot hoist the call out of it."""
    import jax

    jitted = jax.jit(body)

    def looped(x, out):
        return jax.lax.fori_loop(0, loop, lambda i, acc: body(x, acc), out)

    jitted_loop = jax.jit(looped)
    return jitted, jitted_loop


def time_variants(variants: dict, args, calls: int, repeat: int, per_call_divisor: int) -> dict:
    """Best ns per op call of each variant, interleaved and alternating order per repeat."""
    best = {name: float("inf") for name in variants}
    names = list(variants)
    for r in range(repeat):
        for name in (names if r % 2 == 0 else names[::-1]):
            f = variants[name]
            gc.disable()
            try:
                start = time.perf_counter_ns()
                for _ in range(calls):
                    result = f(*args)
                result.block_until_ready()
                elapsed = time.perf_counter_ns() - start
            finally:
                gc.enable()
            best[name] = min(best[name], elapsed / (calls * per_call_divisor))
    return best


def run(args) -> dict:
    import jax
    import jax.numpy as jnp

    cases = build_both()
    x = jnp.arange(ELEMENTS, dtype=jnp.float32)
    out = jnp.ones(ELEMENTS, jnp.float32)
    rows = []
    for case, (tp_body, native_body) in cases.items():
        tp_jit, tp_loop = make_runners(tp_body, args.loop)
        nat_jit, nat_loop = make_runners(native_body, args.loop)
        # Same results before timing anything.
        np.testing.assert_allclose(np.asarray(tp_jit(x, out)), np.asarray(nat_jit(x, out)))
        np.testing.assert_allclose(np.asarray(tp_loop(x, out)), np.asarray(nat_loop(x, out)))
        for mode, tp_f, nat_f, calls, divisor in (("dispatch", tp_jit, nat_jit, args.calls, 1),
                                                   ("in-jit loop", tp_loop, nat_loop, max(1, args.calls // args.loop),
                                                    args.loop)):
            for _ in range(args.warmup):
                tp_f(x, out).block_until_ready()
                nat_f(x, out).block_until_ready()
            best = time_variants({"tensorplug": tp_f, "native": nat_f}, (x, out), calls, args.repeat, divisor)
            rows.append({"case": case, "mode": mode, "tensorplug_ns": best["tensorplug"],
                         "native_ns": best["native"], "ratio": best["tensorplug"] / best["native"]})
    worst = max(rows, key=lambda r: r["ratio"])
    return {
        "settings": {"repeat": args.repeat, "calls": args.calls, "loop": args.loop, "warmup": args.warmup,
                     "elements": ELEMENTS},
        "versions": {"python": platform.python_version(), "jax": jax.__version__, "numpy": np.__version__},
        "machine": platform.processor() or platform.machine(),
        "rows": rows,
        "target": {"target": f"tensorplug / native XLA FFI handler <= {TARGET_RATIO} in every row",
                   "met": worst["ratio"] <= TARGET_RATIO,
                   "detail": f"worst {worst['ratio']:.2f} ({worst['case']}, {worst['mode']})"},
    }


def report(result: dict) -> str:
    lines = [f"{'case':<8}  {'mode':<11}  {'tensorplug ns':>13}  {'native ns':>9}  {'ratio':>5}",
             f"{'-' * 8}  {'-' * 11}  {'-' * 13}  {'-' * 9}  {'-' * 5}"]
    for r in result["rows"]:
        lines.append(f"{r['case']:<8}  {r['mode']:<11}  {r['tensorplug_ns']:>13.0f}  {r['native_ns']:>9.0f}  "
                     f"{r['ratio']:>5.2f}")
    t = result["target"]
    lines.append("")
    lines.append(f"target: {t['target']}: {'met' if t['met'] else 'NOT MET'} ({t['detail']})")
    return "\n".join(lines)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=7, help="timed runs per variant (best is kept)")
    parser.add_argument("--calls", type=int, default=20000, help="op calls per timed run")
    parser.add_argument("--loop", type=int, default=1000, help="op calls per jitted fori_loop (in-jit loop rows)")
    parser.add_argument("--warmup", type=int, default=200, help="untimed calls per variant first")
    parser.add_argument("--json", type=Path, help="write the results as JSON here")
    args = parser.parse_args(argv)
    try:
        import jax  # noqa: F401
    except ImportError:
        print("jax is not installed: nothing to measure", file=sys.stderr)
        return 1
    result = run(args)
    print(report(result))
    if args.json:
        args.json.write_text(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
