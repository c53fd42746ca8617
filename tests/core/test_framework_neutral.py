"""The core knows no framework (issue 41): every framework's glue is in its plugin, on the
public headers and the public Python API, as a third party's would be. These checks fail when
a framework's name comes back into the core's compiled extension, its CMake, or the names of
its public Python API. (The runtime's comments and the docs may name frameworks as examples;
tests/core/test_import.py checks that importing the core imports none.)"""

import re
from pathlib import Path

import tensorplug

ROOT = Path(__file__).resolve().parents[2]
FRAMEWORKS = re.compile(r"torch|jax|numpy|xla|paddle|cupy|tensorflow|mlx", re.IGNORECASE)


def _mentions(path: Path) -> list[str]:
    return [f"{path.relative_to(ROOT)}:{n}: {line.strip()}" for n, line in enumerate(path.read_text().splitlines(), 1)
            if FRAMEWORKS.search(line)]


def test_the_core_extension_names_no_framework():
    sources = sorted((ROOT / "csrc" / "python").iterdir())
    assert sources, "csrc/python/ is empty"
    assert [m for p in sources for m in _mentions(p)] == []


def test_the_core_cmake_names_no_framework():
    # The top-level CMakeLists.txt builds libtensorplug and the core extension; the plugins'
    # modules are built by plugins/CMakeLists.txt, which may name its frameworks.
    assert _mentions(ROOT / "CMakeLists.txt") == []
    assert "add_subdirectory(plugins)" in (ROOT / "CMakeLists.txt").read_text()


def _public_names(module) -> list[str]:
    names = getattr(module, "__all__", None)
    if names is None:
        names = [n for n in vars(module) if not n.startswith("_")]
    return [f"{module.__name__}.{n}" for n in names]


def test_the_public_python_api_names_no_framework():
    # Every public module of the package (not its private ones, not the conformance kit's
    # tests, which certify adapters by name): no public name is a framework's.
    import importlib

    modules = [tensorplug]
    for path in sorted((ROOT / "core" / "tensorplug").glob("*.py")):
        if not path.name.startswith("_"):
            modules.append(importlib.import_module(f"tensorplug.{path.stem}"))
    names = [n for m in modules for n in _public_names(m)]
    assert "tensorplug.plans.make" in names
    assert [n for n in names if FRAMEWORKS.search(n.rsplit(".", 1)[1])] == []
