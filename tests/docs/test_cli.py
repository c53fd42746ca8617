"""The tensorplug command line.

Commands run as ``sys.executable -m tensorplug`` or through the console script next to
``sys.executable``: nothing depends on PATH (a venv used without activating it works).
"""

import importlib.util
import os
import subprocess
import sys
from pathlib import Path


# The console script pip installed into the running interpreter's environment.
CONSOLE_SCRIPT = Path(sys.executable).parent / "tensorplug"
# Each framework the demo must show when installed: the type its row names.
# The public type names (jax's arrays are jaxlib._jax.ArrayImpl, an implementation class).
DEMO_TYPES = {"numpy": "numpy.ndarray", "torch": "torch.Tensor", "jax": "jax.Array", "paddle": "paddle.Tensor"}


def run(*args):
    return subprocess.run([sys.executable, "-m", "tensorplug", *args], capture_output=True, text=True, timeout=600)


def no_path_env():
    """The environment without PATH entries for the running interpreter's bin directory."""
    bindir = str(Path(sys.executable).parent)
    path = os.pathsep.join(p for p in os.environ.get("PATH", "").split(os.pathsep) if p and p != bindir)
    return dict(os.environ, PATH=path or os.defpath)


def test_demo_prints_a_row_per_framework():
    out = run("demo")
    assert out.returncode == 0, out.stdout + out.stderr
    lines = out.stdout.splitlines()
    header = next(i for i, line in enumerate(lines) if line.startswith("framework"))
    assert "result correct" in lines[header] and "call overhead (us)" in lines[header]
    end = lines.index("", header)
    rows = {line.split()[0]: line.split() for line in lines[header + 2:end]}
    # Under the table: what was compared and what was timed.
    assert lines[end + 1].startswith("result correct: add(x, x), with x = arange(8) as float32")
    assert lines[end + 2].startswith("call overhead: numel(x), a kernel that only reads x's shape")
    assert rows["tensorplug"][1:4] == ["tensorplug.Tensor", "tensorplug.Tensor", "yes"]
    # Every installed framework has its row, its own type in and out, and a correct result.
    for framework, type_name in DEMO_TYPES.items():
        if importlib.util.find_spec(framework) is None:
            assert framework not in rows
            continue
        assert framework in rows, f"the demo dropped {framework}:\n{out.stdout}"
        assert rows[framework][1:4] == [type_name, type_name, "yes"], out.stdout
        assert float(rows[framework][4]) > 0
    assert all(row[3] == "yes" for row in rows.values()), out.stdout
    # Before the table, the demo says what it does while it works (seconds per framework).
    assert lines[:header] == ["compiling the example kernel library ...",
                              *(f"calling it from {name} ..." for name in rows)], out.stdout
    # paddle's import-time build warning ("No ccache found") is not the demo's to show.
    assert "ccache" not in out.stdout + out.stderr


def test_config_paths_exist():
    out = run("config", "--includedir", "--libdir", "--cmakedir")
    include, lib, cmake = out.stdout.split()
    assert (Path(include) / "tensorplug" / "c_api.h").is_file()
    assert (Path(lib) / "libtensorplug.so").is_file()
    assert (Path(cmake) / "tensorplugConfig.cmake").is_file()


def test_console_script_and_adapters_table():
    out = subprocess.run([str(CONSOLE_SCRIPT), "adapters"], capture_output=True, text=True, env=no_path_env())
    assert out.returncode == 0, out.stderr
    assert out.stdout.startswith("adapter")
    assert "numpy" in out.stdout and "C table" in out.stdout
    rows = {line.split()[0]: line for line in out.stdout.splitlines()[2:] if line.strip()}
    for name in ("torch", "jax"):  # both enter their compilers (the kit's "compiler" checks)
        if name in rows and "not installed" not in rows[name]:
            assert "compiler" in rows[name], out.stdout
    assert out.stdout.rstrip().endswith("'Python' through its Python callables (the same rules, slower); "
                                        "docs/adapters.md")


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

    for command in ([str(CONSOLE_SCRIPT), "--version"], [sys.executable, "-m", "tensorplug", "--version"]):
        out = subprocess.run(command, capture_output=True, text=True, timeout=120, env=no_path_env())
        assert out.returncode == 0, out.stderr
        assert out.stdout == f"tensorplug {tensorplug.__version__}\n"
