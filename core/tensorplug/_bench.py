"""``tensorplug bench``: per-call overhead, side by side with apache-tvm-ffi.

The same empty kernels (``benchmarks/kernels_tensorplug.cc`` and
``benchmarks/kernels_tvm_ffi.cc``) are compiled for tensorplug and for apache-tvm-ffi and
called in one process, per framework, with a warm-up and the best of N runs of M calls.
The implementations are interleaved within each repeat (and the order reversed on every
other repeat) so that drift in machine speed hits all of them alike.

Also reported: ``import tensorplug`` time (fresh interpreters) and the Python-heap and
C-heap memory a call leaves behind or allocates transiently. See benchmarks/README.md.
"""

from __future__ import annotations

import argparse
import ctypes
import gc
import importlib.util
import itertools
import json
import math
import os
import platform
import subprocess
import sys
import time
import tracemalloc
from dataclasses import dataclass
from pathlib import Path

from . import _core

# ------------------------------------------------------------------ cases ----


@dataclass(frozen=True)
class Case:
    name: str  # row label
    function: str  # kernel name (the same in both kernel sources)
    tensors: int  # number of tensor arguments
    scalars: tuple = ()  # scalar arguments after the tensors
    allocates: bool = False  # returns a new tensor from the env allocator


CASES = (
    Case("no_args", "noop", 0),
    Case("1_tensor", "one_tensor", 1),
    Case("3_tensors", "three_tensors", 3),
    Case("3_tensors_2_scalars", "three_tensors_two_scalars", 3, scalars=(3, 0.5)),
    Case("alloc_like", "alloc_like", 1, allocates=True),
    Case("8_tensors", "eight_tensors", 8),
)
KERNEL_FUNCTIONS = [case.function for case in CASES]
NO_FRAMEWORK = "none"  # the framework column of the no-argument row

# ------------------------------------------------------------- frameworks ----


@dataclass(frozen=True)
class Framework:
    name: str  # row label, e.g. "torch-cuda"
    module: str  # the module to import
    adapter: str  # framework name for tensorplug._frameworks.make
    device: str = "cpu"


FRAMEWORKS = (
    Framework("numpy", "numpy", "numpy"),
    Framework("torch", "torch", "torch"),
    Framework("jax", "jax", "jax"),
    Framework("paddle", "paddle", "paddle"),
    Framework("torch-cuda", "torch", "torch", "cuda:0"),
    Framework("cupy", "cupy", "cupy", "cuda:0"),
)
# Modules whose presence in sys.modules after an import means a framework was imported.
FRAMEWORK_MODULES = ("numpy", "torch", "jax", "jaxlib", "paddle", "cupy", "tensorflow", "mlx")

# Targets of the performance issue (benchmarks/README.md): tensorplug / tvm-ffi per row.
# torch-cuda rows are torch rows; for cupy the design's rule applies: at or below tvm-ffi.
RATIO_TARGETS = {"numpy": 0.8, "torch": 0.8, "paddle": 0.8, "jax": 0.3, "torch-cuda": 0.8, "cupy": 1.0}
ALLOC_OVERHEAD_TARGET_NS = 300.0
ALLOC_OVERHEAD_FRAMEWORKS = ("numpy", "torch", "paddle")
IMPORT_TARGET_MS = 50.0


def _installed(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):  # a parent package missing, or sys.modules[module] = None
        return False


def framework_status(fw: Framework) -> tuple[bool, str]:
    """(usable, reason when not). Imports the framework only when it is installed."""
    if not _installed(fw.module):
        return False, f"{fw.module} not installed"
    try:
        module = importlib.import_module(fw.module)
    except Exception as exc:  # a broken install is reported, not fatal
        return False, f"import {fw.module} failed: {exc}"
    if fw.device.startswith("cuda"):
        if fw.module == "torch" and not module.cuda.is_available():
            return False, "no CUDA device (torch.cuda.is_available() is False)"
        if fw.module == "cupy":
            try:
                count = module.cuda.runtime.getDeviceCount()
            except Exception as exc:
                return False, f"no CUDA device ({exc})"
            if count == 0:
                return False, "no CUDA device"
    return True, ""


def framework_version(fw: Framework) -> str | None:
    module = sys.modules.get(fw.module)
    return getattr(module, "__version__", None)


def make_tensors(fw: Framework, count: int) -> list:
    """``count`` distinct small float32 tensors of ``fw``."""
    import numpy as np

    from ._frameworks import make

    return [make(fw.adapter, np.zeros(4, np.float32), fw.device) for _ in range(count)]


def empty_like_of(fw: Framework):
    """The framework's own ``empty_like``: the baseline of the allocating kernel."""
    if fw.module == "jax":
        import jax.numpy as jnp

        return jnp.empty_like
    return importlib.import_module(fw.module).empty_like


# ---------------------------------------------------------------- kernels ----


def kernel_source(kind: str) -> Path:
    """``benchmarks/kernels_<kind>.cc``: from the source checkout when running from one,
    else the copy installed with the package."""
    name = f"kernels_{kind}.cc"
    candidates = [Path(__file__).resolve().parents[2] / "benchmarks" / name,
                  Path(_core.__file__).parent / "benchmarks" / name]
    env = os.environ.get("TENSORPLUG_BENCH_KERNELS")
    if env:
        candidates.insert(0, Path(env) / name)
    for path in candidates:
        if path.is_file():
            return path
    raise FileNotFoundError(f"benchmark kernel source {name} not found in: "
                            + ", ".join(str(p.parent) for p in candidates))


@dataclass
class Implementations:
    """Callables per kernel name for each implementation (None: unavailable)."""
    tensorplug: object  # Module, release_gil=True (the default)
    tensorplug_gil_held: object  # Module, release_gil=False
    tvm_ffi: dict | None  # name -> tvm_ffi.Function (release_gil default: True)
    tvm_ffi_gil_held: dict | None  # name -> tvm_ffi.Function with release_gil = False
    tvm_ffi_version: str | None
    tvm_ffi_reason: str  # why tvm_ffi is None
    tvm_ffi_short: str  # the same in a few words, for the table


def build_implementations(without_tvm_ffi: bool = False, verbose: bool = False) -> Implementations:
    import tensorplug
    from tensorplug import cpp

    module = cpp.load_inline("tensorplug_bench_overhead", kernel_source("tensorplug").read_text(),
                             functions=KERNEL_FUNCTIONS, verbose=verbose)
    held = tensorplug.load_module(module.path, release_gil=False)
    tvm, tvm_held, version, reason, short = None, None, None, "", ""
    if without_tvm_ffi:
        reason, short = "apache-tvm-ffi disabled (--without-tvm-ffi)", "disabled"
    elif not _installed("tvm_ffi"):
        reason = "apache-tvm-ffi not installed (pip install 'tensorplug[bench]')"
        short = "not installed"
    else:
        try:
            import tvm_ffi
            import tvm_ffi.cpp

            version = getattr(tvm_ffi, "__version__", None)
            tvm_module = tvm_ffi.cpp.load_inline("tensorplug_bench_overhead_tvm_ffi",
                                                 cpp_sources=kernel_source("tvm_ffi").read_text(),
                                                 functions=KERNEL_FUNCTIONS)
            tvm = {name: tvm_module.get_function(name) for name in KERNEL_FUNCTIONS}
            tvm_held = {}
            for name in KERNEL_FUNCTIONS:
                func = tvm_module.get_function(name)  # a new Function object per lookup
                func.release_gil = False
                tvm_held[name] = func
        except Exception as exc:
            tvm = tvm_held = None
            reason = f"apache-tvm-ffi failed: {type(exc).__name__}: {_first_line(exc)}"
            short = "failed to load"
    return Implementations(module, held, tvm, tvm_held, version, reason, short)


# ----------------------------------------------------------------- timing ----

_LOOPS: dict = {}


def _loop(nargs: int, timed: bool = True):
    """``loop(f, n, a0, ..., a{nargs-1})`` calling ``f(a0, ...)`` n times with no
    argument unpacking; returns the elapsed ns when ``timed``."""
    key = (nargs, timed)
    if key not in _LOOPS:
        params = ", ".join(f"a{i}" for i in range(nargs))
        head = f"def loop(f, n{', ' if nargs else ''}{params}):\n"
        body = f"    for _ in repeat(None, n):\n        f({params})\n"
        if timed:
            body = "    start = now()\n" + body + "    return now() - start\n"
        namespace = {"repeat": itertools.repeat, "now": time.perf_counter_ns}
        exec(head + body, namespace)  # noqa: S102 - fixed template, no user input
        _LOOPS[key] = namespace["loop"]
    return _LOOPS[key]


def measure(variants: dict, args: list, calls: int, repeat: int, warmup: int) -> dict:
    """Best ns per call of each variant (callable or None), or the exception it raised.
    Variants run interleaved: each repeat runs all of them, in reverse order every other
    repeat."""
    loop = _loop(len(args))
    results, live = {}, {}
    for key, func in variants.items():
        if func is None:
            continue
        try:
            loop(func, warmup, *args)
        except Exception as exc:
            results[key] = exc
        else:
            live[key] = func
    best = dict.fromkeys(live, math.inf)
    order = list(live)
    gc_enabled = gc.isenabled()
    gc.disable()
    try:
        for r in range(repeat):
            for key in order if r % 2 == 0 else reversed(order):
                if key in results:
                    continue
                try:
                    best[key] = min(best[key], loop(live[key], calls, *args) / calls)
                except Exception as exc:  # should not happen after a good warm-up
                    results[key] = exc
        results.update((k, v) for k, v in best.items() if k not in results)
    finally:
        if gc_enabled:
            gc.enable()
    return results


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return text[0] if text else type(exc).__name__


def _short_reason(exc: BaseException) -> str:
    message = _first_line(exc)
    if "allocator is nullptr" in message:
        return "allocator is nullptr"
    message = message.split(", ")[0]
    return message if len(message) <= 48 else message[:45] + "..."


def python_call_floor(calls: int, repeat: int) -> float:
    """ns per call of a Python ``def f(): pass`` in the same loop: the floor of any call."""
    def nothing():
        pass

    return measure({"python": nothing}, [], calls, repeat, min(calls, 1000))["python"]


def run_rows(impls: Implementations, frameworks: list[Framework], cases: list[Case], calls: int,
             repeat: int, warmup: int, progress) -> list[dict]:
    rows = []
    targets = []
    for case in cases:
        if case.tensors == 0:
            targets.append((case, None))
        else:
            targets.extend((case, fw) for fw in frameworks)
    for case, fw in targets:
        args = (make_tensors(fw, case.tensors) if fw else []) + list(case.scalars)
        name = case.function
        variants = {
            "tensorplug": getattr(impls.tensorplug, name),
            "tvm_ffi": impls.tvm_ffi[name] if impls.tvm_ffi else None,
            "tensorplug_gil_held": getattr(impls.tensorplug_gil_held, name),
            "tvm_ffi_gil_held": impls.tvm_ffi_gil_held[name] if impls.tvm_ffi_gil_held else None,
        }
        if case.allocates:
            variants["empty_like"] = empty_like_of(fw)
        progress(f"  {case.name} / {fw.name if fw else NO_FRAMEWORK}")
        result = measure(variants, args, calls, repeat, warmup)
        row = {"case": case.name, "framework": fw.name if fw else NO_FRAMEWORK, "kernel": name}
        for key in variants:
            value = result.get(key)
            row[f"{key}_ns"] = value if isinstance(value, float) else None
            if isinstance(value, BaseException):  # this variant failed on this case
                row[f"{key}_error"] = f"{type(value).__name__}: {_first_line(value)}"
                row[f"{key}_reason"] = _short_reason(value)
            elif value is None:  # apache-tvm-ffi unavailable altogether
                row[f"{key}_error"] = impls.tvm_ffi_reason
                row[f"{key}_reason"] = impls.tvm_ffi_short
        row["ratio"] = _ratio(row.get("tensorplug_ns"), row.get("tvm_ffi_ns"))
        row["ratio_gil_held"] = _ratio(row.get("tensorplug_gil_held_ns"), row.get("tvm_ffi_gil_held_ns"))
        if case.allocates:
            base = row.get("empty_like_ns")
            for impl in ("tensorplug", "tvm_ffi"):
                ns = row.get(f"{impl}_ns")
                row[f"{impl}_over_empty_like_ns"] = ns - base if ns is not None and base is not None else None
        rows.append(row)
    return rows


def _ratio(a, b):
    return a / b if a is not None and b else None


# ----------------------------------------------------------------- import ----

_IMPORT_PROBE = """
import sys, time, json
start = time.perf_counter()
import {module}
elapsed = time.perf_counter() - start
print(json.dumps({{"ms": elapsed * 1e3, "modules": [m for m in {frameworks!r} if m in sys.modules]}}))
"""


def import_time(module: str, runs: int) -> dict:
    """Best wall time of ``import module`` in fresh interpreters, and the frameworks it
    imported."""
    if not _installed(module):
        return {"module": module, "available": False, "reason": f"{module} not installed"}
    code = _IMPORT_PROBE.format(module=module, frameworks=FRAMEWORK_MODULES)
    times, imported = [], set()
    for _ in range(runs):
        proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
        if proc.returncode != 0:
            last = (proc.stderr.strip().splitlines() or ["no output"])[-1]
            return {"module": module, "available": False, "reason": f"import failed: {last}"}
        data = json.loads(proc.stdout.strip().splitlines()[-1])
        times.append(data["ms"])
        imported.update(data["modules"])
    return {"module": module, "available": True, "best_ms": min(times), "runs_ms": times,
            "frameworks_imported": sorted(imported)}


# ----------------------------------------------------------------- memory ----


class _MallInfo2(ctypes.Structure):
    _fields_ = [(name, ctypes.c_size_t) for name in
                ("arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks", "uordblks",
                 "fordblks", "keepcost")]


def _c_heap_in_use():
    """Bytes in use on the glibc heap (mallinfo2), or None where unavailable."""
    try:
        mallinfo2 = ctypes.CDLL(None).mallinfo2
    except (OSError, AttributeError):
        return None
    mallinfo2.restype = _MallInfo2
    info = mallinfo2()
    return info.uordblks + info.hblkhd


def memory_per_call(func, args: list, calls: int) -> dict:
    """What ``calls`` calls of ``func(*args)`` allocate: the Python heap (tracemalloc) left
    behind per call and its transient peak above the starting point, and the C heap
    (glibc mallinfo2) left behind per call."""
    loop = _loop(len(args), timed=False)
    loop(func, min(calls, 1000), *args)  # caches, lazily created objects
    gc.collect()
    gc_enabled = gc.isenabled()
    gc.disable()
    try:
        # The C heap first, without tracemalloc (whose traces live on the C heap).
        c_before = _c_heap_in_use()
        loop(func, calls, *args)
        c_after = _c_heap_in_use()
        tracemalloc.start()
        try:
            loop(func, 100, *args)  # let tracemalloc's own structures settle
            tracemalloc.reset_peak()
            loop(func, 0, *args)  # what the loop itself allocates (its frame, the iterator)
            _, setup_peak = tracemalloc.get_traced_memory()
            before, _ = tracemalloc.get_traced_memory()
            tracemalloc.reset_peak()
            loop(func, calls, *args)
            after, peak = tracemalloc.get_traced_memory()
        finally:
            tracemalloc.stop()
    finally:
        if gc_enabled:
            gc.enable()
    return {"calls": calls,
            "py_retained_bytes_per_call": (after - before) / calls,
            "py_transient_peak_bytes": max(0, peak - setup_peak),
            "c_heap_retained_bytes_per_call": (c_after - c_before) / calls if c_before is not None else None}


def run_memory(impls: Implementations, frameworks: list[Framework], cases: list[Case], calls: int) -> list[dict]:
    out = []
    for case in cases:
        if case.allocates:
            continue  # a new tensor per call is the point of that kernel
        for fw in (frameworks if case.tensors else [None]):
            args = (make_tensors(fw, case.tensors) if fw else []) + list(case.scalars)
            for impl, funcs in (("tensorplug", impls.tensorplug), ("tvm_ffi", impls.tvm_ffi)):
                if funcs is None:
                    continue
                func = getattr(funcs, case.function) if impl == "tensorplug" else funcs[case.function]
                try:
                    result = memory_per_call(func, args, calls)
                except Exception as exc:
                    result = {"error": f"{type(exc).__name__}: {_first_line(exc)}"}
                out.append({"case": case.name, "framework": fw.name if fw else NO_FRAMEWORK,
                            "implementation": impl, **result})
    return out


# ---------------------------------------------------------------- targets ----


def evaluate_targets(rows: list[dict], imports: dict) -> list[dict]:
    """The performance issue's targets, each with met True/False (None: not measured)."""
    targets = []
    for fw, limit in RATIO_TARGETS.items():
        fw_rows = [r for r in rows if r["framework"] == fw]
        if not fw_rows:
            continue
        ratios = [r["ratio"] for r in fw_rows if r["ratio"] is not None]
        worst = max(ratios) if ratios else None
        worst_row = next((r["case"] for r in fw_rows if r["ratio"] == worst), None)
        targets.append({"target": f"{fw}: every ratio tensorplug/tvm-ffi <= {limit}",
                        "met": (worst <= limit) if worst is not None else None,
                        "detail": f"worst {worst:.2f} ({worst_row}), {len(ratios)} rows compared"
                        if worst is not None else "no row comparable"})
    alloc = [r for r in rows if r["kernel"] == "alloc_like"]
    if alloc:
        failing = [r["framework"] for r in alloc if r.get("tensorplug_ns") is None]
        targets.append({"target": "the allocating kernel works for every framework", "met": not failing,
                        "detail": "fails for " + ", ".join(failing) if failing
                        else f"works for {', '.join(r['framework'] for r in alloc)}"})
    for r in alloc:
        if r["framework"] not in ALLOC_OVERHEAD_FRAMEWORKS:
            continue
        over = r.get("tensorplug_over_empty_like_ns")
        targets.append({"target": f"{r['framework']}: alloc_like overhead over empty_like <= "
                                  f"{ALLOC_OVERHEAD_TARGET_NS:.0f} ns",
                        "met": over <= ALLOC_OVERHEAD_TARGET_NS if over is not None else None,
                        "detail": f"{over:.0f} ns" if over is not None else "not measured"})
    tp_import = imports.get("tensorplug")
    if tp_import and tp_import.get("available"):
        targets.append({"target": f"import tensorplug < {IMPORT_TARGET_MS:.0f} ms",
                        "met": tp_import["best_ms"] < IMPORT_TARGET_MS,
                        "detail": f"{tp_import['best_ms']:.1f} ms"})
        targets.append({"target": "import tensorplug imports no framework",
                        "met": not tp_import["frameworks_imported"],
                        "detail": ", ".join(tp_import["frameworks_imported"]) or "none imported"})
    return targets


# ----------------------------------------------------------------- report ----

COLUMNS = [
    ("case", "case"), ("framework", "framework"),
    ("tensorplug", "tensorplug_ns"), ("tvm-ffi", "tvm_ffi_ns"), ("ratio", "ratio"),
    ("tensorplug held", "tensorplug_gil_held_ns"), ("tvm-ffi held", "tvm_ffi_gil_held_ns"),
    ("ratio held", "ratio_gil_held"),
    ("empty_like", "empty_like_ns"), ("tp - empty_like", "tensorplug_over_empty_like_ns"),
]  # the JSON also has tvm_ffi_over_empty_like_ns


def _cell(row: dict, key: str) -> str:
    value = row.get(key)
    if key in ("case", "framework"):
        return str(value)
    if value is not None:
        return f"{value:.2f}" if key.startswith("ratio") else f"{value:.0f}"
    reason = row.get(key[:-3] + "_reason")
    if reason is None:  # not applicable to this row, or derived from a missing number
        return "-"
    if key == "tvm_ffi_ns":
        return f"n/a: {reason}"
    if key.startswith("tensorplug"):
        return f"error: {reason}"
    return "n/a"


def format_table(rows: list[dict]) -> str:
    header = [title for title, _ in COLUMNS]
    body = [[_cell(r, key) for _, key in COLUMNS] for r in rows]
    widths = [max(len(line[i]) for line in [header, *body]) for i in range(len(header))]

    def line(cells):
        return "  ".join(c.ljust(w) if i < 2 else c.rjust(w) for i, (c, w) in enumerate(zip(cells, widths))).rstrip()

    return "\n".join([line(header), line(["-" * w for w in widths]), *map(line, body)])


def format_report(result: dict) -> str:
    s = result["settings"]
    out = [f"tensorplug bench: ns per call, best of {s['repeat']} runs of {s['calls']} calls "
           f"after {s['warmup']} warm-up calls, variants interleaved",
           f"tensorplug {result['versions']['tensorplug']}, apache-tvm-ffi "
           f"{result['versions']['tvm_ffi'] or 'n/a (' + result['tvm_ffi_reason'] + ')'}, "
           + ", ".join(f"{k} {v}" for k, v in result["versions"].items()
                       if k not in ("tensorplug", "tvm_ffi") and v),
           f"{result['machine']['cpu']}, {result['machine']['cpus']} CPUs, {result['machine']['platform']}",
           "columns: tensorplug / tvm-ffi release the GIL around the kernel (both defaults); "
           "'held': tensorplug release_gil=False, tvm-ffi Function.release_gil=False; "
           "ratio = tensorplug / tvm-ffi",
           "", format_table(result["rows"]), ""]
    if result.get("python_call_floor_ns") is not None:
        out.append(f"reference: a Python `def f(): pass` call in the same loop: "
                   f"{result['python_call_floor_ns']:.0f} ns")
    skipped = [f"{name} ({info['reason']})" for name, info in result["frameworks"].items() if not info["ok"]]
    if skipped:
        out.append("skipped: " + "; ".join(skipped))
    for r in result["rows"]:  # full messages of case-specific failures
        for key in ("tensorplug", "tensorplug_gil_held", "tvm_ffi", "empty_like"):
            if f"{key}_error" in r and (key != "tvm_ffi" or result["versions"]["tvm_ffi"]):
                out.append(f"{r['case']} / {r['framework']}: {key} failed: {r[f'{key}_error']}")
    if result["imports"]:
        out.append("")
        for name, info in result["imports"].items():
            if info.get("available"):
                fws = ", ".join(info["frameworks_imported"]) or "none"
                out.append(f"import {name}: {info['best_ms']:.1f} ms (best of {len(info['runs_ms'])} fresh "
                           f"interpreters); frameworks imported: {fws}")
            else:
                out.append(f"import {name}: n/a ({info['reason']})")
    if result["memory"]:
        out.append("")
        out.append("memory per call with view arguments (Python heap by tracemalloc, C heap by mallinfo2):")
        mem_rows = []
        for m in result["memory"]:
            if "error" in m:
                mem_rows.append([m["case"], m["framework"], m["implementation"], "error: " + m["error"], "", ""])
                continue
            c_heap = m["c_heap_retained_bytes_per_call"]
            mem_rows.append([m["case"], m["framework"], m["implementation"],
                             f"{m['py_retained_bytes_per_call']:.2f}", f"{m['py_transient_peak_bytes']}",
                             f"{c_heap:.2f}" if c_heap is not None else "n/a"])
        header = ["case", "framework", "implementation", "py retained B/call", "py transient peak B",
                  "C heap retained B/call"]
        widths = [max(len(r[i]) for r in [header, *mem_rows]) for i in range(len(header))]
        for cells in [header, ["-" * w for w in widths], *mem_rows]:
            out.append("  ".join(c.ljust(w) if i < 3 else c.rjust(w)
                                 for i, (c, w) in enumerate(zip(cells, widths))).rstrip())
    if result["targets"]:
        out.append("")
        out.append("targets:")
        for t in result["targets"]:
            mark = {True: "met", False: "NOT MET", None: "not measured"}[t["met"]]
            out.append(f"  [{mark}] {t['target']}: {t['detail']}")
    return "\n".join(out)


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


# -------------------------------------------------------------------- CLI ----


def parse_args(argv):
    parser = argparse.ArgumentParser(
        prog="tensorplug bench",
        description="Per-call overhead of tensorplug side by side with apache-tvm-ffi (benchmarks/README.md).")
    parser.add_argument("--repeat", type=int, default=None, help="runs per measurement, best kept (default 7)")
    parser.add_argument("--calls", type=int, default=None, help="calls per run (default 20000)")
    parser.add_argument("--warmup", type=int, default=None, help="warm-up calls per variant (default 2000)")
    parser.add_argument("--frameworks", default=",".join(fw.name for fw in FRAMEWORKS),
                        help="comma-separated frameworks (default: %(default)s)")
    parser.add_argument("--cases", default=",".join(c.name for c in CASES),
                        help="comma-separated cases (default: %(default)s)")
    parser.add_argument("--json", metavar="PATH", help="also write the results as JSON to PATH")
    parser.add_argument("--quick", action="store_true",
                        help="smoke-test sizes: 2 runs of 200 calls, one import probe, few memory calls")
    parser.add_argument("--import-runs", type=int, default=None, help="fresh interpreters per import timing (default 5)")
    parser.add_argument("--memory-calls", type=int, default=None, help="calls per memory measurement (default 20000)")
    parser.add_argument("--no-import", action="store_true", help="skip the import timings")
    parser.add_argument("--no-memory", action="store_true", help="skip the memory measurement")
    parser.add_argument("--without-tvm-ffi", action="store_true",
                        help="do not load apache-tvm-ffi (its columns read n/a)")
    parser.add_argument("-v", "--verbose", action="store_true", help="print progress and compiler commands")
    args = parser.parse_args(argv)
    defaults = dict(repeat=2, calls=200, warmup=50, import_runs=1, memory_calls=500) if args.quick else \
        dict(repeat=7, calls=20000, warmup=2000, import_runs=5, memory_calls=20000)
    for key, value in defaults.items():
        if getattr(args, key) is None:
            setattr(args, key, value)
    for key in ("repeat", "calls", "warmup", "import_runs", "memory_calls"):
        if getattr(args, key) < 1:
            parser.error(f"--{key.replace('_', '-')} must be >= 1")
    known_fw = {fw.name: fw for fw in FRAMEWORKS}
    args.framework_list = []
    for name in filter(None, (n.strip() for n in args.frameworks.split(","))):
        if name not in known_fw:
            parser.error(f"unknown framework {name!r}; choose from {', '.join(known_fw)}")
        args.framework_list.append(known_fw[name])
    known_cases = {c.name: c for c in CASES}
    args.case_list = []
    for name in filter(None, (n.strip() for n in args.cases.split(","))):
        if name not in known_cases:
            parser.error(f"unknown case {name!r}; choose from {', '.join(known_cases)}")
        args.case_list.append(known_cases[name])
    return args


def run(args) -> dict:
    """Run the benchmark described by parsed ``args``; returns the JSON-able result."""
    import tensorplug

    def progress(message):
        if args.verbose:
            print(message, file=sys.stderr, flush=True)

    # Import timings first: fresh interpreters, before this process loads frameworks.
    imports = {}
    if not args.no_import:
        progress("timing imports")
        imports["tensorplug"] = import_time("tensorplug", args.import_runs)
        if not args.without_tvm_ffi:
            imports["tvm_ffi"] = import_time("tvm_ffi", max(1, min(args.import_runs, 3)))

    frameworks, fw_info = [], {}
    for fw in args.framework_list:
        ok, reason = framework_status(fw)
        fw_info[fw.name] = {"ok": ok, "reason": reason, "version": framework_version(fw) if ok else None}
        if ok:
            frameworks.append(fw)

    progress("building kernels")
    impls = build_implementations(args.without_tvm_ffi, verbose=args.verbose)
    progress("timing calls")
    floor = python_call_floor(args.calls, args.repeat)
    rows = run_rows(impls, frameworks, args.case_list, args.calls, args.repeat, args.warmup, progress)
    memory = [] if args.no_memory else run_memory(impls, frameworks, args.case_list, args.memory_calls)

    versions = {"tensorplug": tensorplug.__version__, "tvm_ffi": impls.tvm_ffi_version,
                "python": platform.python_version()}
    versions.update((name, info["version"]) for name, info in fw_info.items() if info["version"]
                    and name not in ("torch-cuda",))
    return {
        "settings": {"repeat": args.repeat, "calls": args.calls, "warmup": args.warmup,
                     "import_runs": args.import_runs, "memory_calls": args.memory_calls,
                     "frameworks": [fw.name for fw in args.framework_list],
                     "cases": [c.name for c in args.case_list]},
        "versions": versions,
        "machine": {"cpu": _cpu_model(), "cpus": os.cpu_count(), "platform": platform.platform()},
        "tvm_ffi_reason": impls.tvm_ffi_reason,
        "frameworks": fw_info,
        "python_call_floor_ns": floor,
        "rows": rows,
        "imports": imports,
        "memory": memory,
        "targets": evaluate_targets(rows, imports),
    }


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    if argv[:1] == ["--"]:  # `tensorplug bench -- --quick`
        argv = argv[1:]
    args = parse_args(argv)
    result = run(args)
    print(format_report(result))
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=2) + "\n")
        print(f"\nwrote {args.json}")
    failed = [r for r in result["rows"] if any(k.startswith("tensorplug") and k.endswith("_error") for k in r)]
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
