"""Output rules: the shapes, dtypes and devices of the tensors an allocating kernel returns,
known before it runs.

A graph compiler (``torch.compile``, ``jax.jit``) plans memory and traces with tensors that
have no data, so it must know what a kernel that allocates its results with
``Tensor::FromEnvAlloc`` will return without calling it. :func:`tensorplug.op` takes that
knowledge as ``returns=``:

- ``tensorplug.like("x")``: one tensor with the shape, dtype and device of argument ``x``;
- ``tensorplug.Output(shape, dtype, device=None)``: a declared tensor, its shape built from
  argument dimensions and integer arguments (``("a.shape[0]", "b.shape[1]")``,
  ``("n",)``, ``("(x.shape[-1] + 2 * pad - k) // stride + 1",)``), or taken from an int
  list argument (``shape="sizes"``), with items of int lists (``"sizes[0]"``), shapes of
  the tensors in a list (``"xs[0].shape[1]"``) and list lengths (``"len(xs)"``);
- a Python function for the rest: called with the kernel's arguments by name, tensors as
  :class:`tensorplug.TensorSpec`, it returns the output's TensorSpec;
- a tuple of those, one per tensor, for a kernel returning a ``std::tuple`` of tensors.

Destination-passing kernels (outputs preallocated by the caller and written in place)
return nothing and need no rule. Pure Python; no framework is imported here: adapters turn
their tensors into :class:`tensorplug.TensorSpec` and the specs back into their tensors.
"""

from __future__ import annotations

import re
from collections import namedtuple

from ._types import Device, as_device

TYPE_CHECKING = False  # typing.TYPE_CHECKING, without importing typing (import time: docs/decisions.md)
if TYPE_CHECKING:
    from typing import Any, Callable

# Dtype names as tensorplug spells them (DataTypeToString in dtype.h).
_DTYPE_NAME = re.compile(r"(bool|u?int(8|16|32|64)|float(16|32|64)|bfloat16|complex(64|128)|float[48]_\w+)")
_CPU = Device("cpu", 0)


class TensorSpec(namedtuple("TensorSpec", ("shape", "dtype", "device"), defaults=(None,))):
    """A tensor without data: ``shape`` (a tuple of ints, or of a compiler's symbolic
    ints), ``dtype`` (a tensorplug dtype name such as ``"float32"``) and ``device`` (a
    :class:`tensorplug.Device`; None in a shape function's result: the device of the
    call's primary tensor, see :class:`tensorplug.Output`)."""

    __slots__ = ()


def dtype_name(dtype) -> str:
    """``"float32"`` for ``"float32"``, ``numpy.float32``, ``numpy.dtype("float32")`` or a
    framework dtype whose ``str()`` is ``module.name`` (``torch.float32``)."""
    if isinstance(dtype, str):
        return dtype
    name = getattr(dtype, "__name__", None) if isinstance(dtype, type) else None
    return name or str(dtype).rpartition(".")[2]


class Output:
    """The rule for one tensor an allocating kernel returns.

    ``shape``: the name of a tensor argument (the same shape), of an int list (``ints``)
    argument (its values), or a sequence with one item per dimension, each an int or an
    expression over the kernel's parameters: integer parameters by name (``"n"``),
    dimensions of tensor parameters (``"x.shape[0]"``, ``"x.shape[-1]"``), items of int
    list parameters (``"sizes[1]"``), dimensions of the tensors of a tensor list (views)
    parameter (``"xs[0].shape[0]"``), the length of either list (``"len(xs)"``), integer
    literals, ``+ - * // %`` and parentheses.

    ``dtype``: the name of a tensor argument (its dtype), of a tensor list argument (the
    dtype of its first tensor), of a dtype argument (its value), or a fixed dtype name
    (``"float32"``).

    ``device``: None (the device of the primary tensor: the first tensor argument on a
    device other than the CPU, else the first tensor argument, else the CPU; the rule
    every call follows), the name of a tensor or device argument, or a device
    (``"cpu"``).

    The rule is checked against the kernel's signature when :func:`tensorplug.op` is
    called: a ValueError names the op and the part that does not fit.
    """

    __slots__ = ("shape", "dtype", "device")

    def __init__(self, shape, dtype, device=None):
        self.shape = shape
        self.dtype = dtype
        self.device = device

    def __repr__(self) -> str:
        return f"Output(shape={self.shape!r}, dtype={self.dtype!r}, device={self.device!r})"


def like(x: str, *, dtype=None) -> Output:
    """One tensor with the shape, dtype (unless ``dtype`` is given) and device of tensor
    argument ``x``."""
    return Output(shape=x, dtype=x if dtype is None else dtype, device=x)


# --------------------------------------------------------------------- compiling rules ----

class RuleError(ValueError):
    """A rule that does not fit the kernel's signature (raised with the op's name)."""


def compile_returns(returns, params) -> Callable[[dict], tuple[TensorSpec, ...]] | None:
    """The function ``bound arguments -> output specs`` for ``returns`` (see the module),
    checked against ``params`` (the op's :class:`tensorplug.ops.Param` list). None when
    ``returns`` is None."""
    if returns is None:
        return None
    if isinstance(returns, tuple) and returns:
        parts = [_compile_one(r, params, f"returns[{i}]") for i, r in enumerate(returns)]
        return lambda bound: tuple(part(bound) for part in parts)
    one = _compile_one(returns, params, "returns")
    return lambda bound: (one(bound),)


def _compile_one(rule, params, where: str):
    if isinstance(rule, Output):
        return _compile_output(rule, params, where)
    if callable(rule) and not isinstance(rule, (str, type)):
        return _python_rule(rule, params)
    raise RuleError(f"{where}: expected a tensorplug.Output, tensorplug.like(...) or a shape function (a tuple "
                    f"of them, one per output, for a kernel returning several tensors), got {rule!r}")


def _python_rule(fn, params):
    tensors = [p.name for p in params if p.is_tensor or p.kind == "views"]

    def rule(bound):
        item = fn(**bound)
        if not isinstance(item, TensorSpec):
            raise TypeError(f"shape function {getattr(fn, '__name__', fn)!r} returned {item!r}: expected a "
                            "tensorplug.TensorSpec(shape, dtype, device=None)")
        device = _primary_device(bound, tensors) if item.device is None else as_device(item.device)
        return TensorSpec(tuple(item.shape), dtype_name(item.dtype), device)

    return rule


def _primary_device(bound, tensors) -> Device:
    first = None
    for name in tensors:
        value = bound.get(name)
        for spec in (value if isinstance(value, list) else (value,)):  # a views list (adapters pass lists)
            if spec is None:
                continue
            if spec.device.type != "cpu":
                return spec.device
            first = first or spec.device
    return first or _CPU


def _compile_output(out: Output, params, where: str):
    by_name = {p.name: p for p in params}
    tensors = [p.name for p in params if p.is_tensor or p.kind == "views"]

    def tensor_param(name, what):
        p = by_name.get(name)
        if p is None or not p.is_tensor:
            raise RuleError(f"{where} {what}: {name!r} is not a tensor parameter (tensor parameters: "
                            f"{', '.join(tensors) or 'none'})")
        return name

    # shape
    if isinstance(out.shape, str) and getattr(by_name.get(out.shape), "kind", None) == "ints":
        src = out.shape
        if by_name[src].optional:
            raise RuleError(f"{where} shape: {src!r} is an optional int list; a shape cannot be None")
        shape = lambda bound: tuple(bound[src])  # noqa: E731
    elif isinstance(out.shape, str):
        src = tensor_param(out.shape, "shape")
        shape = lambda bound: tuple(bound[src].shape)  # noqa: E731
    elif isinstance(out.shape, (tuple, list)):
        dims = [_compile_dim(d, by_name, f"{where} shape[{i}]") for i, d in enumerate(out.shape)]
        shape = lambda bound: tuple(d(bound) for d in dims)  # noqa: E731
    else:
        raise RuleError(f"{where} shape: expected a tensor parameter's name or a sequence of dimensions, "
                        f"got {out.shape!r}")

    dtype = _compile_dtype(out.dtype, by_name, where)
    device = _compile_device(out.device, by_name, tensors, where)
    return lambda bound: TensorSpec(shape(bound), dtype(bound), device(bound))


def _compile_dtype(rule, by_name, where: str):
    if not isinstance(rule, str):
        fixed = dtype_name(rule)
        return lambda bound: fixed
    p = by_name.get(rule)
    if p is not None and p.is_tensor:
        return lambda bound: bound[rule].dtype
    if p is not None and p.kind == "views":
        def first_dtype(bound):
            items = bound[rule]
            if not items:
                raise ValueError(f"dtype from {rule!r}: the list is empty")
            return items[0].dtype
        return first_dtype
    if p is not None and p.kind == "dtype":
        return lambda bound: dtype_name(bound[rule])
    if p is not None:
        raise RuleError(f"{where} dtype: parameter {rule!r} is a {p.kind}, not a tensor or a dtype")
    if _DTYPE_NAME.fullmatch(rule):
        return lambda bound: rule
    raise RuleError(f"{where} dtype: {rule!r} is neither a parameter nor a dtype name such as 'float32'")


def _compile_device(rule, by_name, tensors, where: str):
    if rule is None:
        return lambda bound: _primary_device(bound, tensors)
    p = by_name.get(rule) if isinstance(rule, str) else None
    if p is not None and p.is_tensor:
        return lambda bound: bound[rule].device
    if p is not None and p.kind == "device":
        return lambda bound: as_device(bound[rule])
    if p is not None:
        raise RuleError(f"{where} device: parameter {rule!r} is a {p.kind}, not a tensor or a device")
    try:
        fixed = as_device(rule)
    except (ValueError, TypeError):
        raise RuleError(f"{where} device: {rule!r} is neither a parameter nor a device") from None
    return lambda bound: fixed


# The operators of a dimension expression, by the name of their ast class.
_BINOPS: dict[str, Callable[[Any, Any], Any]] = {
    "Add": lambda a, b: a + b, "Sub": lambda a, b: a - b, "Mult": lambda a, b: a * b,
    "FloorDiv": lambda a, b: a // b, "Mod": lambda a, b: a % b,
}


def _compile_dim(dim, by_name, where: str):
    """A function ``bound -> int`` for one dimension: an int, or an expression (see
    :class:`tensorplug.Output`) compiled once into closures, never ``eval``-ed."""
    if isinstance(dim, int) and not isinstance(dim, bool):
        return lambda bound: dim
    if not isinstance(dim, str):
        raise RuleError(f"{where}: expected an int or an expression string, got {dim!r}")
    import ast  # when a rule is compiled, not at ``import tensorplug``

    try:
        tree = ast.parse(dim.strip(), mode="eval").body
    except SyntaxError:
        raise RuleError(f"{where}: {dim!r} is not an expression") from None

    def build(node):
        if isinstance(node, ast.Constant) and isinstance(node.value, int) and not isinstance(node.value, bool):
            value = node.value
            return lambda bound: value
        if isinstance(node, ast.Name):
            p = by_name.get(node.id)
            if p is None or p.kind != "int" or p.optional:
                raise RuleError(f"{where}: {node.id!r} in {dim!r} is not an integer parameter")
            name = node.id
            return lambda bound: bound[name]
        if isinstance(node, ast.BinOp) and type(node.op).__name__ in _BINOPS:
            op, left, right = _BINOPS[type(node.op).__name__], build(node.left), build(node.right)
            return lambda bound: op(left(bound), right(bound))
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
            inner = build(node.operand)
            return lambda bound: -inner(bound)
        if (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "len"
                and len(node.args) == 1 and not node.keywords and isinstance(node.args[0], ast.Name)):
            name = node.args[0].id
            p = by_name.get(name)
            if p is None or p.kind not in ("views", "ints") or p.optional:
                raise RuleError(f"{where}: len({name}) in {dim!r}: {name!r} is not a (non-optional) list parameter")
            return lambda bound: len(bound[name])
        if isinstance(node, ast.Subscript) and isinstance(node.value, ast.Name):
            name = node.value.id
            p = by_name.get(name)
            if p is None or p.kind != "ints" or p.optional:
                raise RuleError(f"{where}: {name!r} in {dim!r} is not a (non-optional) int list parameter")
            index = build_index(node.slice)
            return lambda bound: bound[name][index]
        if (isinstance(node, ast.Subscript) and isinstance(node.value, ast.Attribute) and node.value.attr == "shape"
                and isinstance(node.value.value, ast.Subscript) and isinstance(node.value.value.value, ast.Name)):
            name = node.value.value.value.id
            p = by_name.get(name)
            if p is None or p.kind != "views" or p.optional:
                raise RuleError(f"{where}: {name!r} in {dim!r} is not a (non-optional) tensor list parameter")
            item, index = build_index(node.value.value.slice), build_index(node.slice)
            return lambda bound: bound[name][item].shape[index]
        if (isinstance(node, ast.Subscript) and isinstance(node.value, ast.Attribute)
                and node.value.attr == "shape" and isinstance(node.value.value, ast.Name)):
            name = node.value.value.id
            p = by_name.get(name)
            if p is None or not p.is_tensor or p.optional:
                raise RuleError(f"{where}: {name!r} in {dim!r} is not a (non-optional) tensor parameter")
            index = build_index(node.slice)
            return lambda bound: bound[name].shape[index]
        raise RuleError(f"{where}: {dim!r}: only integers, integer parameters, x.shape[i], sizes[i], "
                        "xs[i].shape[j], len(xs), + - * // % and parentheses are allowed (use a shape function for "
                        "the rest)")

    def build_index(node):
        if isinstance(node, ast.Constant) and isinstance(node.value, int):
            return node.value
        if (isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub) and isinstance(node.operand, ast.Constant)
                and isinstance(node.operand.value, int)):
            return -node.operand.value
        raise RuleError(f"{where}: {dim!r}: a shape index must be an integer literal")

    return build(tree)


__all__ = ["Output", "TensorSpec", "dtype_name", "like"]
