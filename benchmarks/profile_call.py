"""Instruction profile of one benchmark row under callgrind: where a call's instructions go.

    python benchmarks/profile_call.py --impl tensorplug --framework torch --case 1_tensor
    python benchmarks/profile_call.py --impl tvm-ffi --framework numpy --case 1_tensor
    python benchmarks/profile_call.py --impl nanobind --case no_args

runs itself under ``valgrind --tool=callgrind --instr-atstart=no``; instrumentation is
switched on (through callgrind client requests, from a tiny C helper loaded with ctypes)
only around ``--calls`` calls of the kernel, after imports, compilation and a warm-up. It
then prints the instructions per call: the total, and per function inclusive and self
(``callgrind_annotate``). The benchmark loop itself costs about 300 instructions per call
(the total minus the callable's inclusive count); ``--impl python`` profiles a Python
``def f(*args): pass`` for reference, and ``--impl nanobind`` the same empty ``noop()``
bound with nanobind (case no_args only; ``kernels_nanobind.cc``). Instruction counts are stable where wall times on a
shared machine are not. Needs valgrind and its headers (valgrind/callgrind.h).
"""

from __future__ import annotations

import argparse
import bisect
import ctypes
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

HELPER_SOURCE = r"""
#include <valgrind/callgrind.h>
void tp_cg_start(void) { CALLGRIND_ZERO_STATS; CALLGRIND_START_INSTRUMENTATION; }
void tp_cg_stop(void) { CALLGRIND_STOP_INSTRUMENTATION; CALLGRIND_DUMP_STATS_AT("measured"); }
"""


def build_helper(directory: Path) -> Path:
    src, lib = directory / "cg_helper.c", directory / "cg_helper.so"
    src.write_text(HELPER_SOURCE)
    subprocess.run(["cc", "-O2", "-shared", "-fPIC", "-o", str(lib), str(src)], check=True)
    return lib


def build_id(path: Path) -> str | None:
    """The GNU build-id of an ELF file (readelf), or None."""
    proc = subprocess.run(["readelf", "-n", str(path)], capture_output=True, text=True)
    m = re.search(r"Build ID: ([0-9a-f]+)", proc.stdout)
    return m.group(1) if m else None


class Symbolizer:
    """Names for the bare addresses callgrind reports in stripped libraries.

    The installed extension is stripped (scikit-build-core installs with --strip), so its
    internal functions show as ``0x... [_core...so]``. The unstripped copy in the build tree
    has the same build-id: look the address up in its symbol table (``nm``)."""

    def __init__(self, search: Path):
        self.unstripped = {}  # build-id -> unstripped file
        if search.is_dir():
            for lib in search.rglob("*.so"):
                bid = build_id(lib)
                if bid:
                    self.unstripped[bid] = lib
        self.tables = {}  # object path -> sorted [(address, name)]

    def _table(self, obj: str):
        if obj not in self.tables:
            table = []
            bid = build_id(Path(obj)) if Path(obj).is_file() else None
            source = self.unstripped.get(bid) if bid else None
            if source:
                out = subprocess.run(["nm", "-C", "--defined-only", str(source)], capture_output=True,
                                     text=True).stdout
                for line in out.splitlines():
                    parts = line.split(" ", 2)
                    if len(parts) == 3 and parts[1] in "tTwW":
                        table.append((int(parts[0], 16), parts[2]))
                table.sort()
            self.tables[obj] = table
        return self.tables[obj]

    def __call__(self, name: str) -> str:
        m = re.match(r"^(?:\S*:)?0x([0-9a-f]+) \[(.+)\]$", name)
        if not m:
            return name
        address, obj = int(m.group(1), 16), m.group(2)
        table = self._table(obj)
        i = bisect.bisect_right(table, (address, "\uffff")) - 1
        if i < 0:
            return name
        base, symbol = table[i]
        offset = f"+{address - base:#x}" if address != base else ""
        return f"{symbol}{offset} [{obj}]"


def inner(args) -> int:
    """Runs under valgrind: set up, then instrument exactly the measured calls."""
    import overhead_measure as bench  # next to this file

    helper = ctypes.CDLL(args.helper)
    case = next(c for c in bench.CASES if c.name == args.case)
    fw = None
    if case.tensors:
        fw = next(f for f in bench.FRAMEWORKS if f.name == args.framework)
        ok, reason = bench.framework_status(fw)
        if not ok:
            sys.exit(f"{fw.name}: {reason}")
    call_args = bench.case_arguments(case, fw)
    if args.impl == "python":
        def func(*_):
            pass
    elif args.impl == "nanobind":
        if case.name != "no_args":
            sys.exit("--impl nanobind: only the no_args case has a nanobind kernel")
        if not bench._installed("nanobind"):
            sys.exit("nanobind not installed")
        module, _ = bench.build_nanobind()
        func = module.noop_gil_held if args.gil_held else module.noop
    else:
        impls = bench.build_implementations(without_tvm_ffi=args.impl != "tvm-ffi")
        if args.impl == "tvm-ffi":
            if impls.tvm_ffi is None:
                sys.exit(impls.tvm_ffi_reason)
            func = (impls.tvm_ffi_gil_held if args.gil_held else impls.tvm_ffi)[case.function]
        else:
            module = impls.tensorplug_gil_held if args.gil_held else impls.tensorplug
            func = getattr(module, case.function)
    loop = bench._loop(len(call_args), timed=False)
    loop(func, args.warmup, *call_args)
    helper.tp_cg_start()
    loop(func, args.calls, *call_args)
    helper.tp_cg_stop()
    return 0


ROW = re.compile(r"^\s*([\d,]+)\s+(?:\(\s*[\d.]+%\)\s+)?(?:\*\s+)?(.+?)\s*$")


def annotate(outfile: str, inclusive: bool) -> list[tuple[int, str]]:
    """(instructions, function) rows of callgrind_annotate, largest first."""
    cmd = ["callgrind_annotate", f"--inclusive={'yes' if inclusive else 'no'}", "--threshold=100", outfile]
    text = subprocess.run(cmd, capture_output=True, text=True, check=True).stdout
    rows, started = [], False
    for line in text.splitlines():
        if "file:function" in line:
            started = True
            continue
        if not started or not line.strip() or line.startswith("-"):
            continue
        m = ROW.match(line)
        if m:
            rows.append((int(m.group(1).replace(",", "")), m.group(2)))
    return rows


def shorten(name: str, width: int) -> str:
    """``file:function [object]`` -> ``function [object basename]``, abbreviated."""
    name = re.sub(r"^(\?\?\?|[^ :]*\.[a-z]+):", "", name)
    name = re.sub(r"\[(?:[^\]]*/)?([^\]/]+)\]$", r"[\1]", name)
    name = name.replace("(anonymous namespace)::", "").replace("tensorplug::py::", "tp::py::")
    return name if len(name) <= width else name[: width - 3] + "..."


def outer(args) -> int:
    work = Path(args.out_dir or tempfile.mkdtemp(prefix="tp_callgrind_"))
    work.mkdir(parents=True, exist_ok=True)
    helper = build_helper(work)
    tag = f"{args.impl}_{args.framework}_{args.case}{'_held' if args.gil_held else ''}"
    outfile = work / f"callgrind.{tag}.out"
    cmd = ["valgrind", "--tool=callgrind", "--instr-atstart=no", f"--callgrind-out-file={outfile}",
           sys.executable, os.path.abspath(__file__), "--inner", "--helper", str(helper),
           "--impl", args.impl, "--framework", args.framework, "--case", args.case,
           "--calls", str(args.calls), "--warmup", str(args.warmup)] + (["--gil-held"] if args.gil_held else [])
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        print(proc.stdout + proc.stderr[-4000:], file=sys.stderr)
        return proc.returncode
    # The dump at tp_cg_stop holds the measured calls; valgrind adds more files on exit.
    dumps = sorted(work.glob(f"callgrind.{tag}.out*"))
    measured = next((d for d in dumps if "measured" in d.read_text(errors="replace")[:2000]), dumps[0])
    symbolize = Symbolizer(Path(args.symbols))
    inclusive = [(n, symbolize(name)) for n, name in annotate(str(measured), inclusive=True)]
    exclusive = [(n, symbolize(name)) for n, name in annotate(str(measured), inclusive=False)]
    total = sum(n for n, _ in exclusive)
    print(f"{args.impl} / {args.framework} / {args.case}{' (GIL held)' if args.gil_held else ''}: "
          f"{total / args.calls:.0f} instructions per call (callgrind, {args.calls} calls; {measured})")
    for title, rows in (("inclusive", inclusive), ("self", exclusive)):
        print(f"\n  {title} instructions per call")
        for n, name in rows[: args.top]:
            if n / args.calls < args.min:
                break
            print(f"  {n / args.calls:9.1f}  {shorten(name, 110)}")
    return 0


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--impl", choices=["tensorplug", "tvm-ffi", "nanobind", "python"], default="tensorplug")
    parser.add_argument("--framework", default="torch", help="numpy, torch, jax, paddle, ...")
    parser.add_argument("--case", default="1_tensor", help="a case of tensorplug bench (1_tensor, no_args, ...)")
    parser.add_argument("--calls", type=int, default=20000)
    parser.add_argument("--warmup", type=int, default=2000)
    parser.add_argument("--gil-held", action="store_true", help="tensorplug release_gil=False / tvm-ffi release_gil=False / nanobind without "
                             "call_guard<gil_scoped_release>")
    parser.add_argument("--top", type=int, default=40, help="functions listed")
    parser.add_argument("--min", type=float, default=0.5, help="hide functions below this many instructions per call")
    parser.add_argument("--symbols", default=str(Path(__file__).resolve().parents[1] / "build"),
                        help="directory of unstripped builds of the installed libraries (default: the "
                             "checkout's scikit-build build tree)")
    parser.add_argument("--out-dir", help="where the callgrind files go (default: a new temporary directory)")
    parser.add_argument("--inner", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--helper", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    return inner(args) if args.inner else outer(args)


if __name__ == "__main__":
    sys.exit(main())
