"""Call-overhead benchmark, tensorplug side by side with apache-tvm-ffi, and the no-argument
call with nanobind (README.md).

    python benchmarks/bench_overhead.py [--repeat N] [--calls N] [--frameworks numpy,torch] [--json PATH]

``tensorplug bench`` runs this script from a source checkout. This file holds the targets,
the report and the command line; overhead_measure.py does the measuring.

Also reported: ``import tensorplug`` time (fresh interpreters) and the Python-heap and
C-heap memory a call leaves behind or allocates transiently.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
from pathlib import Path

from overhead_measure import (ALLOC_OVERHEAD_FRAMEWORKS, ALLOC_OVERHEAD_TARGET_NS, CASES, FRAMEWORKS,
                              IMPORT_TARGET_MS, LIST_FRAMEWORKS, LIST_RATIO_MARGIN, LIST_ROW, NANOBIND_CASE,
                              NANOBIND_RATIO_TARGET, NO_FRAMEWORK, RATIO_TARGETS, SEPARATE_ROW, build_implementations,
                              framework_status, framework_version, import_time, python_call_floor, run_memory,
                              run_rows)


# ---------------------------------------------------------------- targets ----


SMOKE_RUN = "not judged: --quick is a smoke run, not a measurement"


def evaluate_targets(rows: list[dict], imports: dict, measured: bool = True) -> list[dict]:
    """The targets (benchmarks/README.md), each with met True/False (None: not measured).
    With ``measured`` False (``--quick``) the targets on times are not judged: met None, and
    the detail says so; those on what works (every framework allocates, no framework
    imported) still are."""
    targets = []

    def timed(met, detail):
        return (met, detail) if measured else (None, f"{detail} ({SMOKE_RUN})")

    for fw, limit in RATIO_TARGETS.items():
        fw_rows = [r for r in rows if r["framework"] == fw]
        if not fw_rows:
            continue
        ratios = [r["ratio"] for r in fw_rows if r["ratio"] is not None]
        worst = max(ratios) if ratios else None
        worst_row = next((r["case"] for r in fw_rows if r["ratio"] == worst), None)
        met, detail = timed((worst <= limit) if worst is not None else None,
                            f"worst {worst:.2f} ({worst_row}), {len(ratios)} rows compared"
                            if worst is not None else "no row comparable")
        targets.append({"target": f"{fw}: every ratio tensorplug/tvm-ffi <= {limit}", "met": met, "detail": detail})
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
        met, detail = timed(over <= ALLOC_OVERHEAD_TARGET_NS if over is not None else None,
                            f"{over:.0f} ns" if over is not None else "not measured")
        targets.append({"target": f"{r['framework']}: alloc_like overhead over empty_like <= "
                                  f"{ALLOC_OVERHEAD_TARGET_NS:.0f} ns", "met": met, "detail": detail})
    by_key = {(r["case"], r["framework"]): r for r in rows}
    for fw in LIST_FRAMEWORKS:
        listed, separate = by_key.get((LIST_ROW, fw)), by_key.get((SEPARATE_ROW, fw))
        if listed is None or separate is None:
            continue
        a, b = listed["ratio"], separate["ratio"]
        met, detail = timed(a <= b * LIST_RATIO_MARGIN if a is not None and b is not None else None,
                            f"{a:.2f} vs {b:.2f}" if a is not None and b is not None else "not measured")
        targets.append({"target": f"{fw}: {LIST_ROW} ratio <= {SEPARATE_ROW} ratio (x{LIST_RATIO_MARGIN} for noise)",
                        "met": met, "detail": detail})
    nb_row = by_key.get((NANOBIND_CASE, NO_FRAMEWORK))
    if nb_row is not None:
        ratio = nb_row.get("ratio_nanobind")
        if ratio is not None:
            met, detail = timed(ratio <= NANOBIND_RATIO_TARGET,
                                f"{ratio:.2f} ({nb_row['tensorplug_ns']:.1f} vs {nb_row['nanobind_ns']:.1f} ns)")
        else:
            met, detail = None, f"n/a: {nb_row.get('nanobind_reason') or 'not measured'}"
        targets.append({"target": f"{NANOBIND_CASE}: tensorplug / nanobind <= {NANOBIND_RATIO_TARGET} with the GIL "
                                  "released", "met": met, "detail": detail})
    tp_import = imports.get("tensorplug")
    if tp_import and tp_import.get("available"):
        met, detail = timed(tp_import["best_ms"] < IMPORT_TARGET_MS, f"{tp_import['best_ms']:.1f} ms")
        targets.append({"target": f"import tensorplug < {IMPORT_TARGET_MS:.0f} ms", "met": met, "detail": detail})
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
    ("nanobind", "nanobind_ns"), ("tp/nb", "ratio_nanobind"),
    ("nanobind held", "nanobind_gil_held_ns"), ("tp/nb held", "ratio_nanobind_gil_held"),
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
    if key in ("tvm_ffi_ns", "nanobind_ns"):
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
           f"after {s['warmup']} warm-up calls, variants interleaved"
           + (" (--quick: a smoke run, its numbers are not a measurement)" if s.get("quick") else ""),
           f"tensorplug {result['versions']['tensorplug']}, apache-tvm-ffi "
           f"{result['versions']['tvm_ffi'] or 'n/a (' + result['tvm_ffi_reason'] + ')'}, "
           + ", ".join(f"{k} {v}" for k, v in result["versions"].items()
                       if k not in ("tensorplug", "tvm_ffi", "nanobind") and v),
           f"{result['machine']['cpu']}, {result['machine']['cpus']} CPUs, {result['machine']['platform']}",
           "columns: tensorplug / tvm-ffi release the GIL around the kernel (both defaults); "
           "'held': tensorplug release_gil=False, tvm-ffi Function.release_gil=False; "
           "ratio = tensorplug / tvm-ffi",
           f"nanobind {result['versions'].get('nanobind') or 'n/a (' + result['nanobind_reason'] + ')'}: the same "
           "empty noop() bound with nb::call_guard<nb::gil_scoped_release>() ('held': without it), "
           f"{NANOBIND_CASE} only; tp/nb = tensorplug / nanobind",
           "", format_table(result["rows"]), ""]
    if result.get("python_call_floor_ns") is not None:
        out.append(f"reference: a Python `def f(): pass` call in the same loop: "
                   f"{result['python_call_floor_ns']:.0f} ns")
    skipped = [f"{name} ({info['reason']})" for name, info in result["frameworks"].items() if not info["ok"]]
    if skipped:
        out.append("skipped: " + "; ".join(skipped))
    for r in result["rows"]:  # full messages of case-specific failures
        for key in ("tensorplug", "tensorplug_gil_held", "tvm_ffi", "empty_like", "nanobind"):
            if f"{key}_error" in r and (key not in ("tvm_ffi", "nanobind") or result["versions"].get(key)):
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
        out.append(f"targets ({SMOKE_RUN}):" if s.get("quick") else "targets:")
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
    parser.add_argument("--without-nanobind", action="store_true",
                        help="do not build the nanobind extension (its cells read n/a)")
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
    impls = build_implementations(args.without_tvm_ffi, verbose=args.verbose,
                                  without_nanobind=args.without_nanobind)
    progress("timing calls")
    floor = python_call_floor(args.calls, args.repeat)
    rows = run_rows(impls, frameworks, args.case_list, args.calls, args.repeat, args.warmup, progress)
    memory = [] if args.no_memory else run_memory(impls, frameworks, args.case_list, args.memory_calls)

    versions = {"tensorplug": tensorplug.__version__, "tvm_ffi": impls.tvm_ffi_version,
                "nanobind": impls.nanobind_version, "python": platform.python_version()}
    versions.update((name, info["version"]) for name, info in fw_info.items() if info["version"]
                    and name not in ("torch-cuda",))
    return {
        "settings": {"quick": args.quick, "repeat": args.repeat, "calls": args.calls, "warmup": args.warmup,
                     "import_runs": args.import_runs, "memory_calls": args.memory_calls,
                     "frameworks": [fw.name for fw in args.framework_list],
                     "cases": [c.name for c in args.case_list]},
        "versions": versions,
        "machine": {"cpu": _cpu_model(), "cpus": os.cpu_count(), "platform": platform.platform()},
        "tvm_ffi_reason": impls.tvm_ffi_reason,
        "nanobind_reason": impls.nanobind_reason,
        "frameworks": fw_info,
        "python_call_floor_ns": floor,
        "rows": rows,
        "imports": imports,
        "memory": memory,
        "targets": evaluate_targets(rows, imports, measured=not args.quick),
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
