"""inspect.Signature objects built from exported signature strings."""

from __future__ import annotations

import inspect

_ANNOTATIONS = {
    "view": "Tensor", "tensor": "Tensor", "int": "int", "float": "float", "bool": "bool",
    "str": "str", "device": "Device", "dtype": "DType", "func": "Callable", "any": "Any",
    "void": "None", "tuple": "tuple", "views": "Sequence[Tensor]", "list": "list[Tensor]",
    "ints": "Sequence[int]", "handle": "Handle",
}


def _annotation(kind: str) -> str:
    """The annotation of a kind; a typed handle ("handle<mylib.Plan>") is a ``Handle``."""
    return _ANNOTATIONS.get(kind.partition("<")[0], kind)


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


def build(name: str, text: str | None) -> inspect.Signature:
    """The signature of function ``name`` from ``"x:view;y:?int->tensor"`` (None: ``*args``)."""
    if text is None:
        return inspect.Signature([inspect.Parameter("args", inspect.Parameter.VAR_POSITIONAL)])
    params_text, _, result = text.partition("->")
    params = []
    for item in filter(None, params_text.split(";")):
        pname, _, kind = item.partition(":")
        kind, has_default, default_text = kind.partition("=")
        default = _default(default_text) if has_default else inspect.Parameter.empty
        optional = kind.startswith("?")
        annotation = _annotation(kind.lstrip("?"))
        if optional:
            annotation = f"Optional[{annotation}]"
        params.append(inspect.Parameter(pname, inspect.Parameter.POSITIONAL_OR_KEYWORD, annotation=annotation,
                                        default=default))
    return_annotation = "list[int]" if result == "ints" else _annotation(result)
    return inspect.Signature(params, return_annotation=return_annotation)
