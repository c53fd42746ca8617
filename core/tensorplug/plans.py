"""Call plans: an op's declared facts compiled for a framework's own op kernel.

A framework adapter that runs tensorplug ops inside its framework's dispatcher or compiler
(torch's dispatcher, an XLA custom call, a third party's) does not call through Python: its
compiled kernel reads the framework's values into the C calling convention and hands them
to a *call plan* (``tensorplug/plan.h``), which checks the written arguments, evaluates the
output rule, binds the framework's stream and allocator around the call and checks the
results. :func:`make` builds that plan from a :class:`tensorplug.ops.Op`; the plan is a
capsule named ``"tensorplug.TPPlanHandle"`` whose pointer is a ``TPPlanHandle``, which the
adapter's compiled code keeps (``TPPlanRetain``) for as long as the framework may call it.

The output rule has one compiled form, made here from the declaration that
:mod:`tensorplug.shapes` checked: per returned tensor, where its shape, dtype and device
come from, and one small reverse-Polish program per dimension. The codes below are
``plan.h``'s enumerations; ``tests/core/test_plans.py`` compares the two.
"""

from __future__ import annotations

import ast

from . import _core
from .shapes import Output, dtype_name

__all__ = ["NotCompilable", "PARAM_KINDS", "RULE_FROM", "RULE_OPS", "compile_outputs", "create", "make"]

#: ``TPParamKind``: what a parameter is, by signature kind (an ``mview`` is a view the function writes).
PARAM_KINDS = {"view": 0, "mview": 0, "tensor": 1, "int": 2, "float": 3, "bool": 4, "str": 5, "device": 6,
               "dtype": 7, "views": 8, "ints": 9}
#: ``TPRuleOp``: the steps of a dimension program.
RULE_OPS = {"const": 0, "int": 1, "dim": 2, "item": 3, "len": 4, "list_dim": 5, "add": 6, "sub": 7, "mul": 8,
            "floor_div": 9, "mod": 10, "neg": 11}
#: ``TPRuleFrom``: where an output's shape, dtype or device comes from.
RULE_FROM = {"tensor": 0, "ints": 1, "dims": 2, "views": 3, "dtype": 4, "fixed": 5, "primary": 6, "device": 7}

_BINOPS = {ast.Add: RULE_OPS["add"], ast.Sub: RULE_OPS["sub"], ast.Mult: RULE_OPS["mul"],
           ast.FloorDiv: RULE_OPS["floor_div"], ast.Mod: RULE_OPS["mod"]}
_DL_DEVICE = {"cpu": 1, "cuda": 2}  # DLPack's device type codes


class NotCompilable(ValueError):
    """The op's output rule has no compiled form (a Python shape function, or a fixed device
    the plan cannot name); the message says which and what to declare instead."""


def make(op, *, rules: bool = True):
    """The call plan of ``op`` (a capsule ``"tensorplug.TPPlanHandle"``).

    With ``rules`` (the default) the plan holds the compiled output rule, and
    ``TPPlanPrepare`` evaluates it per call; :class:`NotCompilable` when the rule is a Python
    shape function. ``rules=False`` makes a plan that knows only how many tensors the
    function returns, for a framework that sized the results itself (XLA's result buffers).
    A parameter kind the plan cannot pass (``func``, ``any``, ...) is a ``ValueError`` naming it.
    """
    params = [(p.name, p.kind, p.optional, p.written) for p in op.params]
    return create(op.name, op.function, params, op.n_outputs, compile_outputs(op) if rules else None)


def create(name: str, function, params, n_outputs: int, outputs=None):
    """A call plan from its parts, for a function no :func:`tensorplug.op` declares:
    ``params`` one ``(name, kind, optional, written)`` per parameter (``kind`` a signature
    kind of :data:`PARAM_KINDS`; ``written`` for views and lists of views the function
    writes), ``n_outputs`` the tensors it returns, ``outputs`` their rules as
    :func:`compile_outputs` encodes them, or None for a plan that checks the count alone."""
    coded = []
    for pname, kind, optional, written in params:
        code = PARAM_KINDS.get(kind)
        if code is None:
            raise ValueError(f"op '{name}': parameter '{pname}' has kind '{kind}', which a call plan cannot pass "
                             f"(it takes {', '.join(sorted(PARAM_KINDS))})")
        coded.append((pname, code, optional, written))
    return _core.plan_create(name, function, coded, n_outputs, outputs)


def compile_outputs(op) -> list:
    """``op``'s output rule in the plan's encoding: one tuple per returned tensor
    ``(shape_from, shape_param, dims, dtype_from, dtype_param, dtype, device_from,
    device_param, device_type, device_id)``, ``dims`` one program per dimension."""
    if op.n_outputs == 0:
        return []
    rules = op.returns if isinstance(op.returns, tuple) else (op.returns,)
    index = {p.name: i for i, p in enumerate(op.params)}
    by_name = {p.name: p for p in op.params}
    compiled = []
    for rule in rules:
        if not isinstance(rule, Output):
            raise NotCompilable(f"its output rule {getattr(rule, '__name__', rule)!r} is a Python shape function; "
                                "declare it as tensorplug.Output or tensorplug.like for the native kernel")
        compiled.append((*_shape(rule.shape, index, by_name), *_dtype(rule.dtype, index, by_name),
                         *_device(rule.device, index, by_name)))
    return compiled


def _shape(shape, index, by_name):
    if isinstance(shape, str):
        return RULE_FROM["ints" if by_name[shape].kind == "ints" else "tensor"], index[shape], ()
    return RULE_FROM["dims"], -1, [_dim(d, index) for d in shape]


def _dtype(rule, index, by_name):
    if not isinstance(rule, str):
        return RULE_FROM["fixed"], -1, dtype_name(rule)
    p = by_name.get(rule)
    if p is None:  # a dtype's name
        return RULE_FROM["fixed"], -1, rule
    source = {"views": "views", "dtype": "dtype"}.get(p.kind, "tensor")
    return RULE_FROM[source], index[rule], ""


def _device(rule, index, by_name):
    if rule is None:
        return RULE_FROM["primary"], -1, 0, 0
    p = by_name.get(rule) if isinstance(rule, str) else None
    if p is not None:
        return RULE_FROM["device" if p.kind == "device" else "tensor"], index[rule], 0, 0
    # A fixed device, checked when the op was declared: "cpu", "cuda:1", a Device or a
    # framework's device (their str() is "type[:index]").
    kind, _, number = str(rule).partition(":")
    if kind not in _DL_DEVICE:
        raise NotCompilable(f"its output rule names device {rule}, which a compiled kernel does not allocate on")
    return RULE_FROM["fixed"], -1, _DL_DEVICE[kind], int(number or 0)


def _dim(dim, index) -> list:
    """One dimension (an int, or an expression tensorplug.shapes checked when the op was
    declared) as a program of (op, a, b, c) steps."""
    if isinstance(dim, int):
        return [(RULE_OPS["const"], dim)]
    steps: list = []

    def literal(node) -> int:
        return -node.operand.value if isinstance(node, ast.UnaryOp) else node.value

    def emit(node):
        if isinstance(node, ast.Constant):
            steps.append((RULE_OPS["const"], node.value))
        elif isinstance(node, ast.Name):
            steps.append((RULE_OPS["int"], index[node.id]))
        elif isinstance(node, ast.BinOp):  # left operand first: the program pops the right one first
            emit(node.left)
            emit(node.right)
            steps.append((_BINOPS[type(node.op)],))
        elif isinstance(node, ast.UnaryOp):
            emit(node.operand)
            steps.append((RULE_OPS["neg"],))
        elif isinstance(node, ast.Call):  # len(xs)
            steps.append((RULE_OPS["len"], index[node.args[0].id]))
        elif isinstance(node.value, ast.Name):  # sizes[i]
            steps.append((RULE_OPS["item"], index[node.value.id], literal(node.slice)))
        elif isinstance(node.value.value, ast.Subscript):  # xs[i].shape[j]
            inner = node.value.value
            steps.append((RULE_OPS["list_dim"], index[inner.value.id], literal(inner.slice), literal(node.slice)))
        else:  # x.shape[i]
            steps.append((RULE_OPS["dim"], index[node.value.value.id], literal(node.slice)))

    emit(ast.parse(dim.strip(), mode="eval").body)
    return steps
