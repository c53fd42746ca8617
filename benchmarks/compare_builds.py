"""Call overhead of two commits of tensorplug, measured side by side.

    python benchmarks/compare_builds.py BASE [HEAD] [--rounds 7] [--frameworks numpy,torch,jax,paddle]

Builds each commit (a git revision; HEAD defaults to the working tree's HEAD) into its own
directory (``git archive`` + ``pip install --target``), then runs one measuring process per
build and round, alternating the builds (and their order every other round), so that drift
in a shared, noisy machine hits both alike. Each process times every row of the
call-overhead benchmark (benchmarks/overhead_measure.py: the same cases, kernels and timed
loops, tensorplug only, GIL released and held); the table keeps the best ns per call of all
rounds for each row and build. The kernels are compiled once per build (each has its own
load_inline cache).

A measuring process runs with ``python -S``: the build's directory comes first on
sys.path and the caller's site-packages are appended without their .pth files, so an
editable install of tensorplug in the same environment cannot shadow the build under test.
"""

from __future__ import annotations

import argparse
import json
import os
import site as python_site
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent


def build(rev: str, root: Path) -> Path:
    """Install commit `rev` into root/<rev>/site; returns that directory."""
    sha = subprocess.check_output(["git", "-C", str(REPO), "rev-parse", rev], text=True).strip()
    base = root / sha[:12]
    site = base / "site"
    if (site / "tensorplug").is_dir():
        return site
    src = base / "src"
    src.mkdir(parents=True, exist_ok=True)
    archive = subprocess.Popen(["git", "-C", str(REPO), "archive", sha], stdout=subprocess.PIPE)
    subprocess.check_call(["tar", "-x", "-C", str(src)], stdin=archive.stdout)
    if archive.wait() != 0:
        raise SystemExit(f"git archive {rev} failed")
    print(f"building {rev} ({sha[:12]}) ...", file=sys.stderr, flush=True)
    subprocess.check_call([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-build-isolation",
                           "--target", str(site), str(src)])
    return site


def worker(site: str, frameworks: list[str], calls: int, repeat: int, warmup: int) -> None:
    """Measure every row with the build in `site`; print one JSON object."""
    sys.path.insert(0, site)
    sys.path.insert(1, str(HERE))
    # The parent's site-packages (under -S this interpreter would not know a venv's).
    for path in os.environ["TENSORPLUG_COMPARE_SITE"].split(os.pathsep):
        if path not in sys.path:
            sys.path.append(path)
    import overhead_measure as om
    import tensorplug

    if not Path(tensorplug.__file__).resolve().is_relative_to(Path(site).resolve()):
        raise SystemExit(f"measuring the wrong tensorplug: {tensorplug.__file__}")
    impls = om.build_implementations(without_tvm_ffi=True)
    fws = [fw for fw in om.FRAMEWORKS if fw.name in frameworks and om.framework_status(fw)[0]]
    results = {}
    for case in om.CASES:
        for fw in [None] if case.tensors == 0 else fws:
            args = om.case_arguments(case, fw)
            variants = {"released": getattr(impls.tensorplug, case.function),
                        "held": getattr(impls.tensorplug_gil_held, case.function)}
            measured = om.measure(variants, args, calls, repeat, warmup)
            for variant, ns in measured.items():
                if isinstance(ns, float):
                    results[f"{case.name}/{fw.name if fw else om.NO_FRAMEWORK}/{variant}"] = ns
    print(json.dumps(results))


def run_worker(site: Path, cache: Path, args) -> dict:
    env = dict(os.environ, TENSORPLUG_CACHE_DIR=str(cache),
               TENSORPLUG_COMPARE_SITE=os.pathsep.join(python_site.getsitepackages()))
    out = subprocess.check_output(
        [sys.executable, "-S", str(Path(__file__).resolve()), "--worker", str(site),
         "--frameworks", args.frameworks, "--calls", str(args.calls), "--repeat", str(args.repeat),
         "--warmup", str(args.warmup)], env=env, text=True)
    return json.loads(out.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("base", nargs="?", help="the commit to compare against")
    parser.add_argument("head", nargs="?", default="HEAD")
    parser.add_argument("--rounds", type=int, default=7, help="processes per build (alternating)")
    parser.add_argument("--frameworks", default="numpy,torch,jax,paddle")
    parser.add_argument("--calls", type=int, default=20000, help="calls per timed loop")
    parser.add_argument("--repeat", type=int, default=5, help="timed loops per row and process")
    parser.add_argument("--warmup", type=int, default=2000)
    parser.add_argument("--workdir", help="where builds are kept (default: a temporary directory)")
    parser.add_argument("--json", help="also write the table as JSON here")
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    args = parser.parse_args()
    frameworks = args.frameworks.split(",")
    if args.worker:
        return worker(args.worker, frameworks, args.calls, args.repeat, args.warmup)
    if not args.base:
        parser.error("BASE is required")

    with tempfile.TemporaryDirectory(prefix="tensorplug-compare-") as tmp:
        root = Path(args.workdir) if args.workdir else Path(tmp)
        labels = {"base": args.base, "head": args.head}
        sites = {key: build(rev, root) for key, rev in labels.items()}
        caches = {key: path.parent / "cache" for key, path in sites.items()}
        for key in sites:  # compile the kernels once per build, untimed
            run_worker(sites[key], caches[key], argparse.Namespace(**{**vars(args), "calls": 10, "repeat": 1,
                                                                     "warmup": 10}))
        best: dict[str, dict[str, float]] = {"base": {}, "head": {}}
        for r in range(args.rounds):
            order = ["base", "head"] if r % 2 == 0 else ["head", "base"]
            for key in order:
                print(f"round {r + 1}/{args.rounds}: {key}", file=sys.stderr, flush=True)
                for row, ns in run_worker(sites[key], caches[key], args).items():
                    best[key][row] = min(best[key].get(row, ns), ns)

    rows = sorted(set(best["base"]) & set(best["head"]), key=lambda k: tuple(k.split("/")))
    print(f"| row (case / framework / GIL) | {args.base} ns | {args.head} ns | change |")
    print("|---|---:|---:|---:|")
    table = []
    for row in rows:
        b, h = best["base"][row], best["head"][row]
        change = (h - b) / b * 100
        table.append({"row": row, "base_ns": b, "head_ns": h, "change_pct": change})
        print(f"| {row.replace('/', ' / ')} | {b:.1f} | {h:.1f} | {change:+.1f}% |")
    worst = max(table, key=lambda t: t["change_pct"])
    print(f"\nworst row: {worst['row']} {worst['change_pct']:+.1f}% "
          f"(best of {args.rounds} processes x {args.repeat} loops of {args.calls} calls)")
    if args.json:
        Path(args.json).write_text(json.dumps(table, indent=1))


if __name__ == "__main__":
    main()
