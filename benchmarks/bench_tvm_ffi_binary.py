"""One binary built for apache tvm-ffi, called through tensorplug and through tvm-ffi's own paths
(issue 42 item 6; benchmarks/README.md, "A tvm-ffi binary through tensorplug").

    python benchmarks/bench_tvm_ffi_binary.py [--calls N] [--repeat N] [--loop N] [--json PATH]
    python benchmarks/bench_tvm_ffi_binary.py --callgrind [--calls N] [--compare-bridge OLD.cc] [--keep DIR]

The library is built once by ``tvm_ffi.cpp.build_inline`` (with tvm-ffi's metadata) and loaded
twice, unchanged: by ``tvm_ffi.load_module`` and by ``tensorplug.load_module``. Rows:

- numpy and torch, eager: the same function called through tvm-ffi's Python module and
  through tensorplug (``one_tensor``, ``three_tensors_two_scalars``, the allocating
  ``alloc_like``), best of ``--repeat`` loops of ``--calls`` calls, the two sides alternating;
- jax, inside ``jax.jit``: ``x + 1`` by the tvm-ffi function registered with ``jax-tvm-ffi``
  (``register_ffi_target``, destination passing, called with ``jax.ffi.ffi_call``) against
  the same binary's functions made ``tensorplug.op`` s: the same destination-passing function
  (its output passed in as an array, ``jnp.empty_like(x)``, an operand aliased to the result;
  or as ``jax.ShapeDtypeStruct``, a fresh XLA result as jax-tvm-ffi's) and an allocating twin
  (``FromEnvAlloc``, XLA's result buffer lent).
  Two modes: ``dispatch`` (one jitted call per op call) and ``in-jit loop`` (a jitted
  ``lax.fori_loop`` of ``--loop`` dependent op calls, time per op call).

``--callgrind`` runs each side of the eager numpy/torch ``one_tensor`` rows and the jax in-jit
loop rows under ``valgrind --tool=callgrind`` with instrumentation on only around the
measured calls (benchmarks/profile_call.py's helper) and prints instructions per call; for the
jax rows also without XLA's Eigen pool spinning (counted by callgrind, and different from one
process to the next), and those of one iteration of the loop's body alone (the op without the
program's dispatch: the count that repeats from run to run). ``--compare-bridge OLD.cc`` runs each tensorplug row again with the
tvm-ffi bridge built from ``OLD.cc`` (an older ``core/tensorplug/tvm_ffi/bridge.cc``), right
after the installed one's; ``--keep DIR`` keeps the dumps for ``callgrind_annotate``.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent

SOURCE = r"""
#include <tvm/ffi/container/tensor.h>
#include <tvm/ffi/extra/c_env_api.h>
#include <tvm/ffi/function.h>
namespace ffi = tvm::ffi;

void OneTensor(ffi::TensorView a) {}
void ThreeTensorsTwoScalars(ffi::TensorView a, ffi::TensorView b, ffi::TensorView c, int64_t n, double alpha) {}
ffi::Tensor AllocLike(ffi::TensorView x) {
  return ffi::Tensor::FromEnvAlloc(TVMFFIEnvTensorAlloc, x.shape(), x.dtype(), x.device());
}
// y = x + 1, float32: destination passing and allocating.
void AddOneInto(ffi::TensorView x, ffi::TensorView y) {
  const float* a = static_cast<const float*>(x.data_ptr());
  float* b = static_cast<float*>(y.data_ptr());
  for (int64_t i = 0; i < x.numel(); ++i) b[i] = a[i] + 1;
}
ffi::Tensor AddOne(ffi::TensorView x) {
  ffi::Tensor y = ffi::Tensor::FromEnvAlloc(TVMFFIEnvTensorAlloc, x.shape(), x.dtype(), x.device());
  AddOneInto(x, y);
  return y;
}
TVM_FFI_DLL_EXPORT_TYPED_FUNC(one_tensor, OneTensor);
TVM_FFI_DLL_EXPORT_TYPED_FUNC(three_tensors_two_scalars, ThreeTensorsTwoScalars);
TVM_FFI_DLL_EXPORT_TYPED_FUNC(alloc_like, AllocLike);
TVM_FFI_DLL_EXPORT_TYPED_FUNC(add_one_into, AddOneInto);
TVM_FFI_DLL_EXPORT_TYPED_FUNC(add_one, AddOne);
"""

EAGER_CASES = {"one_tensor": 1, "three_tensors_two_scalars": 3, "alloc_like": 1}


def build() -> str:
    import tvm_ffi.cpp

    return tvm_ffi.cpp.build_inline("bench_tvm_ffi_binary", cpp_sources=SOURCE,
                                    extra_cflags=["-DTVM_FFI_DLL_EXPORT_INCLUDE_METADATA=1"])


def modules(path: str):
    import tvm_ffi

    import tensorplug

    return tvm_ffi.load_module(path), tensorplug.load_module(path, writes={"add_one_into": [1]})


def eager_arguments(framework: str, case: str) -> tuple:
    if framework == "numpy":
        import numpy as np
        tensors = [np.zeros(4, np.float32) for _ in range(EAGER_CASES[case])]
    else:
        import torch
        tensors = [torch.zeros(4) for _ in range(EAGER_CASES[case])]
    return (*tensors, 3, 0.5) if case == "three_tensors_two_scalars" else tuple(tensors)


def _loop(func, args, n: int) -> float:
    start = time.perf_counter_ns()
    for _ in range(n):
        func(*args)
    return (time.perf_counter_ns() - start) / n


def eager_rows(path: str, calls: int, repeat: int) -> list[dict]:
    theirs, ours = modules(path)
    rows = []
    for framework in ("numpy", "torch"):
        for case in EAGER_CASES:
            args = eager_arguments(framework, case)
            sides = {"tvm-ffi": theirs[case] if hasattr(theirs, "__getitem__") else getattr(theirs, case),
                     "tensorplug": ours[case]}
            best = {}
            for side, func in sides.items():
                try:
                    func(*args)
                except Exception as exc:  # noqa: BLE001  (the row records what fails)
                    best[side] = f"fails: {type(exc).__name__}: {str(exc).splitlines()[0][:80]}"
            for r in range(repeat):
                order = list(sides) if r % 2 == 0 else list(reversed(sides))
                for side in order:
                    if isinstance(best.get(side), str):
                        continue
                    t = _loop(sides[side], args, calls)
                    best[side] = min(best.get(side, t), t)
            ratio = (best["tensorplug"] / best["tvm-ffi"]
                     if all(isinstance(best[s], float) for s in sides) else None)
            rows.append({"framework": framework, "case": case, **{f"{s}_ns": best[s] for s in sides}, "ratio": ratio})
    return rows


def jax_functions(path: str):
    import jax
    import jax.numpy as jnp
    import jax_tvm_ffi

    import tensorplug

    theirs, ours = modules(path)
    jax_tvm_ffi.register_ffi_target("bench_tvm_binary.add_one_into", theirs.add_one_into, ["args", "rets"],
                                    platform="cpu")
    into = tensorplug.op("bench_tvm_binary::add_one_into", ours.add_one_into)
    alloc = tensorplug.op("bench_tvm_binary::add_one", ours.add_one, returns=tensorplug.like("arg0"))
    return {
        "jax-tvm-ffi": lambda x: jax.ffi.ffi_call("bench_tvm_binary.add_one_into",
                                                  jax.ShapeDtypeStruct(x.shape, x.dtype))(x),
        "tensorplug (destination)": lambda x: into(x, jnp.empty_like(x)),
        # The written parameter as a fresh XLA result (no operand, no fill): jax-tvm-ffi's form.
        "tensorplug (destination, fresh)": lambda x: into(x, jax.ShapeDtypeStruct(x.shape, x.dtype)),
        "tensorplug (allocating)": alloc,
    }


def jax_programs(path: str, loop: int):
    import jax

    programs = {}
    for side, f in jax_functions(path).items():
        programs[side, "dispatch"] = jax.jit(f)
        programs[side, "in-jit loop"] = jax.jit(lambda x, f=f: jax.lax.fori_loop(0, loop, lambda i, v: f(v), x))
    return programs


def jax_rows(path: str, calls: int, repeat: int, loop: int) -> list[dict]:
    import jax
    import jax.numpy as jnp
    import numpy as np

    x = jnp.zeros(4, jnp.float32)
    programs = jax_programs(path, loop)
    for (side, mode), program in programs.items():
        expected = 1 if mode == "dispatch" else loop
        assert np.array_equal(np.asarray(program(x)), np.full(4, expected, np.float32)), (side, mode)
    best = {}
    for r in range(repeat):
        keys = list(programs) if r % 2 == 0 else list(reversed(programs))
        for key in keys:
            program = programs[key]
            n = calls if key[1] == "dispatch" else max(1, calls // loop)
            start = time.perf_counter_ns()
            for _ in range(n):
                jax.block_until_ready(program(x))
            t = (time.perf_counter_ns() - start) / n / (1 if key[1] == "dispatch" else loop)
            best[key] = min(best.get(key, t), t)
    rows = []
    for mode in ("dispatch", "in-jit loop"):
        base = best["jax-tvm-ffi", mode]
        for side in ("tensorplug (destination)", "tensorplug (destination, fresh)", "tensorplug (allocating)"):
            rows.append({"framework": "jax", "mode": mode, "side": side, "tensorplug_ns": best[side, mode],
                         "jax_tvm_ffi_ns": base, "ratio": best[side, mode] / base})
    return rows


# ----------------------------------------------------------------- callgrind ----
def use_bridge(source: str) -> None:
    """Make tensorplug.load_module build its tvm-ffi bridge from ``source`` (an older or a
    changed bridge.cc) instead of the installed one, to compare two bridges in one run."""
    import tensorplug.cpp as cpp

    original = cpp.load_cdll

    def load_cdll(name, sources, **options):
        return original(name, [Path(source)] if name == "tensorplug_tvm_ffi_bridge" else sources, **options)

    cpp.load_cdll = load_cdll


def callgrind_inner(args) -> int:
    import ctypes

    helper = ctypes.CDLL(args.helper)
    if args.bridge:
        use_bridge(args.bridge)
    path = build()
    if args.framework == "jax":
        import jax
        import jax.numpy as jnp

        program = jax_programs(path, args.loop)[args.side, "in-jit loop"]
        x = jnp.zeros(4, jnp.float32)
        jax.block_until_ready(program(x))
        helper.tp_cg_start()
        for _ in range(args.calls):
            jax.block_until_ready(program(x))
        helper.tp_cg_stop()
        return 0
    theirs, ours = modules(path)
    func = ours["one_tensor"] if args.side == "tensorplug" else theirs.one_tensor
    call_args = eager_arguments(args.framework, "one_tensor")
    _loop(func, call_args, 100)
    helper.tp_cg_start()
    _loop(func, call_args, args.calls)
    helper.tp_cg_stop()
    return 0


# XLA's Eigen pool threads spin while they wait for work, and callgrind counts the spinning,
# which varies from run to run (0 to about 560 instructions per op here, with
# --xla_cpu_multi_thread_eigen=false too): the jax rows also give the count without it.
SPIN = re.compile(r"Eigen::(ThreadPoolTempl|RunQueue|EventCount)|tsl::thread::EigenEnvironment")


# One iteration of the jitted fori_loop: XLA's sequential executor of the loop body (callgrind
# marks the nested call of ThunkExecutor::ExecuteSequential with '2). Its count is the op's
# cost alone, without the program's dispatch, and repeats from run to run.
LOOP_BODY = re.compile(r"ThunkExecutor::ExecuteSequential\(.*\)'2 ")


def annotated(dump: Path, inclusive: bool) -> list[tuple[int, str]]:
    """(instructions, function) rows of callgrind_annotate on a dump."""
    proc = subprocess.run(["callgrind_annotate", f"--inclusive={'yes' if inclusive else 'no'}", "--threshold=100",
                           str(dump)], capture_output=True, text=True, check=True)
    rows = []
    for line in proc.stdout.splitlines():
        m = re.match(r"\s*([\d,]+) ", line)
        if m and "PROGRAM TOTALS" not in line:
            rows.append((int(m.group(1).replace(",", "")), line))
    return rows


def spin_instructions(dump: Path) -> int:
    """Instructions of the functions SPIN matches in a callgrind dump."""
    return sum(n for n, line in annotated(dump, False) if SPIN.search(line))


def loop_body_instructions(dump: Path) -> int:
    """Instructions of the jitted loop's body (LOOP_BODY, inclusive) in a callgrind dump."""
    return sum(n for n, line in annotated(dump, True) if LOOP_BODY.search(line))


def callgrind_outer(args) -> list[dict]:
    sys.path.insert(0, str(HERE))
    import profile_call

    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        helper = profile_call.build_helper(Path(tmp))
        runs = [(fw, side, args.calls, None) for fw in ("numpy", "torch") for side in ("tvm-ffi", "tensorplug")]
        runs += [("jax", side, max(1, args.calls // args.loop), None)
                 for side in ("jax-tvm-ffi", "tensorplug (destination)", "tensorplug (destination, fresh)",
                              "tensorplug (allocating)")]
        if args.compare_bridge:  # each tensorplug run again, with the other bridge, right after it
            runs = [r for run in runs
                    for r in ([run, (*run[:3], args.compare_bridge)] if "tensorplug" in run[1] else [run])]
        for fw, side, calls, bridge in runs:
            label = f"{side} [{Path(bridge).name}]" if bridge else side
            if args.only and args.only not in f"{fw} {side}":
                continue
            out = Path(tmp) / "callgrind.out"
            cmd = ["valgrind", "--tool=callgrind", "--instr-atstart=no", f"--callgrind-out-file={out}",
                   sys.executable, __file__, "--inner", "--helper", str(helper), "--framework", fw, "--side", side,
                   "--calls", str(calls), "--loop", str(args.loop), *(["--bridge", bridge] if bridge else [])]
            subprocess.run(cmd, check=True, capture_output=True, env=dict(os.environ, PYTHONHASHSEED="0"))
            dumps = sorted(Path(tmp).glob("callgrind.out*"))
            total, spin, body = 0, 0, 0
            for dump in dumps:
                for line in dump.read_text(errors="replace").splitlines():
                    if line.startswith("totals:") or line.startswith("summary:"):
                        count = int(line.split()[1])
                        if count > total:
                            total = count
                            if fw == "jax":
                                spin, body = spin_instructions(dump), loop_body_instructions(dump)
                if args.keep:  # for callgrind_annotate's per-function counts
                    Path(args.keep).mkdir(parents=True, exist_ok=True)
                    name = re.sub(r"[^\w.-]+", "_", f"{fw}-{label}").strip("_")
                    dump.rename(Path(args.keep) / f"{name}.{dump.name}")
                else:
                    dump.unlink()
            n = calls * (args.loop if fw == "jax" else 1)
            row = {"framework": fw, "side": label, "instructions_per_call": round(total / n)}
            text = f"{fw:6} {label:48} {total / n:8.0f} instructions per call"
            if fw == "jax":
                row["without_spin"] = round((total - spin) / n)
                row["loop_body"] = round(body / n)
                text += (f", {(total - spin) / n:6.0f} without the Eigen pool's spinning, {body / n:6.0f} in the "
                         "loop's body")
            rows.append(row)
            print(text, flush=True)
    return rows


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--calls", type=int, default=20000)
    parser.add_argument("--repeat", type=int, default=7)
    parser.add_argument("--loop", type=int, default=1000)
    parser.add_argument("--json")
    parser.add_argument("--callgrind", action="store_true")
    parser.add_argument("--only", help="with --callgrind: the runs whose '<framework> <side>' contains this")
    parser.add_argument("--keep", help="with --callgrind: keep the callgrind dumps in this folder "
                        "(callgrind_annotate reads them)")
    parser.add_argument("--compare-bridge", metavar="BRIDGE_CC",
                        help="with --callgrind: run each tensorplug row again with the tvm-ffi bridge built from "
                        "this source (an older bridge.cc), right after the installed one's")
    parser.add_argument("--bridge", help=argparse.SUPPRESS)
    parser.add_argument("--inner", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--helper", help=argparse.SUPPRESS)
    parser.add_argument("--framework", help=argparse.SUPPRESS)
    parser.add_argument("--side", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.inner:
        return callgrind_inner(args)
    if args.callgrind:
        result = {"callgrind": callgrind_outer(args)}
    else:
        path = build()
        eager = eager_rows(path, args.calls, args.repeat)
        for r in eager:
            fmt = lambda v: f"{v:8.0f}" if isinstance(v, float) else v  # noqa: E731
            ratio = f"{r['ratio']:.2f}" if r["ratio"] is not None else "-"
            print(f"{r['framework']:6} {r['case']:26} tvm-ffi {fmt(r['tvm-ffi_ns'])} ns  tensorplug "
                  f"{fmt(r['tensorplug_ns'])} ns  ratio {ratio}", flush=True)
        jx = jax_rows(path, args.calls // 4, args.repeat, args.loop)
        for r in jx:
            print(f"jax    {r['mode']:12} {r['side']:32} {r['tensorplug_ns']:8.0f} ns  jax-tvm-ffi "
                  f"{r['jax_tvm_ffi_ns']:8.0f} ns  ratio {r['ratio']:.2f}", flush=True)
        result = {"eager": eager, "jax": jx}
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
