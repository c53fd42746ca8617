"""Type stubs (``.pyi``) for kernel libraries, from their exported signatures.

``tensorplug stubgen libk.so -o mykernels/__init__.pyi`` on the command line, or
``cpp.build(..., stub=path)``. A stub declares each exported function with the parameters,
defaults and result of its ``inspect.signature`` (both come from the same table,
``tensorplug._signature``), so an editor and ``mypy --strict`` know how to call it. Ship it
as the stub of the Python module that exposes the library's functions (docs/shipping.md,
"Type stubs").
"""

from __future__ import annotations

import ast
import inspect
import keyword
import os
import re
from pathlib import Path

from ._module import Module, load_module
from ._signature import STUB_IMPORTS

_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_BUILTINS = frozenset({"None", "int", "float", "bool", "str", "list", "tuple", "dict", "bytes", "object"})


def _literal(value: object) -> str:
    """The default as a stub shows it: its literal when it reads back as the same value,
    else ``...`` (a NaN or an infinite float)."""
    text = repr(value)
    try:
        same = ast.literal_eval(text) == value and type(ast.literal_eval(text)) is type(value)
    except (ValueError, SyntaxError):
        same = False
    return text if same else "..."


class _Text:
    """Shown as its text by inspect's formatting (annotations and defaults as a stub writes them)."""

    def __init__(self, text: str):
        self.text = text

    def __repr__(self) -> str:
        return self.text


def _declaration(name: str, signature: inspect.Signature, rename: dict[str, str], used: set[str]) -> str:
    """``def name(...) -> ...: ...``, formatted by inspect; adds the names its annotations use to ``used``."""
    def annotation(value: object) -> _Text:
        text = value if isinstance(value, str) else "Any"  # no annotation: untyped
        used.update(_NAME.findall(text))
        return _Text(_NAME.sub(lambda m: rename.get(m.group(), m.group()), text))

    params = [p.replace(annotation=annotation(p.annotation),
                        default=p.default if p.default is p.empty else _Text(_literal(p.default)))
              for p in signature.parameters.values()]
    formatted = signature.replace(parameters=params, return_annotation=annotation(signature.return_annotation))
    return f"def {name}{formatted}: ..."


def _identifier(name: str) -> bool:
    return name.isidentifier() and not keyword.iskeyword(name)


def stub_text(module: Module) -> str:
    """The ``.pyi`` text declaring every function of the loaded kernel library ``module``.

    A function whose name is no Python identifier (``m["lambda"]``) cannot be declared and
    is listed in a comment; a function without an exported signature is ``(*args: Any) -> Any``.
    A function named like a type the annotations use (``str``) gets that type imported
    under another name (``from builtins import str as _str``)."""
    return render(f"the kernel library {Path(module.path).name}",
                  {name: module[name].__signature__ for name in module.functions})


def render(title: str, signatures: dict[str, inspect.Signature]) -> str:
    """The ``.pyi`` text declaring functions ``{name: signature}`` (signatures as
    ``tensorplug._signature.build`` makes them); ``title`` completes the docstring
    "Type stubs of ..."."""
    names = sorted(signatures)
    declared = [name for name in names if _identifier(name)]
    rename = {name: f"_{name}" for name in declared if name in _BUILTINS or name in STUB_IMPORTS}
    used: set[str] = set()
    declarations = [_declaration(name, signatures[name], rename, used) for name in declared]
    unknown = used - _BUILTINS - set(STUB_IMPORTS)
    if unknown:  # an annotation of _signature's table without an entry in STUB_IMPORTS
        raise RuntimeError(f"tensorplug.stubs: annotations use names with no import: {sorted(unknown)}")
    imports: dict[str, list[str]] = {}
    for name in sorted(used):
        source = STUB_IMPORTS.get(name, "builtins")
        if name in rename:
            imports.setdefault(source, []).append(f"{name} as {rename[name]}")
        elif source != "builtins":
            imports.setdefault(source, []).append(name)
    lines = [f'"""Type stubs of {title} (made by tensorplug stubgen)."""', ""]
    # The standard library first, then tensorplug, each alphabetically.
    for source in sorted(imports, key=lambda source: (source not in ("builtins", "typing"), source)):
        lines.append(f"from {source} import {', '.join(imports[source])}")
    lines += [""] if imports else []
    skipped = [name for name in names if name not in declared]
    if skipped:
        lines += [f"# Not declared (no Python identifier; call them as module[name]): {', '.join(skipped)}", ""]
    lines += declarations
    return "\n".join(lines) + "\n"


def write_stub(library: str | Path | Module, path: str | Path) -> Path:
    """Write the stub of the kernel library ``library`` (a path, or a loaded :class:`tensorplug.Module`)
    to ``path``; returns ``path``. The file is rewritten only when its text changes."""
    module = library if isinstance(library, Module) else load_module(library)
    text = stub_text(module)
    target = Path(path)
    if not target.is_file() or target.read_text() != text:
        target.parent.mkdir(parents=True, exist_ok=True)
        tmp = target.with_name(f".{target.name}.{os.getpid()}.tmp")
        tmp.write_text(text)
        os.replace(tmp, target)
    return target


__all__ = ["render", "stub_text", "write_stub"]
