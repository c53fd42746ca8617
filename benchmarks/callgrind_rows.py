"""Instructions per call of every call-overhead row, one callgrind process per framework.

    python benchmarks/callgrind_rows.py --frameworks numpy,torch --json rows.json
    python benchmarks/callgrind_rows.py --python /tmp/old-venv/bin/python --python /tmp/new-venv/bin/python

The rows of ``bench_overhead.py`` (tensorplug only: every case, GIL released and held),
counted the way ``profile_call.py`` counts one row, but every row of a framework in one
valgrind process (``--instr-atstart=no``; instrumentation on only around each row's
``--calls`` calls, after the imports, the kernel build and a warm-up; one named dump per
row), so that a whole table costs one interpreter start-up per framework instead of one
per row. With several ``--python`` interpreters (each with its own tensorplug install, e.g.
an old and a new build) the processes alternate between them, framework by framework, and
the table puts the builds side by side with the ratio of the last to the first. Prints
instructions per call, including the benchmark loop's ~295 (as profile_call.py does).
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

HELPER_SOURCE = r"""
#include <valgrind/callgrind.h>
void tp_cg_start(void) { CALLGRIND_ZERO_STATS; CALLGRIND_START_INSTRUMENTATION; }
void tp_cg_stop_named(const char* name) { CALLGRIND_STOP_INSTRUMENTATION; CALLGRIND_DUMP_STATS_AT(name); }
"""


def build_helper(directory: Path) -> Path:
    src, lib = directory / "cg_rows_helper.c", directory / "cg_rows_helper.so"
    src.write_text(HELPER_SOURCE)
    subprocess.run(["cc", "-O2", "-shared", "-fPIC", "-o", str(lib), str(src)], check=True)
    return lib


def inner(args) -> int:
    sys.path.insert(0, str(HERE))
    import overhead_measure as bench
    import tensorplug

    helper = ctypes.CDLL(args.helper)
    helper.tp_cg_stop_named.argtypes = [ctypes.c_char_p]
    print(f"tensorplug: {tensorplug.__file__}", file=sys.stderr)
    impls = bench.build_implementations(without_tvm_ffi=True)
    fw = None if args.framework == "none" else next(f for f in bench.FRAMEWORKS if f.name == args.framework)
    if fw is not None:
        ok, reason = bench.framework_status(fw)
        if not ok:
            sys.exit(f"{fw.name}: {reason}")
    for case in bench.CASES:
        if (case.tensors == 0) != (fw is None):
            continue
        call_args = bench.case_arguments(case, fw)
        loop = bench._loop(len(call_args), timed=False)
        for held in (False, True):
            module = impls.tensorplug_gil_held if held else impls.tensorplug
            func = getattr(module, case.function)
            loop(func, args.warmup, *call_args)
            helper.tp_cg_start()
            loop(func, args.calls, *call_args)
            helper.tp_cg_stop_named(f"row {case.name} {args.framework} {'held' if held else 'released'}".encode())
    return 0


def dump_rows(work: Path, tag: str, calls: int) -> dict:
    """{'case framework mode': instructions per call} from one process's named dumps."""
    rows = {}
    for path in sorted(work.glob(f"callgrind.{tag}.out*")):
        head = path.read_text(errors="replace")
        m = re.search(r"^desc: Trigger: Client Request: row (.+)$", head, re.M)
        if not m:
            continue
        total = re.search(r"^totals: (\d+)", head, re.M) or re.search(r"^summary: (\d+)", head, re.M)
        rows[m.group(1).strip()] = int(total.group(1)) / calls
    return rows


def outer(args) -> int:
    work = Path(args.out_dir or tempfile.mkdtemp(prefix="tp_callgrind_rows_"))
    work.mkdir(parents=True, exist_ok=True)
    helper = build_helper(work)
    pythons = args.python or [sys.executable]
    frameworks = ["none"] + [f for f in args.frameworks.split(",") if f]
    results = {py: {} for py in pythons}
    for i, fw in enumerate(frameworks):
        order = pythons if i % 2 == 0 else pythons[::-1]
        for py in order:
            k = pythons.index(py)
            tag = f"p{k}_{fw}"
            cmd = ["valgrind", "--tool=callgrind", "--instr-atstart=no",
                   f"--callgrind-out-file={work / f'callgrind.{tag}.out'}",
                   py, str(Path(__file__).resolve()), "--inner", "--helper", str(helper), "--framework", fw,
                   "--calls", str(args.calls), "--warmup", str(args.warmup)]
            env = dict(os.environ)
            if args.cache_dirs:
                env["TENSORPLUG_CACHE_DIR"] = args.cache_dirs.split(",")[k]
            proc = subprocess.run(cmd, capture_output=True, text=True, env=env)
            if proc.returncode != 0:
                print(f"{py} / {fw}: failed\n{proc.stderr[-3000:]}", file=sys.stderr)
                continue
            rows = dump_rows(work, tag, args.calls)
            results[py].update(rows)
            print(f"[{fw}] {py}: {len(rows)} rows", file=sys.stderr, flush=True)
    keys = list(dict.fromkeys(k for py in pythons for k in results[py]))
    header = f"{'row':<42}" + "".join(f"{'build ' + str(i):>12}" for i in range(len(pythons)))
    header += f"{'last/first':>12}" if len(pythons) > 1 else ""
    print(header)
    for key in keys:
        vals = [results[py].get(key) for py in pythons]
        line = f"{key:<42}" + "".join(f"{v:>12,.0f}" if v is not None else f"{'-':>12}" for v in vals)
        if len(pythons) > 1 and vals[0] and vals[-1]:
            line += f"{vals[-1] / vals[0]:>12.3f}" + ("   > +2%" if vals[-1] / vals[0] > 1.02 else "")
        print(line)
    if args.json:
        Path(args.json).write_text(json.dumps({"pythons": pythons, "calls": args.calls, "results": results}, indent=2))
    return 0


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--python", action="append", help="an interpreter with the build to count (repeatable); "
                        "default: this one")
    parser.add_argument("--frameworks", default="numpy,torch,jax,paddle")
    parser.add_argument("--calls", type=int, default=2000)
    parser.add_argument("--warmup", type=int, default=500)
    parser.add_argument("--cache-dirs", help="TENSORPLUG_CACHE_DIR per --python, comma-separated")
    parser.add_argument("--out-dir")
    parser.add_argument("--json")
    parser.add_argument("--inner", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--helper", help=argparse.SUPPRESS)
    parser.add_argument("--framework", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    return inner(args) if args.inner else outer(args)


if __name__ == "__main__":
    sys.exit(main())
