"""inspect.Signature objects built from exported signature strings."""

from __future__ import annotations

import inspect

_ANNOTATIONS = {
    "view": "Tensor", "tensor": "Tensor", "int": "int", "float": "float", "bool": "bool",
    "str": "str", "device": "Device", "dtype": "DType", "func": "Callable", "any": "Any",
    "void": "None", "tuple": "tuple",
}


def build(name: str, text: str | None) -> inspect.Signature:
    """The signature of function ``name`` from ``"x:view;y:?int->tensor"`` (None: ``*args``)."""
    if text is None:
        return inspect.Signature([inspect.Parameter("args", inspect.Parameter.VAR_POSITIONAL)])
    params_text, _, result = text.partition("->")
    params = []
    for item in filter(None, params_text.split(";")):
        pname, _, kind = item.partition(":")
        optional = kind.startswith("?")
        annotation = _ANNOTATIONS.get(kind.lstrip("?"), kind)
        if optional:
            annotation = f"Optional[{annotation}]"
        params.append(inspect.Parameter(pname, inspect.Parameter.POSITIONAL_OR_KEYWORD, annotation=annotation))
    return inspect.Signature(params, return_annotation=_ANNOTATIONS.get(result, result))
