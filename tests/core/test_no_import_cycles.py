"""The core package's modules import one another without a cycle (issue 41).

Every import between two modules of ``tensorplug`` counts, at module level or inside a
function: a lazy import still ties the two modules' meanings together, and a cycle means
neither can be read (or moved) without the other. The graph is read from the source
(``ast``), so a cycle is found whether or not a test imports the modules in the order that
would fail.
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path

import tensorplug

ROOT = Path(tensorplug.__file__).parent


def _module_name(path: Path) -> str:
    parts = ("tensorplug", *path.relative_to(ROOT).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _resolve(module: str, is_package: bool, node: ast.ImportFrom) -> str:
    """The absolute name an ``ImportFrom`` in ``module`` names (its ``from`` part)."""
    if not node.level:
        return node.module or ""
    base = module.split(".")
    package = base if is_package else base[:-1]
    package = package[:len(package) - (node.level - 1)]
    return ".".join(package + ([node.module] if node.module else []))


def import_graph() -> dict[str, set[str]]:
    """Each core module -> the core modules it imports (submodules named in ``from x import
    y`` count as imports of ``x.y``; a name that is no module, as of ``x``)."""
    paths = {_module_name(p): p for p in ROOT.rglob("*.py")}
    # Compiled modules (tensorplug._core) import nothing of the package: leaves.
    compiled = {name for name, m in list(sys.modules.items())
                if name.startswith("tensorplug.") and name not in paths
                and str(getattr(m, "__file__", "")).endswith((".so", ".pyd"))}
    graph: dict[str, set[str]] = {name: set() for name in (*paths, *compiled)}

    def known(name: str) -> str | None:
        while name and name not in graph:
            name = name.rpartition(".")[0]
        return name or None

    for name, path in paths.items():
        is_package = path.name == "__init__.py"
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            targets = []
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names if a.name.split(".")[0] == "tensorplug"]
            elif isinstance(node, ast.ImportFrom):
                base = _resolve(name, is_package, node)
                if base.split(".")[0] != "tensorplug":
                    continue
                targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in graph else base for a in node.names]
            for target in targets:
                target = known(target)
                # A package's __init__ importing its own submodules, or a submodule importing
                # its package's face, is how a package is made: a submodule that imports its
                # package runs after the package's __init__ has started importing it, which
                # is only a cycle if the package imports it back, caught below.
                if target is not None and target != name:
                    graph[name].add(target)
    return graph


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One cycle of ``graph`` as a path (first node repeated at the end), or None."""
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    stack: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        stack.append(node)
        for nxt in sorted(graph[node]):
            if state.get(nxt) == 1:
                return stack[stack.index(nxt):] + [nxt]
            if nxt not in state:
                found = visit(nxt)
                if found:
                    return found
        stack.pop()
        state[node] = 2
        return None

    for node in sorted(graph):
        if node not in state:
            found = visit(node)
            if found:
                return found
    return None


def test_the_graph_is_read():
    graph = import_graph()
    assert "tensorplug.ops" in graph["tensorplug"]  # __init__ re-exports ops
    assert "tensorplug._core" in graph["tensorplug.storage"]  # the compiled module, a leaf
    assert "tensorplug._signature" in graph["tensorplug.ops"]


def test_the_core_has_no_import_cycle():
    cycle = find_cycle(import_graph())
    assert cycle is None, "import cycle: " + " -> ".join(cycle)


def test_a_cycle_is_found():
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b"}, "b": set()}) is None
