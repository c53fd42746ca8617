"""inspect.Signature objects built from exported signature strings.

The one place that says which Python type each signature kind stands for: ``inspect.signature``
of a Function and the ``.pyi`` stubs of :mod:`tensorplug.stubs` are both built by :func:`build`.
Annotations are strings naming types a stub can import (``STUB_IMPORTS``).
"""

from __future__ import annotations

import keyword
import re

TYPE_CHECKING = False  # typing.TYPE_CHECKING, without importing typing (import time: docs/decisions.md)
if TYPE_CHECKING:
    import inspect

_ANNOTATIONS = {
    "view": "Tensor", "tensor": "Tensor", "int": "int", "float": "float", "bool": "bool",
    "str": "str", "device": "Device", "dtype": "DType", "func": "Callable[..., Any]", "any": "Any",
    "void": "None", "tuple": "tuple[Any, ...]", "views": "Sequence[Tensor]", "list": "list[Tensor]",
    "ints": "Sequence[int]", "handle": "Handle",  # typed handles ("handle<mylib.Plan>") too
    # A tensor the kernel writes (tensorplug::MutableView): the same Python type; the written
    # mark is in the signature string and an op's doc (docs/decisions.md).
    "mview": "Tensor", "mviews": "Sequence[Tensor]",
}
# Results are concrete where parameters accept any sequence.
_RESULT_ANNOTATIONS = {"ints": "list[int]"}
# A kind this table does not know yet (a library built with newer headers): typed as Any.
UNKNOWN = "Any"

# Where a stub imports each name the annotations above use (builtins need no import).
STUB_IMPORTS = {
    "Any": "typing", "Callable": "typing", "Optional": "typing", "Sequence": "typing",
    "Tensor": "tensorplug.typing", "Device": "tensorplug.typing", "DType": "tensorplug.typing",
    "Handle": "tensorplug",  # for the kind "handle" (opaque handles, issue 12 item 4)
}


def param_annotation(kind: str) -> str:
    """The annotation of a parameter of ``kind`` (``"view"``, ``"?int"``, ...)."""
    base = kind.lstrip("?").partition("<")[0]  # a typed handle "handle<mylib.Plan>" is a handle
    if base not in _ANNOTATIONS:
        return UNKNOWN
    return f"Optional[{_ANNOTATIONS[base]}]" if kind.startswith("?") else _ANNOTATIONS[base]


def result_annotation(kind: str) -> str:
    """The annotation of a result of ``kind``."""
    kind = kind.partition("<")[0]
    return _RESULT_ANNOTATIONS.get(kind) or _ANNOTATIONS.get(kind, UNKNOWN)


def _default(text: str) -> object:
    """The value of a default's literal in a signature string ("1.0", "3", "True", "'fast'", "None")."""
    if text == "None":
        return None
    if text in ("True", "False"):
        return text == "True"
    if len(text) >= 2 and text[0] == text[-1] == "'":
        return text[1:-1]
    try:
        return int(text)
    except ValueError:
        return float(text)


def _python_name(name: str) -> str:
    """``name`` if Python accepts it as a parameter name, else a name it accepts (``from`` -> ``from_``)."""
    if name.isidentifier() and not keyword.iskeyword(name):
        return name
    name = re.sub(r"\W", "_", name)
    if not name.isidentifier():  # empty, or starts with a digit
        name = "_" + name
    return name + "_" if keyword.iskeyword(name) else name


def build(name: str, text: str | None) -> inspect.Signature:
    """The signature of function ``name`` from ``"x:view;y:?int->tensor"`` (None: ``*args``)."""
    import inspect  # on the first signature asked for, not at ``import tensorplug``

    if text is None:
        return inspect.Signature([inspect.Parameter("args", inspect.Parameter.VAR_POSITIONAL, annotation=UNKNOWN)],
                                 return_annotation=UNKNOWN)
    params_text, _, result = text.partition("->")
    items = [item.partition(":")[::2] for item in filter(None, params_text.split(";"))]
    # A name Python refuses ("from", a keyword) is shown renamed; it and those before it
    # are positional-only, as only a position can pass them.
    last_renamed = max((i for i, (pname, _) in enumerate(items) if _python_name(pname) != pname), default=-1)
    params = []
    for i, (pname, kind) in enumerate(items):
        kind, has_default, default_text = kind.partition("=")
        default = _default(default_text) if has_default else inspect.Parameter.empty
        passing = inspect.Parameter.POSITIONAL_ONLY if i <= last_renamed else inspect.Parameter.POSITIONAL_OR_KEYWORD
        params.append(inspect.Parameter(_python_name(pname), passing, annotation=param_annotation(kind),
                                        default=default))
    return inspect.Signature(params, return_annotation=result_annotation(result))
