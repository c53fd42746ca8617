"""Ops inside graph compilers: a tensorplug op against the same kernel registered natively.

    python benchmarks/bench_compile.py [--calls N] [--repeat N] [--backends aot_eager,inductor] [--device cpu|cuda]
                                       [--json PATH]

torch row: one C++ kernel body (``KERNEL_BODY``), built twice: as a tensorplug library
declared with ``tensorplug.op`` and as a native ``torch.library`` operator
(``TORCH_LIBRARY``, built by ``torch.utils.cpp_extension.load_inline`` against the torch
headers the wheel ships). Each is called eagerly and inside ``torch.compile`` (``fullgraph``,
each backend), on small tensors so that the call overhead dominates; the time per call is
the best of ``--repeat`` timed loops of ``--calls`` calls, the two sides alternating, divided by the
program's op calls (``--ops``: programs of 1 and 100 chained calls, each side's generated from its own
source). ``--device cuda`` builds the same body as a CUDA kernel for both sides (nvcc), launched on
torch's current stream, and waits for the GPU at the end of every timed loop. Targets (issue 23),
per op in the 100-op programs: tensorplug at most 1.1x the native
registration inside ``torch.compile``, 1.2x eagerly. Results: benchmarks/README.md.
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
import time

import tensorplug
from tensorplug import cpp

TARGET_RATIO = 1.1
EAGER_TARGET_RATIO = 1.2
N = 64  # elements per tensor: overhead-dominated
# Eager, the tensorplug side calling torch.ops.<ns>.<op>.default as the native side does;
# "eager" calls the tensorplug Op, which picks torch's operator per call (Python).
EAGER_TORCH_OPS = "eager-ops"

# out = alpha * x + y (destination passing) and alpha * x (allocating), float32, contiguous.
KERNEL_BODY = r"""
static void axpy_body(const float* x, const float* y, float* out, int64_t n, double alpha) {
  for (int64_t i = 0; i < n; ++i) out[i] = static_cast<float>(alpha) * x[i] + y[i];
}
"""

TENSORPLUG_SOURCE = KERNEL_BODY + r"""
namespace tp = tensorplug;
void axpy(tp::TensorView x, tp::TensorView y, tp::MutableView out, double alpha) {
  TENSORPLUG_CHECK(x.numel() == y.numel() && x.numel() == out.numel(), ValueError) << "axpy: sizes differ";
  axpy_body(x.data_ptr<float>(), y.data_ptr<float>(), out.mutable_data_ptr<float>(), x.numel(), alpha);
}
tp::Tensor scale(tp::TensorView x, double alpha) {
  auto out = tp::Tensor::FromEnvAlloc(x.shape(), x.dtype(), x.device());
  const float* px = x.data_ptr<float>();
  axpy_body(px, px, out.mutable_data_ptr<float>(), x.numel(), alpha - 1.0);  // (alpha - 1) x + x
  return out;
}
"""

NATIVE_SOURCE = "#include <torch/library.h>\n#include <ATen/ATen.h>\n" + KERNEL_BODY + r"""
void axpy(const at::Tensor& x, const at::Tensor& y, at::Tensor& out, double alpha) {
  TORCH_CHECK(x.numel() == y.numel() && x.numel() == out.numel(), "axpy: sizes differ");
  axpy_body(x.data_ptr<float>(), y.data_ptr<float>(), out.data_ptr<float>(), x.numel(), alpha);
}
at::Tensor scale(const at::Tensor& x, double alpha) {
  at::Tensor out = at::empty_like(x);
  axpy_body(x.data_ptr<float>(), x.data_ptr<float>(), out.data_ptr<float>(), x.numel(), alpha - 1.0);
  return out;
}
TORCH_LIBRARY(bench_native, m) {
  m.def("axpy(Tensor x, Tensor y, Tensor(a!) out, float alpha) -> ()");
  m.def("scale(Tensor x, float alpha) -> Tensor");
}
TORCH_LIBRARY_IMPL(bench_native, CPU, m) {
  m.impl("axpy", &axpy);
  m.impl("scale", &scale);
}
"""


# The same body as a CUDA kernel (--device cuda), launched on the caller's current stream.
CUDA_KERNEL_BODY = r"""
__global__ void axpy_kernel(const float* x, const float* y, float* out, int64_t n, float alpha) {
  const int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
  if (i < n) out[i] = alpha * x[i] + y[i];
}
static void axpy_body(const float* x, const float* y, float* out, int64_t n, double alpha, cudaStream_t stream) {
  axpy_kernel<<<(n + 255) / 256, 256, 0, stream>>>(x, y, out, n, static_cast<float>(alpha));
}
"""

TENSORPLUG_CUDA_SOURCE = CUDA_KERNEL_BODY + r"""
namespace tp = tensorplug;
void axpy(tp::TensorView x, tp::TensorView y, tp::MutableView out, double alpha) {
  TENSORPLUG_CHECK(x.numel() == y.numel() && x.numel() == out.numel(), ValueError) << "axpy: sizes differ";
  axpy_body(x.data_ptr<float>(), y.data_ptr<float>(), out.mutable_data_ptr<float>(), x.numel(), alpha,
            tp::GetCurrentCUDAStream(x.device().device_id));
}
tp::Tensor scale(tp::TensorView x, double alpha) {
  auto out = tp::Tensor::FromEnvAlloc(x.shape(), x.dtype(), x.device());
  const float* px = x.data_ptr<float>();
  axpy_body(px, px, out.mutable_data_ptr<float>(), x.numel(), alpha - 1.0,
            tp::GetCurrentCUDAStream(x.device().device_id));
  return out;
}
"""

NATIVE_CUDA_SOURCE = ("#include <torch/library.h>\n#include <ATen/ATen.h>\n#include <c10/cuda/CUDAStream.h>\n"
                      + CUDA_KERNEL_BODY + r"""
void axpy(const at::Tensor& x, const at::Tensor& y, at::Tensor& out, double alpha) {
  TORCH_CHECK(x.numel() == y.numel() && x.numel() == out.numel(), "axpy: sizes differ");
  axpy_body(x.data_ptr<float>(), y.data_ptr<float>(), out.data_ptr<float>(), x.numel(), alpha,
            c10::cuda::getCurrentCUDAStream(x.device().index()).stream());
}
at::Tensor scale(const at::Tensor& x, double alpha) {
  at::Tensor out = at::empty_like(x);
  axpy_body(x.data_ptr<float>(), x.data_ptr<float>(), out.data_ptr<float>(), x.numel(), alpha - 1.0,
            c10::cuda::getCurrentCUDAStream(x.device().index()).stream());
  return out;
}
TORCH_LIBRARY(bench_native, m) {
  m.def("axpy(Tensor x, Tensor y, Tensor(a!) out, float alpha) -> ()");
  m.def("scale(Tensor x, float alpha) -> Tensor");
}
TORCH_LIBRARY_IMPL(bench_native, CUDA, m) {
  m.impl("axpy", &axpy);
  m.impl("scale", &scale);
}
""")


def best_per_call_us(fns, calls: int, repeat: int, wait=lambda: None) -> list[float]:
    """Best time per call of each of ``fns``, in us; the loops alternate between them, in
    reverse order every other round, so that a machine busy for a while slows all of them
    alike. ``wait`` runs inside each timed loop, after its calls (the GPU's queue)."""
    for fn in fns:
        for _ in range(max(calls // 10, 10)):
            fn()  # warm up (compiles on the first call)
    wait()
    best = [float("inf")] * len(fns)
    for round_ in range(repeat):
        order = range(len(fns)) if round_ % 2 == 0 else reversed(range(len(fns)))
        for i in order:
            fn = fns[i]
            start = time.perf_counter()
            for _ in range(calls):
                fn()
            wait()
            best[i] = min(best[i], time.perf_counter() - start)
    return [b / calls * 1e6 for b in best]


def torch_rows(calls: int, repeat: int, backends: list[str], ops_per_graph=(1, 100), device="cpu") -> list[dict]:
    """Rows for torch: eager and each backend, destination-passing and allocating, for
    programs of each length in ``ops_per_graph``; times are per op call, on ``device``
    ("cpu" or "cuda")."""
    import torch
    from torch.utils import cpp_extension

    if device == "cuda":
        mod = cpp.load_inline("bench_compile_ops_cuda", "", cuda_sources=TENSORPLUG_CUDA_SOURCE,
                              functions=["axpy", "scale"])
        cpp_extension.load_inline("bench_native_ops_cuda", cpp_sources=[""], cuda_sources=[NATIVE_CUDA_SOURCE],
                                  is_python_module=False, extra_cflags=["-O2"], verbose=False)
        wait = torch.cuda.synchronize
    else:
        mod = cpp.load_inline("bench_compile_ops", TENSORPLUG_SOURCE, functions=["axpy", "scale"])
        cpp_extension.load_inline("bench_native_ops", cpp_sources=[NATIVE_SOURCE], is_python_module=False,
                                  extra_cflags=["-O2"], verbose=False)
        wait = lambda: None  # noqa: E731
    tp_axpy = tensorplug.op("bench_tp::axpy", mod.axpy)
    tp_scale = tensorplug.op("bench_tp::scale", mod.scale, returns=tensorplug.like("x"))
    for op in (tp_axpy, tp_scale):
        op.resolve(torch.Tensor)  # registers the torch operator
    torch.library.register_fake("bench_native::axpy", lambda x, y, out, alpha: None)
    torch.library.register_fake("bench_native::scale", lambda x, alpha: torch.empty_like(x))
    native_axpy, native_scale = torch.ops.bench_native.axpy.default, torch.ops.bench_native.scale.default

    x, y = torch.rand(N, device=device), torch.rand(N, device=device)
    rows = []
    for kernel in ("axpy", "scale"):
        for n_ops in ops_per_graph:
            # Each side's program is compiled from its own source: its own code object, so
            # that dynamo's caches and guards of one side never serve the other.
            tp_op = tp_axpy if kernel == "axpy" else tp_scale
            tp_fn = make_program(torch, kernel, n_ops, tp_op, "tensorplug")
            # The same program calling torch's operator itself, as the native side does.
            tp_torch_op = getattr(torch.ops.bench_tp, kernel).default
            tp_torch_fn = make_program(torch, kernel, n_ops, tp_torch_op, "tensorplug torch.ops")
            native_fn = make_program(torch, kernel, n_ops, native_axpy if kernel == "axpy" else native_scale,
                                     "native")
            torch.testing.assert_close(tp_fn(x, y), native_fn(x, y))
            torch.testing.assert_close(tp_torch_fn(x, y), native_fn(x, y))
            for mode in ["eager", EAGER_TORCH_OPS, *backends]:
                if mode == "eager":
                    tp_call, native_call = tp_fn, native_fn
                elif mode == EAGER_TORCH_OPS:
                    tp_call, native_call = tp_torch_fn, native_fn
                else:
                    torch._dynamo.reset()
                    tp_call = torch.compile(tp_fn, backend=mode, fullgraph=True)
                    native_call = torch.compile(native_fn, backend=mode, fullgraph=True)
                    torch.testing.assert_close(tp_call(x, y), native_call(x, y))
                tp_us, native_us = best_per_call_us([lambda: tp_call(x, y), lambda: native_call(x, y)], calls,
                                                    repeat, wait)
                rows.append({"framework": "torch" if device == "cpu" else f"torch-{device}",
                             "kernel": KERNELS[kernel], "ops": n_ops, "mode": mode,
                             "tensorplug_us": tp_us / n_ops, "native_us": native_us / n_ops,
                             "ratio": tp_us / native_us})
    return rows


KERNELS = {"axpy": "axpy (destination passing)", "scale": "scale (allocating)"}


def make_program(torch, kernel: str, n_ops: int, op, side: str):
    """A function of (x, y) calling ``op`` ``n_ops`` times in a chain (each call reads the
    previous result), compiled from source generated for ``side``."""
    lines = ["def program(x, y):"]
    for _ in range(n_ops):
        if kernel == "axpy":
            lines += ["    out = torch.empty_like(x)", "    op(x, y, out, 2.0)", "    y = out"]
        else:
            lines += ["    x = op(x, 1.0)"]
    lines.append(f"    return {'y' if kernel == 'axpy' else 'x'}")
    namespace = {"torch": torch, "op": op}
    exec(compile("\n".join(lines), f"<bench_compile {side} {kernel} x{n_ops}>", "exec"), namespace)
    return namespace["program"]


def describe_device(device: str) -> str:
    if device != "cuda":
        return "cpu"
    import torch
    return f"{torch.cuda.get_device_name()} (torch {torch.__version__})"


ROWS = {"torch": torch_rows}  # framework -> rows(calls, repeat, backends); jax adds its own


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=2000)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--backends", default="aot_eager,inductor", help="torch.compile backends")
    parser.add_argument("--frameworks", default=",".join(ROWS))
    parser.add_argument("--ops", default="1,100", help="torch: op calls per program (per-op times)")
    parser.add_argument("--device", default="cpu", choices=("cpu", "cuda"), help="torch: the tensors' device")
    parser.add_argument("--json", help="write the rows here")
    args = parser.parse_args(argv)
    rows = []
    for name in args.frameworks.split(","):
        backends = [b for b in args.backends.split(",") if b]
        if name == "torch":
            rows += torch_rows(args.calls, args.repeat, backends, tuple(int(n) for n in args.ops.split(",")),
                               args.device)
        else:
            rows += ROWS[name](args.calls, args.repeat, backends)
    print(f"python {platform.python_version()}, {platform.machine()}, {describe_device(args.device)}, {len(rows)} rows; "
          f"us per call (best of {args.repeat} x {args.calls})")
    print(f"{'framework':10} {'kernel':28} {'ops':>4} {'mode':10} {'tensorplug':>11} {'native':>9} {'ratio':>6}")
    for r in rows:
        print(f"{r['framework']:10} {r['kernel']:28} {r.get('ops', 1):4} {r['mode']:10} {r['tensorplug_us']:11.2f} "
              f"{r['native_us']:9.2f} {r['ratio']:6.2f}")
    # Targets (issue 23): per op in the longest programs, inside the compiler at most
    # TARGET_RATIO x native, eager through the op at most EAGER_TARGET_RATIO x.
    longest = max((r.get("ops", 1) for r in rows), default=1)
    for label, target, pick in (("inside the compiler", TARGET_RATIO, lambda r: not r["mode"].startswith("eager")),
                                ("eager through torch's operator", EAGER_TARGET_RATIO,
                                 lambda r: r["mode"] == EAGER_TORCH_OPS)):
        worst = max((r["ratio"] for r in rows if pick(r) and r.get("ops", 1) == longest), default=None)
        if worst is not None:
            print(f"target: {label}, {longest}-op programs, tensorplug <= {target}x native: worst {worst:.2f} -> "
                  f"{'met' if worst <= target else 'NOT met'}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"rows": rows, "target_ratio": TARGET_RATIO, "eager_target_ratio": EAGER_TARGET_RATIO}, f,
                      indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
