"""A tensorplug op inside ``paddle.jit.to_static`` against the same kernel as a native paddle
custom operator, and eager op calls against the plain function call (issue 43, item 5).

    python benchmarks/bench_compile_paddle.py [--ops N] [--calls N] [--repeat N] [--json PATH]

Both sides compute y = x + 1 on a float32 tensor of 16 elements on the CPU. The native side
is a ``PD_BUILD_OP`` custom operator compiled here against the installed paddle (the way
``paddle.utils.cpp_extension`` would), the tensorplug side a TENSORPLUG_EXPORT function
declared with ``tensorplug.op``, which paddle runs as its ``tensorplug_op1_1`` operator
(plugins/tensorplug_adapters/paddle/op.cc: the op's call plan, run natively).

Rows:

- ``to_static, per op``: one call of a ``full_graph`` program of ``--ops`` chained ops, time
  divided by the number of ops (target: tensorplug / native <= 1.2); the two programs'
  repeats alternate, so that a change of load reaches both;
- ``eager op call``: the op called on a tensor that needs no gradient (the kernel function
  runs) against the plain function call of the same kernel;
- ``eager op call, gradient wanted``: the op called on a tensor with stop_gradient=False
  (paddle's operator runs, so that autodiff records it) against the native custom op.
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
import time

TENSORPLUG_SOURCE = r"""
namespace tp = tensorplug;

tp::Tensor add_one(tp::TensorView x) {
  tp::Tensor y = tp::Tensor::FromEnvAlloc(x.shape(), x.dtype(), x.device());
  const float* a = x.data_ptr<float>();
  float* o = y.mutable_data_ptr<float>();
  for (int64_t i = 0, n = x.numel(); i < n; ++i) o[i] = a[i] + 1.0f;
  return y;
}
"""

NATIVE_SOURCE = r"""
#include "paddle/extension.h"

std::vector<paddle::Tensor> AddOne(const paddle::Tensor& x) {
  auto y = paddle::empty_like(x);
  const float* a = x.data<float>();
  float* o = y.data<float>();
  for (int64_t i = 0, n = x.numel(); i < n; ++i) o[i] = a[i] + 1.0f;
  return {y};
}

std::vector<paddle::Tensor> AddOneGrad(const paddle::Tensor& grad) { return {grad}; }

PD_BUILD_OP(bench_native_add_one).Inputs({"X"}).Outputs({"Out"}).SetKernelFn(PD_KERNEL(AddOne));
PD_BUILD_GRAD_OP(bench_native_add_one)
    .Inputs({paddle::Grad("Out")}).Outputs({paddle::Grad("X")}).SetKernelFn(PD_KERNEL(AddOneGrad));
"""


def _setup():
    import paddle

    import tensorplug
    from tensorplug import cpp
    from tensorplug_adapters.paddle import static as paddle_static

    mod = cpp.load_inline("bench_compile_paddle_tp", TENSORPLUG_SOURCE, functions=["add_one"])
    op = tensorplug.op("bench_paddle::add_one", mod.add_one, returns=tensorplug.like("x"))
    if not paddle_static.register():
        sys.exit(f"paddle's operator for tensorplug ops is not available: {paddle_static.error()}")
    source_dir = cpp.cache_dir() / "sources" / "bench_compile_paddle_native"
    source_dir.mkdir(parents=True, exist_ok=True)
    source = source_dir / "native_op.cc"
    if not source.exists() or source.read_text() != NATIVE_SOURCE:
        source.write_text(NATIVE_SOURCE)
    options = paddle_static.build_options(paddle)
    path = cpp.build("bench_compile_paddle_native", [source], **options)
    from paddle.utils.cpp_extension import load_op_meta_info_and_register_op

    load_op_meta_info_and_register_op(path)

    def native(x):
        return paddle._C_ops._run_custom_op("bench_native_add_one", x)[0]

    from paddle.jit.marker import unified

    return paddle, mod, op, unified(native)


def _best_interleaved(fns: dict, calls: int, repeat: int) -> dict:
    """:func:`_best` of each of ``fns``, their repeats taken in turn, so that a change of the
    machine's load during the run reaches both sides alike."""
    best = dict.fromkeys(fns, float("inf"))
    for _ in range(repeat):
        for name, fn in fns.items():
            best[name] = min(best[name], _best(fn, calls, 1))
    return best


def _best(fn, calls: int, repeat: int) -> float:
    best = float("inf")
    for _ in range(repeat):
        start = time.perf_counter()
        for _ in range(calls):
            fn()
        best = min(best, (time.perf_counter() - start) / calls)
    return best


def main(argv=None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ops", type=int, default=100)
    parser.add_argument("--calls", type=int, default=200)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--json")
    args = parser.parse_args(argv)
    paddle, mod, op, native = _setup()
    x = paddle.ones([16])

    def chain(step):
        def program(x):
            for _ in range(args.ops):
                x = step(x)
            return x
        return program

    rows = {}
    programs = {"tensorplug": paddle.jit.to_static(chain(op), full_graph=True),
                "native": paddle.jit.to_static(chain(native), full_graph=True)}
    for name, program in programs.items():
        assert program(x).numpy().tolist() == [float(args.ops + 1)] * 16, name
    per_op = {name: best / args.ops for name, best in _best_interleaved(
        {name: (lambda p=p: p(x)) for name, p in programs.items()}, max(args.calls // 10, 5), args.repeat).items()}
    rows["to_static, per op"] = per_op
    rows["eager op call"] = {"tensorplug": _best(lambda: op(x), args.calls * 10, args.repeat),
                             "native": _best(lambda: mod.add_one(x), args.calls * 10, args.repeat)}
    wanting = paddle.ones([16])
    wanting.stop_gradient = False
    rows["eager op call, gradient wanted"] = {"tensorplug": _best(lambda: op(wanting), args.calls, args.repeat),
                                              "native": _best(lambda: native(wanting), args.calls, args.repeat)}
    print(f"paddle {paddle.__version__}, python {platform.python_version()}, {args.ops} ops, best of {args.repeat}")
    print(f"{'row':34} {'tensorplug':>12} {'native':>12} {'ratio':>7}")
    for row, values in rows.items():
        label = "plain call" if row == "eager op call" else "native op"
        print(f"{row:34} {values['tensorplug'] * 1e6:10.2f}us {values['native'] * 1e6:10.2f}us "
              f"{values['tensorplug'] / values['native']:7.2f}   (native: {label})")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)
    return rows


if __name__ == "__main__":
    main()
