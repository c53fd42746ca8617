"""examples/kernel_package: a kernel library shipped as a wheel.

The wheel is built with pip + scikit-build-core (no build isolation: this environment's
scikit-build-core and the installed tensorplug's CMake package), installed into a fresh
venv layered over this environment (never into this one), and called from every installed
framework in a subprocess of that venv.
"""

import json
import os
import re
import shutil
import subprocess
import sys
import sysconfig
import textwrap
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "kernel_package"
FRAMEWORKS = ("numpy", "torch", "jax", "paddle")


def _run(cmd, **kwargs):
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600, **kwargs)
    assert proc.returncode == 0, f"$ {' '.join(map(str, cmd))}\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
    return proc


def build_command() -> list[str]:
    """The command docs/shipping.md gives for building the example's wheel, as words."""
    lines = [line for line in (ROOT / "docs" / "shipping.md").read_text().splitlines()
             if line.startswith("pip wheel ")]
    assert len(lines) == 1, lines
    return lines[0].split()


def _say(request, message):
    # Shown while the suite runs (pytest captures a fixture's output): the build is long.
    capture = request.config.pluginmanager.getplugin("capturemanager")
    with capture.global_and_fixture_disabled():
        print(f"\n{message}", flush=True)


@pytest.fixture(scope="module")
def built(tmp_path_factory, request):
    """(wheel path, venv python) with the wheel installed in a venv layered over this one."""
    pytest.importorskip("scikit_build_core", reason="scikit-build-core not installed")
    tmp = tmp_path_factory.mktemp("kernel_package")
    # The docs' command, run where a copy of the example sits at its path in the checkout
    # (a copy: pip may build in the source tree).
    shutil.copytree(EXAMPLE, tmp / "examples" / "kernel_package",
                    ignore=shutil.ignore_patterns("build", "dist", "*.egg-info", "__pycache__"))
    pip, wheel_word, *options = build_command()
    assert (pip, wheel_word) == ("pip", "wheel")
    _say(request, "test_kernel_package: building examples/kernel_package's wheel with the command of "
                  "docs/shipping.md (CMake and the C++ compiler, a few seconds) ...")
    _run([sys.executable, "-m", "pip", "wheel", *options], cwd=tmp)
    (wheel,) = (tmp / "dist").glob("*.whl")

    venv = tmp / "venv"
    _run([sys.executable, "-m", "venv", "--without-pip", str(venv)])
    python = venv / "bin" / "python"
    venv_site = Path(_run([str(python), "-c", "import sysconfig; print(sysconfig.get_path('platlib'))"]).stdout.strip())
    # Layer this environment under the venv: addsitedir also runs its .pth files (editable installs).
    (venv_site / "_layered_over_test_env.pth").write_text(
        f"import site; site.addsitedir({sysconfig.get_path('purelib')!r})\n")
    _run([str(python), "-m", "pip", "install", "--no-deps", "--no-index", "--no-cache-dir", str(wheel)])
    return wheel, python, venv_site


def importlib_missing(name):
    import importlib.util

    return importlib.util.find_spec(name) is None


def test_wheel_is_one_for_every_cpython(built):
    wheel, _, _ = built
    assert re.fullmatch(r"mykernels-0\.1\.0-py3-none-linux_x86_64\.whl", wheel.name), wheel.name
    with zipfile.ZipFile(wheel) as zf:
        names = set(zf.namelist())
        tag = zf.read("mykernels-0.1.0.dist-info/WHEEL").decode()
    assert {"mykernels/__init__.py", "mykernels/libmykernels.so"} <= names
    assert not any("libtensorplug" in n for n in names), "libtensorplug.so comes from tensorplug, not the wheel"
    assert "Tag: py3-none-linux_x86_64" in tag and "Root-Is-Purelib: false" in tag


def _dynamic_section(library):
    out = _run(["readelf", "-d", str(library)]).stdout
    needed = re.findall(r"\(NEEDED\)\s+Shared library: \[(.+?)\]", out)
    runpath = re.findall(r"\((?:RUNPATH|RPATH)\)\s+Library r(?:un)?path: \[(.+?)\]", out)
    return needed, runpath


def test_installed_library_needs_no_python_and_finds_tensorplug_relative_to_itself(built):
    _, _, venv_site = built
    library = venv_site / "mykernels" / "libmykernels.so"
    needed, runpath = _dynamic_section(library)
    assert not [n for n in needed if "python" in n.lower()], needed
    assert "libtensorplug.so" in needed
    # The only runpath: the tensorplug package beside mykernels in the same site-packages.
    assert runpath == ["$ORIGIN/../tensorplug/lib"]
    # And no symbol of the Python C API is referenced (it would need libpython at run time).
    undefined = _run(["nm", "-D", "--undefined-only", str(library)]).stdout
    assert not re.search(r"\b_?Py[A-Z_]\w*", undefined), undefined


CALL = textwrap.dedent("""
    import json, sys
    framework = sys.argv[1]
    import mykernels, tensorplug
    import numpy as np
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    y = np.full((2, 3), 0.5, dtype=np.float32)
    if framework == "numpy":
        a, b = x, y
        to_numpy, kind = (lambda t: t), np.ndarray
    elif framework == "torch":
        import torch
        a, b = torch.from_numpy(x), torch.from_numpy(y)
        to_numpy, kind = (lambda t: t.numpy()), torch.Tensor
    elif framework == "jax":
        import jax, jax.numpy as jnp
        a, b = jnp.asarray(x), jnp.asarray(y)
        to_numpy, kind = np.asarray, jax.Array
    elif framework == "paddle":
        import paddle
        a, b = paddle.to_tensor(x), paddle.to_tensor(y)
        to_numpy, kind = (lambda t: t.numpy()), paddle.Tensor
    out = mykernels.axpy(2.0, a, b)
    print(json.dumps({
        "module_file": mykernels.__file__,
        "library": mykernels._library.path,
        "tensorplug_file": tensorplug.__file__,
        "framework_type": isinstance(out, kind),
        "values": to_numpy(out).tolist(),
        "abi": mykernels.built_for_abi(),
    }))
""")


@pytest.mark.parametrize("framework", FRAMEWORKS)
def test_called_from_each_framework_in_the_fresh_venv(built, framework):
    pytest.importorskip("numpy", reason="numpy not installed")
    pytest.importorskip(framework, reason=f"{framework} not installed")
    _, python, venv_site = built
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME")}
    result = json.loads(_run([str(python), "-c", CALL, framework], env=env).stdout.strip().splitlines()[-1])
    assert Path(result["module_file"]).parent == venv_site / "mykernels"
    assert result["library"] == str(venv_site / "mykernels" / "libmykernels.so")
    assert not Path(result["tensorplug_file"]).is_relative_to(venv_site)  # tensorplug: this environment's
    assert result["framework_type"], f"axpy on {framework} tensors did not return a {framework} tensor"
    assert result["values"] == [[0.5, 2.5, 4.5], [6.5, 8.5, 10.5]]
    assert result["abi"] == 1


TYPED_CALL = """\
import numpy as np

import mykernels

x = np.arange(3, dtype=np.float32)
out = mykernels.axpy(2.0, x, x)
abi: int = mykernels.built_for_abi()
"""


def test_wheel_ships_the_stub_of_its_library(built, tmp_path):
    # src/mykernels/__init__.pyi is `tensorplug stubgen` of the library, kept in the source
    # tree; the wheel ships it with py.typed, and mypy --strict checks calls against it.
    wheel, python, venv_site = built
    with zipfile.ZipFile(wheel) as zf:
        assert {"mykernels/__init__.pyi", "mykernels/py.typed"} <= set(zf.namelist())
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME")}
    library = venv_site / "mykernels" / "libmykernels.so"
    stub = _run([str(python), "-m", "tensorplug", "stubgen", str(library)], env=env).stdout
    assert (venv_site / "mykernels" / "__init__.pyi").read_text() == stub, "regenerate src/mykernels/__init__.pyi"
    pytest.importorskip("mypy", reason="mypy not installed (it is in the test extra)")
    (tmp_path / "use.py").write_text(TYPED_CALL)
    (tmp_path / "wrong.py").write_text("import mykernels\n\nmykernels.axpy('2', 1.0, 1.0)\n")
    _run([str(python), "-m", "mypy", "--strict", "use.py"], env=env, cwd=tmp_path)
    wrong = subprocess.run([str(python), "-m", "mypy", "--strict", "--no-color-output", "wrong.py"], env=env,
                           cwd=tmp_path, capture_output=True, text=True, timeout=600)
    assert wrong.returncode == 1 and 'wrong.py:3: error: Argument 1 to "axpy" has incompatible type "str"; ' \
        'expected "float"  [arg-type]' in wrong.stdout, wrong.stdout + wrong.stderr


def test_nothing_was_installed_into_this_environment(built):
    assert importlib_missing("mykernels")
    assert not (Path(sysconfig.get_path("platlib")) / "mykernels").exists()


def test_shipping_guide_quotes_the_example_verbatim():
    # docs/shipping.md shows pieces of the example's pyproject.toml and CMakeLists.txt: they
    # must be the files' own lines, so that the guide cannot drift from the tested example.
    guide = (ROOT / "docs" / "shipping.md").read_text()
    quoted = {"toml": EXAMPLE / "pyproject.toml", "cmake": EXAMPLE / "CMakeLists.txt"}
    blocks = re.findall(r"^```(toml|cmake)\n(.*?)^```", guide, re.S | re.M)
    assert {lang for lang, _ in blocks} == set(quoted)
    for lang, block in blocks:
        assert block in quoted[lang].read_text(), f"docs/shipping.md {lang} block not in {quoted[lang].name}:\n{block}"


@pytest.fixture
def package_with_library(tmp_path, monkeypatch, c_kernel):
    """An importable package `tp_shipped` (not imported) holding lib/libadd_one.so."""
    package = tmp_path / "tp_shipped"
    (package / "lib").mkdir(parents=True)
    (package / "__init__.py").write_text("raise RuntimeError('load_module_from_package must not import me')\n")
    shutil.copy(c_kernel.path, package / "lib" / "libadd_one.so")
    (tmp_path / "tp_plain_module.py").write_text("")
    monkeypatch.syspath_prepend(str(tmp_path))
    return package


def test_load_module_from_package_finds_the_file_without_importing(package_with_library):
    import tensorplug

    m = tensorplug.load_module_from_package("tp_shipped", "lib/libadd_one.so")
    assert m.path == str(package_with_library / "lib" / "libadd_one.so")
    assert m.functions == ("add_one",)
    assert "tp_shipped" not in sys.modules


@pytest.mark.parametrize("package, filename, error, message", [
    ("tp_not_installed", "libx.so", ModuleNotFoundError,
     "load_module_from_package(): no installed package named 'tp_not_installed'"),
    ("tp_plain_module", "libx.so", ValueError,
     "load_module_from_package() argument 'package': 'tp_plain_module' is a module, not a package"),
    ("tp_shipped", "libmissing.so", FileNotFoundError, "has no file 'libmissing.so'"),
    ("tp_shipped", "../tp_plain_module.py", ValueError,
     "load_module_from_package() argument 'filename': expected a path inside the package, got '../tp_plain_module.py'"),
    ("tp_shipped", "/etc/passwd", ValueError,
     "load_module_from_package() argument 'filename': expected a path inside the package, got '/etc/passwd'"),
    ("tp_shipped", 3, TypeError,
     "load_module_from_package() argument 'filename': expected a file name (str), got 3"),
    (None, "libx.so", TypeError,
     "load_module_from_package() argument 'package': expected a package name (str), got None"),
    ("tp_shipped", "__init__.py", ValueError, "is not a loadable shared library: not a 64-bit ELF shared library"),
])
def test_load_module_from_package_errors(package_with_library, package, filename, error, message):
    import tensorplug

    with pytest.raises(error) as info:
        tensorplug.load_module_from_package(package, filename)
    assert message in str(info.value)
    assert "tp_shipped" not in sys.modules
