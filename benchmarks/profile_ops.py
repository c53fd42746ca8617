"""Instructions per op call inside a graph compiler, tensorplug against native (callgrind).

    python benchmarks/profile_ops.py torch --kernel axpy --backend inductor
    python benchmarks/profile_ops.py jax --kernel add_one

The programs are those of ``bench_compile.py`` (torch: a tensorplug op against a native
``torch.library`` op, in ``torch.compile(fullgraph=True)``) and ``bench_compile_jax.py``
(jax: a jitted ``lax.fori_loop`` of ``--loop`` op calls, against a hand-written XLA FFI
handler). Each side runs under ``valgrind --tool=callgrind --instr-atstart=no``, with
instrumentation on only around ``--calls`` calls of the compiled program, after tracing,
compilation and a warm-up (``profile_call.py``'s client-request helper). Prints the
instructions per op call of each side, their ratio, and with ``--top N`` the functions
where each side spends them. Wall time on a shared machine is noise; these counts are
deterministic to a few instructions.
"""

from __future__ import annotations

import argparse
import ctypes
import os
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import profile_call  # noqa: E402  (the helper, callgrind_annotate parsing, symbols)


def _torch_program(side: str, kernel: str, backend: str, n_ops: int):
    import torch

    import bench_compile as bc
    import tensorplug
    from tensorplug import cpp

    if side == "tensorplug":
        mod = cpp.load_inline("bench_compile_ops", bc.TENSORPLUG_SOURCE, functions=["axpy", "scale"])
        axpy = tensorplug.op("bench_tp::axpy", mod.axpy)
        scale = tensorplug.op("bench_tp::scale", mod.scale, returns=tensorplug.like("x"))
    else:
        from torch.utils import cpp_extension

        cpp_extension.load_inline("bench_native_ops", cpp_sources=[bc.NATIVE_SOURCE], is_python_module=False,
                                  extra_cflags=["-O2"], verbose=False)
        torch.library.register_fake("bench_native::axpy", lambda x, y, out, alpha: None)
        torch.library.register_fake("bench_native::scale", lambda x, alpha: torch.empty_like(x))
        axpy, scale = torch.ops.bench_native.axpy.default, torch.ops.bench_native.scale.default
    op = axpy if kernel == "axpy" else scale
    if side == "tensorplug" and backend == bc.EAGER_TORCH_OPS:
        op.resolve(torch.Tensor)  # registers the torch operator
        op = getattr(torch.ops.bench_tp, kernel).default
    x, y = torch.rand(bc.N), torch.rand(bc.N)
    fn = bc.make_program(torch, kernel, n_ops, op, side)
    if backend not in ("none", bc.EAGER_TORCH_OPS):
        fn = torch.compile(fn, backend=backend, fullgraph=True)
    return (lambda: fn(x, y)), n_ops


def _jax_program(side: str, kernel: str, loop: int):
    import jax
    import jax.numpy as jnp

    import bench_compile_jax as bj

    body = bj.build_both()[kernel][0 if side == "tensorplug" else 1]
    _, looped = bj.make_runners(body, loop)
    x = jnp.arange(bj.ELEMENTS, dtype=jnp.float32)
    out = jnp.ones(bj.ELEMENTS, jnp.float32)
    return (lambda: looped(x, out).block_until_ready()), loop


def inner(args) -> int:
    helper = ctypes.CDLL(args.helper)
    if args.framework == "torch":
        run, ops_per_call = _torch_program(args.side, args.kernel, args.backend, args.ops)
    else:
        run, ops_per_call = _jax_program(args.side, args.kernel, args.loop)
    for _ in range(args.warmup):
        run()
    helper.tp_cg_start()
    for _ in range(args.calls):
        run()
    helper.tp_cg_stop()
    return 0


def measure(args, side: str, work: Path, helper: Path):
    tag = f"{args.framework}_{args.kernel}_{args.backend}_{side}"
    outfile = work / f"callgrind.{tag}.out"
    cmd = ["valgrind", "--tool=callgrind", "--instr-atstart=no", f"--callgrind-out-file={outfile}",
           sys.executable, os.path.abspath(__file__), args.framework, "--inner", "--helper", str(helper),
           "--side", side, "--kernel", args.kernel, "--backend", args.backend, "--loop", str(args.loop),
           "--calls", str(args.calls), "--warmup", str(args.warmup), "--ops", str(args.ops)]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        raise SystemExit(f"{side}: valgrind run failed:\n{proc.stdout}{proc.stderr[-4000:]}")
    dumps = sorted(work.glob(f"callgrind.{tag}.out*"))
    measured = next((d for d in dumps if "measured" in d.read_text(errors="replace")[:2000]), dumps[0])
    symbolize = profile_call.Symbolizer(Path(args.symbols))
    exclusive = [(n, symbolize(name)) for n, name in profile_call.annotate(str(measured), inclusive=False)]
    inclusive = [(n, symbolize(name)) for n, name in profile_call.annotate(str(measured), inclusive=True)]
    totals = subprocess.run(["callgrind_annotate", str(measured)], capture_output=True, text=True, check=True).stdout
    total = next(int(line.split()[0].replace(",", "")) for line in totals.splitlines() if "PROGRAM TOTALS" in line)
    return total, inclusive, exclusive, measured


def outer(args) -> int:
    work = Path(args.out_dir or tempfile.mkdtemp(prefix="tp_callgrind_ops_"))
    work.mkdir(parents=True, exist_ok=True)
    helper = profile_call.build_helper(work)
    ops = args.calls * (args.loop if args.framework == "jax" else args.ops)
    totals = {}
    for side in ("tensorplug", "native"):
        total, inclusive, exclusive, path = measure(args, side, work, helper)
        totals[side] = total / ops
        print(f"{side}: {totals[side]:,.0f} instructions per op call ({path})")
        if args.top:
            for title, rows in (("inclusive", inclusive), ("self", exclusive)):
                print(f"  {title}")
                for n, name in rows[: args.top]:
                    print(f"  {n / ops:10.1f}  {profile_call.shorten(name, 110)}")
    what = f"{args.kernel}, {args.backend}" if args.framework == "torch" else f"{args.kernel}, in-jit loop"
    print(f"{args.framework} ({what}): tensorplug {totals['tensorplug']:,.0f}, native {totals['native']:,.0f}, "
          f"ratio {totals['tensorplug'] / totals['native']:.2f}")
    return 0


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("framework", choices=["torch", "jax"])
    parser.add_argument("--kernel", default="axpy", help="torch: axpy or scale; jax: axpy or add_one")
    parser.add_argument("--backend", default="inductor", help="torch.compile backend, none (eager, through the tensorplug Op) or eager-ops (eager, "
                        "through torch's operator on both sides)")
    parser.add_argument("--loop", type=int, default=1000, help="jax: op calls per jitted loop")
    parser.add_argument("--calls", type=int, default=200, help="measured calls of the compiled program")
    parser.add_argument("--ops", type=int, default=100, help="torch: op calls per program (bench_compile.make_program)")
    parser.add_argument("--warmup", type=int, default=20)
    parser.add_argument("--top", type=int, default=0, help="list the top N functions of each side")
    parser.add_argument("--symbols", default=str(Path(__file__).resolve().parents[1] / "build"))
    parser.add_argument("--out-dir")
    parser.add_argument("--inner", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--helper", help=argparse.SUPPRESS)
    parser.add_argument("--side", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    return inner(args) if args.inner else outer(args)


if __name__ == "__main__":
    sys.exit(main())
