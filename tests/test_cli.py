"""The tensorplug command line."""

import subprocess
import sys
from pathlib import Path


def run(*args):
    return subprocess.run([sys.executable, "-m", "tensorplug", *args], capture_output=True, text=True, timeout=600)


def test_demo_prints_a_row_per_framework():
    out = run("demo")
    assert out.returncode == 0, out.stdout + out.stderr
    lines = out.stdout.splitlines()
    header = next(i for i, line in enumerate(lines) if line.startswith("framework"))
    assert "result correct" in lines[header] and "call overhead (us)" in lines[header]
    rows = {line.split()[0]: line for line in lines[header + 2:] if line.strip()}
    assert "tensorplug" in rows and "tensorplug.Tensor" in rows["tensorplug"]
    assert "numpy" in rows and "numpy.ndarray" in rows["numpy"]
    assert all(" yes " in row for row in rows.values()), out.stdout


def test_config_paths_exist():
    out = run("config", "--includedir", "--libdir", "--cmakedir")
    include, lib, cmake = out.stdout.split()
    assert (Path(include) / "tensorplug" / "c_api.h").is_file()
    assert (Path(lib) / "libtensorplug.so").is_file()
    assert (Path(cmake) / "tensorplugConfig.cmake").is_file()


def test_console_script_and_adapters_table():
    out = subprocess.run(["tensorplug", "adapters"], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert out.stdout.startswith("adapter")
    assert "numpy" in out.stdout and "C table" in out.stdout


def test_demo_without_any_framework():
    # numpy made unimportable: the demo still runs, on tensorplug.Tensor alone.
    code = ("import sys; sys.modules['numpy'] = None\n"
            "from tensorplug.__main__ import main\n"
            "sys.exit(main(['demo']))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stdout + out.stderr
    rows = [line for line in out.stdout.splitlines() if line.startswith("tensorplug ")]
    assert len(rows) == 1 and rows[0].split()[1:4] == ["tensorplug.Tensor", "tensorplug.Tensor", "yes"]


def test_version():
    import tensorplug

    for command in (["tensorplug", "--version"], [sys.executable, "-m", "tensorplug", "--version"]):
        out = subprocess.run(command, capture_output=True, text=True, timeout=120)
        assert out.returncode == 0, out.stderr
        assert out.stdout == f"tensorplug {tensorplug.__version__}\n"
