"""Instructions per op call of the compile benchmarks' rows, every row of a framework in one
callgrind process, for one or more builds side by side.

    python benchmarks/callgrind_ops_rows.py torch --rows axpy:eager-ops,axpy:none,scale:inductor
    python benchmarks/callgrind_ops_rows.py jax --rows add_one:loop1000,add_one:unroll100,axpy:loop1000 \
        --python /tmp/old-venv/bin/python --python /tmp/new-venv/bin/python

The programs are ``profile_ops.py``'s (torch: ``bench_compile.make_program``, 100 chained op
calls, eagerly (``none``: through the tensorplug ``Op``; ``eager-ops``: through torch's
operator, as the native side is called) or in ``torch.compile(fullgraph=True)`` with a
backend; jax: ``bench_compile_jax``'s ops, in a jitted ``lax.fori_loop`` of N calls
(``loopN``) or in a jitted function calling the op N times in a Python loop
(``unrollN``: N custom calls in one XLA program)). Each row runs for the tensorplug op and
for the native one (a ``TORCH_LIBRARY`` op, a hand-written XLA FFI handler) in the same
process: all rows are set up (traced, compiled, warmed up) first, then each row's
``--calls`` program calls are counted alone (callgrind client requests, one named dump per
row and side). With several ``--python`` interpreters (each with its own tensorplug build)
the processes alternate; ``--top N`` lists each tensorplug row's top functions (self
instructions per op call) for the last build, named with the unstripped libraries under
``--symbols`` (one per ``--python``, comma-separated).
"""

from __future__ import annotations

import argparse
import ctypes
import json
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))


# add_into: out = x + y, destination passing, no scalar (issue 41's eager row), float32[64].
ADD_INTO_TENSORPLUG = r"""
namespace tp = tensorplug;
void add_into(tp::TensorView x, tp::TensorView y, tp::MutableView out) {
  TENSORPLUG_CHECK(x.numel() == y.numel() && x.numel() == out.numel(), ValueError) << "add_into: sizes differ";
  const float* a = x.data_ptr<float>();
  const float* b = y.data_ptr<float>();
  float* o = out.mutable_data_ptr<float>();
  for (int64_t i = 0, n = x.numel(); i < n; ++i) o[i] = a[i] + b[i];
}
"""
ADD_INTO_NATIVE = r"""
#include <torch/library.h>
#include <ATen/ATen.h>
void add_into(const at::Tensor& x, const at::Tensor& y, at::Tensor& out) {
  TORCH_CHECK(x.numel() == y.numel() && x.numel() == out.numel(), "add_into: sizes differ");
  const float* a = x.data_ptr<float>();
  const float* b = y.data_ptr<float>();
  float* o = out.data_ptr<float>();
  for (int64_t i = 0, n = x.numel(); i < n; ++i) o[i] = a[i] + b[i];
}
TORCH_LIBRARY_FRAGMENT(bench_native, m) { m.def("add_into(Tensor x, Tensor y, Tensor(a!) out) -> ()"); }
TORCH_LIBRARY_IMPL(bench_native, CPU, m) { m.impl("add_into", &add_into); }
"""


def make_add_into_program(torch, n_ops: int, op, side: str):
    lines = ["def program(x, y):"]
    for _ in range(n_ops):
        lines += ["    out = torch.empty_like(x)", "    op(x, y, out)", "    y = out"]
    lines.append("    return y")
    namespace = {"torch": torch, "op": op}
    exec(compile("\n".join(lines), f"<callgrind_ops_rows {side} add_into x{n_ops}>", "exec"), namespace)
    return namespace["program"]


def _torch_rows(rows):
    """profile_ops._torch_program's programs, its ops declared once per side."""
    import torch

    import bench_compile as bc
    import tensorplug
    from tensorplug import cpp
    from torch.utils import cpp_extension

    mod = cpp.load_inline("bench_compile_ops", bc.TENSORPLUG_SOURCE, functions=["axpy", "scale"])
    tp_ops = {"axpy": tensorplug.op("bench_tp::axpy", mod.axpy),
              "scale": tensorplug.op("bench_tp::scale", mod.scale, returns=tensorplug.like("x"))}
    cpp_extension.load_inline("bench_native_ops", cpp_sources=[bc.NATIVE_SOURCE], is_python_module=False,
                              extra_cflags=["-O2"], verbose=False)
    torch.library.register_fake("bench_native::axpy", lambda x, y, out, alpha: None)
    torch.library.register_fake("bench_native::scale", lambda x, alpha: torch.empty_like(x))
    native_ops = {"axpy": torch.ops.bench_native.axpy.default, "scale": torch.ops.bench_native.scale.default}
    if any(kernel == "add_into" for kernel, _ in rows):
        add_mod = cpp.load_inline("callgrind_add_into", ADD_INTO_TENSORPLUG, functions=["add_into"])
        tp_ops["add_into"] = tensorplug.op("bench_tp::add_into", add_mod.add_into)
        cpp_extension.load_inline("callgrind_add_into_native", cpp_sources=[ADD_INTO_NATIVE], is_python_module=False,
                                  extra_cflags=["-O2"], verbose=False)
        torch.library.register_fake("bench_native::add_into", lambda x, y, out: None)
        native_ops["add_into"] = torch.ops.bench_native.add_into.default
    x, y = torch.rand(bc.N), torch.rand(bc.N)
    programs = {}
    for kernel, backend in rows:
        for side in ("tensorplug", "native"):
            op = (tp_ops if side == "tensorplug" else native_ops)[kernel]
            if side == "tensorplug" and backend == bc.EAGER_TORCH_OPS:
                op.resolve(torch.Tensor)  # registers the torch operator
                op = getattr(torch.ops.bench_tp, kernel).default
            fn = (make_add_into_program(torch, 100, op, side) if kernel == "add_into"
                  else bc.make_program(torch, kernel, 100, op, side))
            if backend not in ("none", bc.EAGER_TORCH_OPS):
                fn = torch.compile(fn, backend=backend, fullgraph=True)
            programs[(kernel, backend, side)] = ((lambda fn=fn: fn(x, y)), 100)
    return programs


def _jax_rows(rows):
    import jax
    import jax.numpy as jnp

    import bench_compile_jax as bj

    bodies = bj.build_both()
    x = jnp.arange(bj.ELEMENTS, dtype=jnp.float32)
    out = jnp.ones(bj.ELEMENTS, jnp.float32)
    programs = {}
    for kernel, mode in rows:
        n = int(re.sub(r"\D", "", mode))
        for k, side in enumerate(("tensorplug", "native")):
            body = bodies[kernel][k]
            if mode.startswith("loop"):
                _, fn = bj.make_runners(body, n)
            else:
                def unrolled(x, acc, body=body, n=n):
                    for _ in range(n):
                        acc = body(x, acc)
                    return acc
                fn = jax.jit(unrolled)
            programs[(kernel, mode, side)] = ((lambda fn=fn: fn(x, out).block_until_ready()), n)
    return programs


def inner(args) -> int:
    import tensorplug

    print(f"tensorplug: {tensorplug.__file__}", file=sys.stderr)
    helper = ctypes.CDLL(args.helper) if args.helper else None
    if helper:
        helper.tp_cg_stop_named.argtypes = [ctypes.c_char_p]
    rows = [tuple(r.split(":")) for r in args.rows.split(",")]
    programs = (_torch_rows if args.framework == "torch" else _jax_rows)(rows)
    for run, _ in programs.values():  # trace, compile, warm up every row first
        for _ in range(args.warmup):
            run()
    if args.wall:  # no valgrind: best of --wall interleaved loops, the order reversed every other round
        import time
        best, names = {}, list(programs)
        for r in range(args.wall):
            for name in (names if r % 2 == 0 else names[::-1]):
                run, ops = programs[name]
                start = time.perf_counter_ns()
                for _ in range(args.calls):
                    run()
                ns = (time.perf_counter_ns() - start) / (args.calls * ops)
                best[name] = min(best.get(name, ns), ns)
        for (kernel, mode, side), ns in best.items():
            if side == "tensorplug":
                nat = best[(kernel, mode, "native")]
                print(f"{kernel} {mode}: tensorplug {ns:,.1f} ns, native {nat:,.1f} ns per op call, ratio {ns / nat:.3f}")
        return 0
    for (kernel, mode, side), (run, ops) in programs.items():
        helper.tp_cg_start()
        for _ in range(args.calls):
            run()
        helper.tp_cg_stop_named(f"row {kernel} {mode} {side} {ops}".encode())
    return 0


def dump_rows(work: Path, tag: str, calls: int) -> dict:
    rows = {}
    for path in sorted(work.glob(f"callgrind.{tag}.out*")):
        head = path.read_text(errors="replace")
        m = re.search(r"^desc: Trigger: Client Request: row (\S+) (\S+) (\S+) (\d+)$", head, re.M)
        if not m:
            continue
        total = re.search(r"^totals: (\d+)", head, re.M) or re.search(r"^summary: (\d+)", head, re.M)
        rows[f"{m.group(1)} {m.group(2)} {m.group(3)}"] = (int(total.group(1)) / (calls * int(m.group(4))), path,
                                                          calls * int(m.group(4)))
    return rows


def outer(args) -> int:
    import profile_call

    work = Path(args.out_dir or tempfile.mkdtemp(prefix="tp_callgrind_ops_rows_"))
    work.mkdir(parents=True, exist_ok=True)
    helper = profile_call.build_helper(work)
    src = (work / "cg_helper.c")
    src.write_text(src.read_text() + 'void tp_cg_stop_named(const char* name) '
                   '{ CALLGRIND_STOP_INSTRUMENTATION; CALLGRIND_DUMP_STATS_AT(name); }\n')
    subprocess.run(["cc", "-O2", "-shared", "-fPIC", "-o", str(helper), str(src)], check=True)
    pythons = args.python or [sys.executable]
    results = {}
    for k, py in enumerate(pythons):
        tag = f"{args.framework}_p{k}"
        env = dict(os.environ)
        if args.cache_dirs:
            env["TENSORPLUG_CACHE_DIR"] = args.cache_dirs.split(",")[k]
        cmd = ["valgrind", "--tool=callgrind", "--instr-atstart=no",
               f"--callgrind-out-file={work / f'callgrind.{tag}.out'}", py, str(Path(__file__).resolve()),
               args.framework, "--inner", "--helper", str(helper), "--rows", args.rows,
               "--calls", str(args.calls), "--warmup", str(args.warmup)]
        proc = subprocess.run(cmd, capture_output=True, text=True, env=env)
        if proc.returncode != 0:
            print(f"{py}: failed\n{proc.stderr[-3000:]}", file=sys.stderr)
            continue
        results[py] = dump_rows(work, tag, args.calls)
        print(f"{py}: {len(results[py])} rows ({work})", file=sys.stderr, flush=True)
    keys = list(dict.fromkeys(key for py in results for key in results[py]))
    print(f"{'row':<36}" + "".join(f"{'build ' + str(i):>12}" for i in range(len(pythons))) +
          (f"{'last/first':>12}" if len(pythons) > 1 else ""))
    for key in keys:
        vals = [results.get(py, {}).get(key, (None,))[0] for py in pythons]
        line = f"{key:<36}" + "".join(f"{v:>12,.0f}" if v else f"{'-':>12}" for v in vals)
        if len(pythons) > 1 and vals[0] and vals[-1]:
            line += f"{vals[-1] / vals[0]:>12.3f}" + ("   > +2%" if vals[-1] / vals[0] > 1.02 else "")
        print(line)
    for py in results:  # tensorplug / native per build
        for key, (v, *_) in results[py].items():
            if key.endswith(" tensorplug"):
                nat = results[py].get(key[: -len("tensorplug")] + "native")
                if nat:
                    print(f"{py}: {key[: -len(' tensorplug')]}: tensorplug {v:,.0f} / native {nat[0]:,.0f} = "
                          f"{v / nat[0]:.3f}")
    if args.top and results:
        k = len(pythons) - 1
        symbols = (args.symbols or "").split(",")
        symbolize = profile_call.Symbolizer(Path(symbols[min(k, len(symbols) - 1)] or HERE.parent / "build"))
        for key, (v, path, ops) in results.get(pythons[k], {}).items():
            for inclusive in (False, True):
                print(f"\n{key} ({'inclusive' if inclusive else 'self'} instructions per op call, {path.name})")
                for n, name in profile_call.annotate(str(path), inclusive=inclusive)[: args.top]:
                    print(f"  {n / ops:9.1f}  {profile_call.shorten(symbolize(name), 130)}")
    if args.json:
        Path(args.json).write_text(json.dumps({py: {key: v for key, (v, *_) in r.items()} for py, r in results.items()},
                                              indent=2))
    return 0


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("framework", choices=["torch", "jax"])
    parser.add_argument("--rows", required=True, help="kernel:mode,...: torch modes none, eager-ops or a torch.compile "
                        "backend; jax modes loopN, unrollN")
    parser.add_argument("--python", action="append")
    parser.add_argument("--calls", type=int, default=20)
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--cache-dirs")
    parser.add_argument("--symbols", help="unstripped build trees, one per --python, comma-separated")
    parser.add_argument("--top", type=int, default=0)
    parser.add_argument("--out-dir")
    parser.add_argument("--json")
    parser.add_argument("--wall", type=int, default=0, help="with --inner and no valgrind: time the rows instead, "
                        "best of this many interleaved loops of --calls program calls")
    parser.add_argument("--inner", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--helper", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    return inner(args) if args.inner or args.wall else outer(args)


if __name__ == "__main__":
    sys.exit(main())
