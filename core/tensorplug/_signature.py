"""Exported signature strings: their grammar, the kinds of their parameters, and what each
kind is in Python.

A signature string (``"x:view;n:?int=3;h:handle<mylib.Plan>->tensor"``) is parameters
``name:kind`` separated by ``;``, a kind optionally marked ``?`` (accepts None), typed
(``handle<...>``) or given a default (``=literal``), then ``->`` and the result kind. The
kinds are the vocabulary of ``csrc/include/tensorplug/vocabulary.h``
(``_core.VOCABULARY``). This module is the one place that

- splits a signature string (:func:`split`, :func:`parse_signature`, :func:`build`);
- names the sets of kinds that code tests a kind's membership in (``TENSOR_KINDS``,
  ``SCALAR_KINDS``, ...: ``tensorplug.ops`` re-exports them publicly, for adapters);
- says which Python type each kind stands for: ``inspect.signature`` of a Function and the
  ``.pyi`` stubs of :mod:`tensorplug.stubs` are both built by :func:`build`. Annotations
  are strings naming types a stub can import (``STUB_IMPORTS``).
"""

from __future__ import annotations

import keyword
import re
from collections import namedtuple

from . import _core

TYPE_CHECKING = False  # typing.TYPE_CHECKING, without importing typing (import time: docs/decisions.md)
if TYPE_CHECKING:
    import inspect

# ---- the kinds, as ops and their gradients see them
# tests/ops/test_op.py checks that every parameter kind of the vocabulary is classified.

PARAM_KINDS = frozenset(_core.VOCABULARY["param_kinds"])
#: A tensor: read ("view", a TensorView), owned ("tensor") or written ("mview", a
#: tensorplug::MutableView).
TENSOR_KINDS = frozenset({"view", "tensor", "mview"})
#: A tensor the kernel writes in place.
WRITTEN_KINDS = frozenset({"mview"})
SCALAR_KINDS = frozenset({"int", "float", "bool", "str", "device", "dtype"})
#: Lists an op takes: "views" (read-only tensors; torch Tensor[], jax a run of XLA operands)
#: and "ints" (torch SymInt[], jax an i64 array attribute).
LIST_KINDS = frozenset({"views", "ints"}) & PARAM_KINDS
#: Lists of tensors, read or written (a written one is UNTRACEABLE for an op).
TENSOR_LIST_KINDS = frozenset({"views", "mviews"})
#: No compiler can trace these: a written list ("mviews") has no torch schema or jax form
#: yet (docs/decisions.md); functions and handles are state no compiler can see into.
UNTRACEABLE_KINDS = frozenset({"func", "any", "mviews", "handle"})
#: The results an op returns: tensors, or nothing (destination passing).
RESULT_KINDS = frozenset({"void", "tensor", "tuple"})

# Gradients (tensorplug.gradients) use two sets that differ from the op's on purpose:
#: Tensors a gradient flows through: not "mview", because a tensor written in place has
#: no gradient any framework's autograd sees through a custom operator (an op that writes
#: cannot declare a backward, and a backward's parameters are read, never written).
GRADIENT_TENSOR_KINDS = TENSOR_KINDS - WRITTEN_KINDS
#: What a backward can be handed from the forward call (``saves=``): those tensors,
#: scalars, and int lists (kept as a tuple); not a list of tensors, which no adapter saves
#: (torch's ``ctx.save_for_backward`` takes tensors one by one).
SAVABLE_KINDS = GRADIENT_TENSOR_KINDS | SCALAR_KINDS | frozenset({"ints"})


class Param(namedtuple("Param", ("name", "kind", "optional", "written"), defaults=(False, False))):
    """One parameter of an op: ``name``, signature ``kind`` (``"view"``, ``"int"``, ...,
    without the optional marker), ``optional`` (accepts None) and ``written`` (the kernel
    writes this tensor in place)."""

    __slots__ = ()

    @property
    def is_tensor(self) -> bool:
        return self.kind in TENSOR_KINDS

    @property
    def is_tensor_list(self) -> bool:
        return self.kind == "views"

    @property
    def is_int_list(self) -> bool:
        return self.kind == "ints"


# ---- the grammar

def split(text: str) -> tuple[list[tuple[str, str]], str]:
    """``"x:view;n:?int=3->tensor"`` -> ``([("x", "view"), ("n", "?int=3")], "tensor")``:
    each parameter's name and kind text (optional mark, type and default included), and
    the result's kind text."""
    params_text, _, result = text.partition("->")
    return [item.partition(":")[::2] for item in filter(None, params_text.split(";"))], result


def parse_signature(text: str) -> tuple[tuple[Param, ...], str]:
    """``("x:view;n:?int->tensor")`` -> ``((Param('x', 'view'), Param('n', 'int', True)), 'tensor')``."""
    items, result = split(text)
    params = []
    for name, kind in items:
        optional = kind.startswith("?")
        kind = kind.lstrip("?").partition("<")[0]  # "handle<mylib.Plan>": a handle
        params.append(Param(name, kind, optional, kind in WRITTEN_KINDS))
    return tuple(params), result.partition("<")[0]


# ---- Python types

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
    items, result = split(text)
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
