"""`import tensorplug` stays light: no framework, no plugin module."""

import subprocess
import sys

FRAMEWORKS = ("numpy", "torch", "jax", "paddle", "cupy")


def _modules_after(code: str) -> set[str]:
    out = subprocess.run([sys.executable, "-c", code + "; import sys; print(' '.join(sys.modules))"],
                         capture_output=True, text=True, check=True).stdout
    return set(out.split())


def test_import_tensorplug_imports_no_framework():
    loaded = _modules_after("import tensorplug")
    assert "tensorplug._core" in loaded
    assert not loaded & set(FRAMEWORKS), loaded & set(FRAMEWORKS)


def test_discovering_adapters_imports_no_framework():
    # Loading every adapter plugin through its entry point must not import a framework.
    loaded = _modules_after("import tensorplug; tensorplug.adapters()")
    assert "tensorplug_adapters.torch" in loaded
    assert not loaded & set(FRAMEWORKS), loaded & set(FRAMEWORKS)


def test_pytest_plugin_imports_no_framework():
    loaded = _modules_after("import tensorplug.testing")
    assert not loaded & set(FRAMEWORKS), loaded & set(FRAMEWORKS)
