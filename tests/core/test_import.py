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


def test_first_party_testing_plugins_import_no_framework():
    # The pytest11 plugins of the first-party Frameworks load in every pytest run.
    loaded = _modules_after("import tensorplug_adapters.testing.numpy, tensorplug_adapters.testing.torch, "
                            "tensorplug_adapters.testing.jax, tensorplug_adapters.testing.paddle, "
                            "tensorplug_adapters.testing.cupy, tensorplug_adapters.testing.dlpack")
    assert not loaded & set(FRAMEWORKS), loaded & set(FRAMEWORKS)


def test_first_party_plugins_use_only_public_names():
    # They are registered exactly as a third party's would be: no private tensorplug API.
    import ast
    from pathlib import Path

    import tensorplug_adapters

    root = Path(tensorplug_adapters.__file__).parent
    sources = sorted(root.rglob("*.py"))
    assert len(sources) >= 13, sources  # six adapter packages, six Frameworks, the package
    private = []
    for path in sources:
        name = path.relative_to(root).as_posix()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("tensorplug"):
                module_private = any(part.startswith("_") for part in node.module.split("."))
                names = [a.name for a in node.names if a.name.startswith("_")]
                if module_private or names:
                    private.append(f"{name}: from {node.module} import {', '.join(a.name for a in node.names)}")
            elif isinstance(node, ast.Import):
                private += [f"{name}: import {a.name}" for a in node.names
                            if a.name.startswith("tensorplug") and "._" in a.name]
            elif isinstance(node, ast.Attribute) and node.attr.startswith("_") and not node.attr.startswith("__"):
                if node.attr not in FRAMEWORK_PRIVATE.get(name, {}):
                    private.append(f"{name}: .{node.attr}")
    assert private == []


# A framework's own private names a plugin needs, each with the reason it has no public one.
# (An attribute check cannot tell whose attribute it reads: these are listed by hand, by the
# module's path inside tensorplug_adapters.)
FRAMEWORK_PRIVATE = {
    "paddle/__init__.py": {"_bump_inplace_version": "paddle.Tensor's in-place version bump, which paddle's own "
                                                    "in-place ops call; paddle exports no public one"},
    "paddle/static.py": {"_C_ops": "paddle's operator namespace, where custom operators are run by name",
                         "_run_custom_op": "paddle runs a custom operator registered at run time only through it"},
}


def test_the_registry_module_is_not_shadowed():
    import types

    import tensorplug

    assert isinstance(tensorplug._registry, types.ModuleType)
    assert tensorplug._registry.registry.output_table("numpy") is tensorplug.output_table("numpy")
