"""Smoke test of the call-overhead benchmark (benchmarks/bench_overhead.py) and of the thin
`tensorplug bench` that runs it from a source checkout (no timing assertions)."""

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"
# What the benchmark promises (benchmarks/README.md), written out here rather than read
# from the benchmark's own tables.
CASES = {"no_args": 0, "1_tensor": 1, "3_tensors": 3, "3_tensors_2_scalars": 3, "alloc_like": 1, "8_tensors": 8,
         "8_tensor_list": 8}
LIST_FRAMEWORKS = ("numpy", "torch")  # the list row's target compares it with 8_tensors for these
NO_FRAMEWORK = "none"  # the framework column of the no-argument row
# CPU frameworks: a row for every case when installed. GPU rows depend on a device.
CPU_FRAMEWORKS = ("numpy", "torch", "jax", "paddle")
GPU_FRAMEWORKS = ("torch-cuda", "cupy")
TVM_FFI_INSTALLED = importlib.util.find_spec("tvm_ffi") is not None
NANOBIND_INSTALLED = importlib.util.find_spec("nanobind") is not None
NANOBIND_TARGET = "no_args: tensorplug / nanobind <= 1.05 with the GIL released"


def installed(framework: str) -> bool:
    return importlib.util.find_spec(framework) is not None


def run_bench(tmp_path, *args):
    out_json = tmp_path / "bench.json"
    # The checkout's harness, named explicitly: a regular (non-editable) install, as in CI,
    # cannot find it from the package's location.
    env = dict(os.environ, TENSORPLUG_BENCHMARKS=str(BENCHMARKS))
    proc = subprocess.run([sys.executable, "-m", "tensorplug", "bench", "--quick", "--json", str(out_json), *args],
                          capture_output=True, text=True, timeout=900, cwd=tmp_path, env=env)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return proc.stdout, json.loads(out_json.read_text())


def table_rows(stdout: str) -> dict:
    """(case, framework) -> the printed table line."""
    lines = stdout.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("case "))
    rows = {}
    for line in lines[start + 2:]:
        if not line.strip():
            break
        case, framework = line.split()[:2]
        rows[(case, framework)] = line
    return rows


def expected_rows(frameworks):
    return {(case, NO_FRAMEWORK if tensors == 0 else fw) for case, tensors in CASES.items() for fw in frameworks}


def test_bench_prints_and_writes_every_row(tmp_path):
    stdout, result = run_bench(tmp_path)
    frameworks = [fw for fw in CPU_FRAMEWORKS if installed(fw)]
    frameworks += [fw for fw in GPU_FRAMEWORKS if result["frameworks"][fw]["ok"]]
    for fw in CPU_FRAMEWORKS:
        assert result["frameworks"][fw]["ok"] == installed(fw), result["frameworks"][fw]
    for fw in GPU_FRAMEWORKS:  # present, and either measured or skipped with a reason
        info = result["frameworks"][fw]
        assert info["ok"] or info["reason"], info
        assert info["ok"] or f"{fw} (" in stdout

    expected = expected_rows(frameworks)
    printed = table_rows(stdout)
    assert set(printed) == expected, (set(printed) ^ expected, stdout)
    in_json = {(r["case"], r["framework"]): r for r in result["rows"]}
    assert set(in_json) == expected

    for key, row in in_json.items():
        # tensorplug runs every case on every framework, GIL released or held.
        assert row["tensorplug_ns"] > 0 and row["tensorplug_gil_held_ns"] > 0, row
        if TVM_FFI_INSTALLED and key[0] != "alloc_like":
            assert row["tvm_ffi_ns"] > 0 and row["ratio"] > 0, row
        if row["tvm_ffi_ns"] is None:  # said so in the table, with the reason
            assert "n/a: " in printed[key] and row["tvm_ffi_error"], row
        if key[0] == "alloc_like":
            assert row["empty_like_ns"] > 0 and row["tensorplug_over_empty_like_ns"] is not None, row

    # The list row (8 tensors in one list argument; tvm-ffi: an Array<Tensor>) runs like the
    # others, and its target is evaluated against the 8-separate-tensor row.
    for fw in frameworks:
        assert in_json[("8_tensor_list", fw)]["tensorplug_ns"] > 0
    list_targets = {t["target"].split(":")[0]: t for t in result["targets"] if "8_tensor_list ratio" in t["target"]}
    assert set(list_targets) == {fw for fw in LIST_FRAMEWORKS if installed(fw)}, result["targets"]
    for target in list_targets.values():  # --quick: timing targets are not judged
        if TVM_FFI_INSTALLED:
            assert target["met"] is None and " vs " in target["detail"], target
        else:
            assert target["met"] is None and target["detail"].startswith("not measured"), target

    imports = result["imports"]["tensorplug"]
    assert imports["best_ms"] > 0 and imports["frameworks_imported"] == []
    assert "import tensorplug:" in stdout
    assert result["memory"] and "memory per call" in stdout
    assert result["targets"] and "targets (not judged: --quick is a smoke run, not a measurement):" in stdout

    # --quick times 2 runs of 200 calls: a smoke run, whose numbers say nothing about a
    # target. Only what works (allocation in every framework, an import without frameworks)
    # is judged; no target reads NOT MET for a time.
    assert "NOT MET" not in stdout, stdout
    assert "(--quick: a smoke run, its numbers are not a measurement)" in stdout.splitlines()[0]
    judged = {t["target"] for t in result["targets"] if t["met"] is not None}
    assert judged <= {"the allocating kernel works for every framework", "import tensorplug imports no framework"}
    assert "import tensorplug imports no framework" in judged
    for target in result["targets"]:
        if target["target"] not in judged:
            if target["detail"] == "n/a: nanobind not installed":  # nothing to compare with
                assert target["target"].startswith("no_args: tensorplug / nanobind"), target
                continue
            assert target["detail"].endswith("(not judged: --quick is a smoke run, not a measurement)"), target


def test_bench_without_tvm_ffi_says_na(tmp_path):
    # The path taken when apache-tvm-ffi is not installed: every tvm-ffi cell reads n/a.
    stdout, result = run_bench(tmp_path, "--without-tvm-ffi", "--frameworks", "numpy", "--no-import",
                               "--no-memory")
    if not installed("numpy"):
        pytest.skip("numpy not installed")
    printed = table_rows(stdout)
    assert set(printed) == expected_rows(["numpy"])
    for row in result["rows"]:
        assert row["tvm_ffi_ns"] is None and row["ratio"] is None and row["tensorplug_ns"] > 0, row
    assert all("n/a: disabled" in line for line in printed.values()), stdout


def test_bench_compares_the_no_argument_call_with_nanobind(tmp_path):
    # The same empty noop() bound with nanobind, built at benchmark time with nanobind's CMake
    # support into the run's cache (conftest: a temporary directory); where nanobind is not
    # installed its cells say so.
    stdout, result = run_bench(tmp_path, "--frameworks", "numpy", "--cases", "no_args,1_tensor", "--no-import",
                               "--no-memory", "--without-tvm-ffi")
    printed = table_rows(stdout)
    assert set(printed) == {("no_args", NO_FRAMEWORK)} | ({("1_tensor", "numpy")} if installed("numpy") else set())
    line = printed[("no_args", NO_FRAMEWORK)]
    rows = {r["case"]: r for r in result["rows"]}
    row = rows["no_args"]
    header = stdout.splitlines()[4]
    target = next(t for t in result["targets"] if t["target"] == NANOBIND_TARGET)
    if NANOBIND_INSTALLED:
        import nanobind

        assert result["versions"]["nanobind"] == nanobind.__version__ and result["nanobind_reason"] == ""
        assert header.startswith(f"nanobind {nanobind.__version__}: the same empty noop() bound with "
                                 "nb::call_guard<nb::gil_scoped_release>()"), header
        assert row["nanobind_ns"] > 0 and row["nanobind_gil_held_ns"] > 0, row
        assert row["ratio_nanobind"] == row["tensorplug_ns"] / row["nanobind_ns"]
        assert row["ratio_nanobind_gil_held"] == row["tensorplug_gil_held_ns"] / row["nanobind_gil_held_ns"]
        cells = line.split()
        assert f"{row['nanobind_ns']:.0f}" in cells and f"{row['ratio_nanobind']:.2f}" in cells, line
        assert f"{row['nanobind_gil_held_ns']:.0f}" in cells and f"{row['ratio_nanobind_gil_held']:.2f}" in cells
        assert "n/a: nanobind" not in line
        # --quick: measured, not judged.
        assert target["met"] is None and target["detail"] == (
            f"{row['ratio_nanobind']:.2f} ({row['tensorplug_ns']:.1f} vs {row['nanobind_ns']:.1f} ns) "
            "(not judged: --quick is a smoke run, not a measurement)"), target
    else:
        assert result["versions"]["nanobind"] is None and result["nanobind_reason"] == "nanobind not installed"
        assert header.startswith("nanobind n/a (nanobind not installed):"), header
        assert row["nanobind_ns"] is None and row["ratio_nanobind"] is None and row["tensorplug_ns"] > 0, row
        assert "n/a: nanobind not installed" in line, line
        assert target == {"target": NANOBIND_TARGET, "met": None, "detail": "n/a: nanobind not installed"}
    # Only the no-argument row has a nanobind kernel.
    for other in (r for r in result["rows"] if r["case"] != "no_args"):
        assert "nanobind_ns" not in other and "ratio_nanobind" not in other, other
        assert "n/a: nanobind" not in printed[(other["case"], other["framework"])]


def test_bench_rejects_unknown_options(tmp_path):
    # The script itself, as benchmarks/README.md runs it.
    proc = subprocess.run([sys.executable, str(BENCHMARKS / "bench_overhead.py"), "--frameworks", "nosuch"],
                          capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert proc.returncode == 2, proc.stderr
    assert "error: unknown framework 'nosuch'; choose from numpy, torch, jax, paddle, torch-cuda, cupy" in proc.stderr


def test_harness_is_not_in_the_installed_package():
    import tensorplug

    # Both the Python sources and the compiled core's directory (they differ in editable installs).
    for package in {Path(tensorplug.__file__).parent, Path(tensorplug._core.__file__).parent}:
        assert not list(package.rglob("*bench*")), list(package.rglob("*bench*"))


def test_bench_without_a_source_checkout_says_what_to_do(tmp_path):
    env = dict(os.environ, TENSORPLUG_BENCHMARKS=str(tmp_path))
    proc = subprocess.run([sys.executable, "-m", "tensorplug", "bench", "--quick"], capture_output=True, text=True,
                          timeout=120, env=env, cwd=tmp_path)
    assert proc.returncode == 2 and proc.stdout == ""
    assert proc.stderr.splitlines() == [
        f"tensorplug bench: the benchmark harness (benchmarks/bench_overhead.py) is not in {tmp_path}: it ships "
        "with tensorplug's source, not with the package. Run it from a source checkout:",
        "    python benchmarks/bench_overhead.py [options]",
        "or point TENSORPLUG_BENCHMARKS at the checkout's benchmarks/ directory."]
