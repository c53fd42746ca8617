"""Gradients: an op's backward, declared once next to the op, from which every adapter
derives its framework's autograd formula.

``tensorplug.op(name, kernel, returns=..., backward=tensorplug.backward(bwd, saves=...,
differentiable=...))`` says:

- ``differentiable``: the tensor parameters of the op that have a gradient (non-tensor
  arguments are never differentiated; a tensor parameter left out is not differentiable,
  and asking a framework for its gradient is an error naming it);
- ``saves``: what the backward needs from the forward call, in order: parameter names
  (tensors or scalars, as the call passed them) and the op's results (``"result"`` for an
  op returning one tensor, ``"result[i]"`` for item ``i`` of one returning several);
- ``bwd``: the backward, a kernel function of the same library or a :class:`tensorplug.Op`.
  It is called as ``bwd(*grads, *saved)``: one incoming gradient per result of the op, then
  the saved values in the order of ``saves`` (parameters after those must be optional;
  they are left None), and returns the gradient of each differentiable parameter in the
  order of ``differentiable`` (a tensor for one, a tuple for several), each with the shape
  and dtype of its parameter.

A kernel function is declared as the op ``<namespace>::<name>_backward`` whose output
rule is ``like`` the saved parameter of each gradient (so each differentiable parameter
must be saved); pass a :class:`tensorplug.Op` instead for any other rule, or for a
backward with a backward of its own (second derivatives).

An op that writes arguments (``mview``, ``writes=``) cannot declare a backward: its
written tensors change in place, which autograd of neither torch nor jax can see through
a custom operator; declare the functional form (a kernel returning its result) instead.

Pure Python; no framework is imported here. Adapters read ``Op.backward`` (a
:class:`BoundBackward`, or None) and implement the formula their framework needs
(``torch_compile``: ``torch.library.register_autograd``; ``jax_ops``: ``jax.custom_vjp``),
checking each gradient with :meth:`BoundBackward.check_gradient`.
"""

from __future__ import annotations

from typing import Any, NamedTuple

from . import _core
from .shapes import like

_SCALAR_KINDS = frozenset({"int", "float", "bool", "str", "device", "dtype", "ints"})
_TENSOR_KINDS = frozenset({"view", "tensor"})


class Backward:
    """A backward as :func:`tensorplug.backward` declares it, not yet bound to an op
    (``function``, ``saves``, ``differentiable``)."""

    __slots__ = ("function", "saves", "differentiable")

    def __init__(self, function, saves, differentiable):
        self.function = function
        self.saves = saves
        self.differentiable = differentiable

    def __repr__(self) -> str:
        name = getattr(self.function, "name", None) or getattr(self.function, "__name__", "?")
        return f"tensorplug.backward({name}, saves={self.saves!r}, differentiable={self.differentiable!r})"


def backward(function, *, saves=(), differentiable) -> Backward:
    """Declare the backward of an op, for :func:`tensorplug.op`'s ``backward=`` (see
    :mod:`tensorplug.gradients`): ``function`` (a kernel function or a
    :class:`tensorplug.Op`) is called as ``function(*grads, *saved)`` and returns the
    gradients of the ``differentiable`` tensor parameters, in their order. ``saves`` names
    the parameters and results (``"result"``, ``"result[i]"``) the backward receives after
    the incoming gradients. Checked against the op's signature when the op is declared."""
    saves = (saves,) if isinstance(saves, str) else tuple(saves)
    differentiable = (differentiable,) if isinstance(differentiable, str) else tuple(differentiable)
    for what, names in (("saves", saves), ("differentiable", differentiable)):
        if not all(isinstance(n, str) for n in names):
            raise TypeError(f"tensorplug.backward() argument {what!r}: expected names (str), got {names!r}")
    if not differentiable:
        raise ValueError("tensorplug.backward() argument 'differentiable': expected at least one tensor parameter")
    return Backward(function, saves, differentiable)


class Saved(NamedTuple):
    """One saved value: ``name`` as declared, ``index`` the op parameter's position or the
    result's index, ``is_result``, ``is_tensor``."""

    name: str
    index: int
    is_result: bool
    is_tensor: bool


class BoundBackward:
    """An op's backward checked against the op (``Op.backward``), for the adapters.

    ``op`` the forward op; ``function`` the backward :class:`tensorplug.Op`;
    ``saves`` (:class:`Saved` tuple, in call order); ``differentiable`` (parameter
    names); ``differentiable_index`` (their positions among the op's parameters).
    """

    def __init__(self, op, declared: Backward):
        self.op = op
        self.declared = declared
        where = f"tensorplug.op({op.name!r}) argument 'backward'"
        if op.written:
            raise ValueError(
                f"{where}: {op.name} writes {', '.join(repr(w) for w in op.written)} in place, and a gradient "
                "through a tensor written in place is not defined for an operator (neither torch's nor jax's "
                "autograd sees the write); declare the functional form (a kernel that returns its result, "
                "returns=tensorplug.like(...)) with the backward instead")
        by_name = {p.name: (i, p) for i, p in enumerate(op.params)}
        self.differentiable = declared.differentiable
        indices = []
        for name in declared.differentiable:
            i, p = by_name.get(name, (None, None))
            if p is None or p.kind not in _TENSOR_KINDS:
                tensors = ", ".join(q.name for q in op.params if q.kind in _TENSOR_KINDS) or "none"
                raise ValueError(f"{where}: differentiable {name!r} is not a tensor parameter of {op.name} "
                                 f"(its tensor parameters: {tensors}); lists and scalars have no gradient")
            indices.append(i)
        if len(set(indices)) != len(indices):
            raise ValueError(f"{where}: differentiable names a parameter twice: {declared.differentiable!r}")
        self.differentiable_index = tuple(indices)
        saves = []
        for name in declared.saves:
            saves.append(self._saved(where, name, by_name))
        self.saves = tuple(saves)
        self.function = self._backward_op(where, declared.function)

    def _saved(self, where, name, by_name) -> Saved:
        op = self.op
        if name in by_name:
            i, p = by_name[name]
            if p.kind not in _TENSOR_KINDS and p.kind not in _SCALAR_KINDS:
                raise ValueError(f"{where}: saves {name!r}: a {p.kind} parameter cannot be saved (save tensors, "
                                 "scalars and int lists)")
            return Saved(name, i, False, p.kind in _TENSOR_KINDS)
        results = ["result"] if op.n_outputs == 1 else [f"result[{k}]" for k in range(op.n_outputs)]
        if name in results:
            return Saved(name, results.index(name), True, True)
        raise ValueError(f"{where}: saves {name!r} is neither a parameter of {op.name} "
                         f"({', '.join(by_name)}) nor one of its results ({', '.join(results)})")

    def _backward_op(self, where, function):
        """The backward as an op, its signature checked against the call it gets."""
        from .ops import Op, declare

        op = self.op
        n_grads = op.n_outputs
        if isinstance(function, Op):
            bwd = function
        elif isinstance(function, _core.Function):
            returns = []
            params = self._check_params(where, function.__name__, _params_of(function))
            for name in self.differentiable:
                at = next((k for k, s in enumerate(self.saves) if s.name == name), None)
                if at is None:
                    raise ValueError(
                        f"{where}: the gradient of {name!r} has the shape and dtype of {name!r}, which the backward "
                        f"does not receive: save it (saves=(..., {name!r})), or pass a tensorplug.op with a "
                        "returns= rule of its own as the backward")
                returns.append(like(params[n_grads + at].name))
            rule = returns[0] if len(returns) == 1 else tuple(returns)
            bwd = Op(f"{op.name}_backward", function, returns=rule)
            bwd.result_labels = tuple(f"the gradient of {name!r} for {op.name}" for name in self.differentiable)
            declare(bwd)
        else:
            raise TypeError(f"{where}: expected a kernel function or a tensorplug.Op as the backward, got "
                            f"{type(function).__name__}")
        self._check_params(where, bwd.name, bwd.params)
        if bwd.n_outputs != len(self.differentiable):
            raise ValueError(f"{where}: the backward {bwd.name} returns {bwd.n_outputs} tensor(s), one gradient "
                             f"per differentiable parameter is {len(self.differentiable)} "
                             f"({', '.join(self.differentiable)})")
        if bwd.written:
            raise ValueError(f"{where}: the backward {bwd.name} writes {', '.join(bwd.written)}; a backward "
                             "returns its gradients")
        return bwd

    def _check_params(self, where, fname, params):
        op = self.op
        expected = [("tensor", f"the incoming gradient of result {k}") for k in range(op.n_outputs)]
        for s in self.saves:
            kind = "tensor" if s.is_tensor else op.params[s.index].kind
            expected.append((kind, f"saved {s.name!r}"))
        if len(params) < len(expected):
            raise ValueError(f"{where}: the backward {fname} takes {len(params)} parameter(s); it is called with "
                             f"{len(expected)}: {', '.join(what for _, what in expected)}")
        for p, (kind, what) in zip(params, expected):
            ok = p.kind in _TENSOR_KINDS if kind == "tensor" else p.kind == kind
            if not ok:
                raise ValueError(f"{where}: the backward {fname}'s parameter {p.name!r} is a {p.kind}; it receives "
                                 f"{what}, a {kind}")
            saved = next((s for s in self.saves if what == f"saved {s.name!r}"), None)
            if saved is not None and not saved.is_result and op.params[saved.index].optional and not p.optional:
                raise ValueError(f"{where}: the backward {fname}'s parameter {p.name!r} receives optional "
                                 f"{saved.name!r}, which may be None: declare it optional")
        extra = [p.name for p in params[len(expected):] if not p.optional]
        if extra:
            raise ValueError(f"{where}: the backward {fname} has parameter(s) {', '.join(map(repr, extra))} beyond "
                             f"the {len(expected)} it is called with ({', '.join(w for _, w in expected)}); "
                             "parameters after those must be optional")
        return params

    # ------------------------------------------------------------ for the adapters ----
    def saved_values(self, args: tuple, results: tuple) -> list[Any]:
        """The saved values of one call: ``args`` the op's arguments by position (all of
        them), ``results`` its results (a tuple)."""
        return [results[s.index] if s.is_result else args[s.index] for s in self.saves]

    def check_gradient(self, position: int, shape, dtype: str, expected_shape, expected_dtype: str) -> None:
        """ValueError naming the op and the parameter when gradient ``position`` (of
        ``differentiable``) does not have the shape and dtype of its parameter."""
        if tuple(shape) != tuple(expected_shape) or dtype != expected_dtype:
            name = self.differentiable[position]
            raise ValueError(
                f"{self.op.name}: the backward {self.function.name} returned a gradient for {name!r} of shape "
                f"{_shape_text(shape)} and dtype {dtype}; expected shape {_shape_text(expected_shape)} and dtype "
                f"{expected_dtype}, those of {name!r}")

    def not_differentiable(self, name: str) -> str:
        """The message for a gradient asked of tensor parameter ``name``, which is not differentiable."""
        return (f"{self.op.name}: parameter {name!r} is not differentiable (the op's backward declares "
                f"differentiable={self.differentiable!r}); detach it, or declare its gradient in the backward")

    def __repr__(self) -> str:
        return f"<backward of {self.op.name}: {self.function.name}, saves {[s.name for s in self.saves]}>"


def no_backward_message(op) -> str:
    """The error for a gradient asked through ``op``, which declares no backward."""
    if op.written:
        return (f"{op.name} writes {', '.join(repr(w) for w in op.written)} in place and has no gradient (an op "
                "that writes arguments cannot declare a backward): declare the functional form (a kernel that "
                "returns its result) with a backward (docs/compilers.md, Gradients)")
    return (f"{op.name} has no backward: declare one with tensorplug.op({op.name!r}, ..., "
            "backward=tensorplug.backward(<backward kernel>, saves=(...), differentiable=(...))) "
            "(docs/compilers.md, Gradients)")


def _params_of(function):
    from .ops import parse_signature

    text = function.signature_text
    if text is None:
        raise ValueError(f"backward {function.__name__!r} exports no signature; export it with TENSORPLUG_EXPORT")
    return parse_signature(text)[0]


def _shape_text(shape) -> str:
    return "(" + ", ".join(str(d) for d in shape) + ("," if len(shape) == 1 else "") + ")"


__all__ = ["Backward", "BoundBackward", "Saved", "backward", "no_backward_message"]
