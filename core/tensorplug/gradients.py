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
  Its parameters are bound **by name** (:meth:`BoundBackward.arguments`), checked when the
  op is declared:

  1. ``grads=`` (optional) names the backward's parameters that receive each result's
     incoming gradient, in result order; ``saves`` given as a mapping
     (``{"h": "result[1]"}``) names the parameter that receives each saved value;
  2. a parameter named after a saved value gets it: a saved parameter's name (``x``),
     ``result`` for the saved ``"result"``, ``result<i>`` for ``"result[i]"`` (names in
     ``saves`` come first: a saved parameter named ``grad`` is that parameter);
  3. a parameter named ``grad`` (an op with one result) or ``grad_result`` /
     ``grad_result<i>`` gets that result's incoming gradient;
  4. what is left binds by position only where it cannot be ambiguous: one parameter left
     for one value (``grad, y`` for ``saves=("result",)``: ``y`` is the saved result);
     optional parameters left over are None. Anything else (two parameters no name binds,
     a parameter that would receive nothing, a kind that does not fit) is a ValueError
     naming the op, the parameter and what it would receive.

  It returns the gradient of each differentiable parameter in the order of
  ``differentiable`` (a tensor for one, a tuple for several), each with the shape and
  dtype of its parameter.
- ``contiguous``: the backward's parameters the kernel needs compact (row-major,
  contiguous), for a kernel function (its derived op declares them; see
  :func:`tensorplug.op`'s ``contiguous``); torch hands ``.sum().backward()``'s incoming
  gradient over as an expanded view (stride 0), which a backward receives as it is unless
  it declares ``contiguous=("grad", ...)``. A backward given as an op declares it on that op.

A kernel function is declared as the op ``<namespace>::<name>_backward`` whose output
rule is ``like`` the saved parameter of each gradient (so each differentiable parameter
must be saved); pass a :class:`tensorplug.Op` instead for any other rule, or for a
backward with a backward of its own (second derivatives).

An op that writes arguments (``mview``, ``writes=``) cannot declare a backward: its
written tensors change in place, which autograd of neither torch nor jax can see through
a custom operator; declare the functional form (a kernel returning its result) instead.

Pure Python; no framework is imported here. Adapters read ``Op.backward`` (a
:class:`BoundBackward`, or None) and implement the formula their framework needs
(torch: an Autograd kernel, ``tensorplug_adapters.torch.autograd``; jax: a ``jax.custom_vjp``,
``tensorplug_adapters.jax.grad``),
checking each gradient with :meth:`BoundBackward.check_gradient`.
"""

from __future__ import annotations

from collections import namedtuple

from . import _core
from ._signature import GRADIENT_TENSOR_KINDS, SAVABLE_KINDS, parse_signature
from .shapes import like

TYPE_CHECKING = False  # typing.TYPE_CHECKING, without importing typing (import time: docs/decisions.md)
if TYPE_CHECKING:
    from typing import Any


class Backward:
    """A backward as :func:`tensorplug.backward` declares it, not yet bound to an op
    (``function``, ``saves``, ``differentiable``, ``grads``, ``saved_as``, ``contiguous``)."""

    __slots__ = ("function", "saves", "differentiable", "grads", "saved_as", "contiguous")

    def __init__(self, function, saves, differentiable, grads=None, saved_as=None, contiguous=()):
        self.function = function
        self.saves = saves
        self.differentiable = differentiable
        self.grads = grads  # backward parameters receiving each result's gradient, or None
        self.saved_as = saved_as  # backward parameters receiving each saved value, or None
        self.contiguous = contiguous

    def __repr__(self) -> str:
        name = getattr(self.function, "name", None) or getattr(self.function, "__name__", "?")
        saves = self.saves if self.saved_as is None else dict(zip(self.saved_as, self.saves))
        more = "" if self.grads is None else f", grads={self.grads!r}"
        more += f", contiguous={self.contiguous!r}" if self.contiguous else ""
        return f"tensorplug.backward({name}, saves={saves!r}, differentiable={self.differentiable!r}{more})"


def _names(value) -> tuple:
    return (value,) if isinstance(value, str) else tuple(value)


def backward(function, *, saves=(), differentiable, grads=None, contiguous=()) -> Backward:
    """Declare the backward of an op, for :func:`tensorplug.op`'s ``backward=`` (see
    :mod:`tensorplug.gradients`): ``function`` (a kernel function or a
    :class:`tensorplug.Op`) receives the incoming gradients and the saved values, bound to
    its parameters by name, and returns the gradients of the ``differentiable`` tensor
    parameters, in their order. ``saves`` names the parameters and results (``"result"``,
    ``"result[i]"``) the backward receives (a mapping ``{backward parameter: saved name}``
    where the backward names them otherwise); ``grads`` names the backward parameters that
    receive each result's incoming gradient (default: ``grad``, ``grad_result<i>``);
    ``contiguous`` the backward parameters the kernel needs compact. Checked against the
    op's signature when the op is declared."""
    saved_as = None
    if isinstance(saves, dict):
        saved_as, saves = tuple(saves), tuple(saves.values())
    else:
        saves = _names(saves)
    differentiable = _names(differentiable)
    contiguous = _names(contiguous)
    for what, names in (("saves", saves), ("differentiable", differentiable), ("grads", grads or ()),
                        ("contiguous", contiguous), ("saves", saved_as or ())):
        names = _names(names)
        if not all(isinstance(n, str) for n in names):
            raise TypeError(f"tensorplug.backward() argument {what!r}: expected names (str), got {names!r}")
    if not differentiable:
        raise ValueError("tensorplug.backward() argument 'differentiable': expected at least one tensor parameter")
    return Backward(function, saves, differentiable, None if grads is None else _names(grads), saved_as,
                    contiguous)


class Saved(namedtuple("Saved", ("name", "index", "is_result", "is_tensor"))):
    """One saved value: ``name`` as declared, ``index`` the op parameter's position or the
    result's index, ``is_result``, ``is_tensor``."""

    __slots__ = ()


class BoundBackward:
    """An op's backward checked against the op (``Op.backward``), for the adapters.

    ``op`` the forward op; ``function`` the backward :class:`tensorplug.Op` (a kernel
    function declared as one by ``declare_backward(where, name, function, returns,
    contiguous, result_labels)``, which :mod:`tensorplug.ops` passes: this module does not
    import it);
    ``saves`` (:class:`Saved` tuple, in the order of the declaration); ``differentiable``
    (parameter names); ``differentiable_index`` (their positions among the op's
    parameters); ``binding`` (what each of the backward's parameters receives, in its
    order: ``("grad", k)``, ``("saved", j)`` or None, left None); adapters call the
    backward with :meth:`arguments`.
    """

    def __init__(self, op, declared: Backward, declare_backward):
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
            if p is None or p.kind not in GRADIENT_TENSOR_KINDS:
                tensors = ", ".join(q.name for q in op.params if q.kind in GRADIENT_TENSOR_KINDS) or "none"
                raise ValueError(f"{where}: differentiable {name!r} is not a tensor parameter of {op.name} "
                                 f"(its tensor parameters: {tensors}); lists and scalars have no gradient")
            indices.append(i)
        if len(set(indices)) != len(indices):
            raise ValueError(f"{where}: differentiable names a parameter twice: {declared.differentiable!r}")
        self.differentiable_index = tuple(indices)
        twice = sorted({n for n in declared.saves if declared.saves.count(n) > 1})
        if twice:
            raise ValueError(f"{where}: saves names {', '.join(map(repr, twice))} twice; each saved value is "
                             "received once")
        self.saves = tuple(self._saved(where, name, by_name) for name in declared.saves)
        self.binding: tuple = ()
        self.function = self._backward_op(where, declared.function, declare_backward)

    def _saved(self, where, name, by_name) -> Saved:
        op = self.op
        if name in by_name:
            i, p = by_name[name]
            if p.kind not in SAVABLE_KINDS:
                raise ValueError(f"{where}: saves {name!r}: a {p.kind} parameter cannot be saved (save tensors, "
                                 "scalars and int lists)")
            return Saved(name, i, False, p.kind in GRADIENT_TENSOR_KINDS)
        results = ["result"] if op.n_outputs == 1 else [f"result[{k}]" for k in range(op.n_outputs)]
        if name in results:
            return Saved(name, results.index(name), True, True)
        raise ValueError(f"{where}: saves {name!r} is neither a parameter of {op.name} "
                         f"({', '.join(by_name)}) nor one of its results ({', '.join(results)})")

    def _backward_op(self, where, function, declare_backward):
        """The backward as an op, its parameters bound to the call it gets."""
        declared = self.declared
        if isinstance(function, _core.OpCall):  # a tensorplug.Op
            bwd = function
            self.binding = self._bind(where, bwd.name, bwd.params)
            extra = [n for n in declared.contiguous if n not in bwd.contiguous]
            if extra:
                raise ValueError(f"{where}: contiguous {', '.join(map(repr, extra))}: the backward {bwd.name} is an "
                                 "op, whose own declaration says which parameters it needs compact: declare "
                                 f"tensorplug.op({bwd.name!r}, ..., contiguous=(...)) instead")
        elif isinstance(function, _core.Function):
            params = _params_of(function)
            self.binding = self._bind(where, function.__name__, params)
            returns = []
            for name in self.differentiable:
                at = next((j for j, s in enumerate(self.saves) if s.name == name), None)
                if at is None:
                    raise ValueError(
                        f"{where}: the gradient of {name!r} has the shape and dtype of {name!r}, which the backward "
                        f"does not receive: save it (saves=(..., {name!r})), or pass a tensorplug.op with a "
                        "returns= rule of its own as the backward")
                returns.append(like(params[self.binding.index(("saved", at))].name))
            rule = returns[0] if len(returns) == 1 else tuple(returns)
            labels = tuple(f"the gradient of {name!r} for {self.op.name}" for name in self.differentiable)
            bwd = declare_backward(where, f"{self.op.name}_backward", function, rule, declared.contiguous, labels)
        else:
            raise TypeError(f"{where}: expected a kernel function or a tensorplug.Op as the backward, got "
                            f"{type(function).__name__}")
        if bwd.n_outputs != len(self.differentiable):
            raise ValueError(f"{where}: the backward {bwd.name} returns {bwd.n_outputs} tensor(s), one gradient "
                             f"per differentiable parameter is {len(self.differentiable)} "
                             f"({', '.join(self.differentiable)})")
        if bwd.written:
            raise ValueError(f"{where}: the backward {bwd.name} writes {', '.join(bwd.written)}; a backward "
                             "returns its gradients")
        return bwd

    # ------------------------------------------------------------ binding by name ----
    def _slots(self):
        """What the backward receives: ``(("grad", k) | ("saved", j), names, what, kind)``
        per value, ``names`` those a parameter may have to receive it by name."""
        op, declared = self.op, self.declared
        one = op.n_outputs == 1
        slots = []
        for k in range(op.n_outputs):
            if declared.grads is not None:
                names = (declared.grads[k],)
            else:
                names = ("grad", "grad_result") if one else (f"grad_result{k}",)
            what = "the incoming gradient of the result" if one else f"the incoming gradient of result {k}"
            slots.append((("grad", k), names, what, "tensor"))
        for j, s in enumerate(self.saves):
            if declared.saved_as is not None:
                names = (declared.saved_as[j],)
            elif s.is_result:
                names = ("result",) if one else (f"result{s.index}",)
            else:
                names = (s.name,)
            kind = "tensor" if s.is_tensor else op.params[s.index].kind
            slots.append((("saved", j), names, f"saved {s.name!r}", kind))
        return slots

    def _bind(self, where, fname, params) -> tuple:
        op, declared = self.op, self.declared
        if declared.grads is not None and len(declared.grads) != op.n_outputs:
            raise ValueError(f"{where}: grads names {len(declared.grads)} parameter(s) of {fname}; {op.name} has "
                             f"{op.n_outputs} result(s), one incoming gradient each")
        param_names = [p.name for p in params]
        for what, names in (("grads", declared.grads or ()), ("saves", declared.saved_as or ())):
            unknown = [n for n in names if n not in param_names]
            if unknown:
                raise ValueError(f"{where}: {what} names {', '.join(map(repr, unknown))}, which {fname} does not "
                                 f"take (its parameters: {', '.join(param_names)})")
        slots = self._slots()
        binding: list = [None] * len(params)
        bound_slots = set()
        # Explicit names and saved values first (a saved parameter named `grad` is that
        # parameter), then the incoming gradients' conventional names.
        for order in (("saved",), ("grad",)):
            for key, names, _, _ in slots:
                if key[0] not in order or key in bound_slots:
                    continue
                at = next((i for i, n in enumerate(param_names) if n in names and binding[i] is None), None)
                if at is not None:
                    binding[at] = key
                    bound_slots.add(key)
        left_params = [i for i, b in enumerate(binding) if b is None]
        left_slots = [s for s in slots if s[0] not in bound_slots]
        required = [i for i in left_params if not params[i].optional]
        described = {key: what for key, _, what, _ in slots}
        if len(left_slots) == 1 and len(left_params) == 1:
            binding[left_params[0]] = left_slots[0][0]  # one for one: not ambiguous
        elif left_slots and len(left_params) >= len(left_slots):
            guesses = ", ".join(f"{param_names[i]!r} would receive {slot[2]}"
                                for i, slot in zip(left_params, left_slots))
            raise ValueError(
                f"{where}: the backward {fname}'s parameter(s) {', '.join(repr(param_names[i]) for i in left_params)} "
                f"match no name of what it receives, and binding them by position would be a guess ({guesses}): "
                f"name each after what it receives ({self._name_hint(left_slots)}), or declare "
                "tensorplug.backward(..., grads=(...)) / saves={parameter: saved name}")
        elif left_slots:
            missing = ", ".join(f"{slot[2]} (a parameter named {' or '.join(map(repr, slot[1]))})"
                                for slot in left_slots)
            raise ValueError(f"{where}: the backward {fname}({', '.join(param_names)}) has no parameter for "
                             f"{missing}")
        elif required:
            raise ValueError(
                f"{where}: the backward {fname}'s parameter(s) {', '.join(repr(param_names[i]) for i in required)} "
                f"receive nothing: no name binds them to what the backward receives "
                f"({', '.join(described.values())}); parameters it does not receive must be optional")
        for p, key in zip(params, binding):
            if key is None:
                continue
            kind = next(s[3] for s in slots if s[0] == key)
            ok = p.kind in GRADIENT_TENSOR_KINDS if kind == "tensor" else p.kind == kind
            if not ok:
                raise ValueError(f"{where}: the backward {fname}'s parameter {p.name!r} is a {p.kind}; it receives "
                                 f"{described[key]}, a {kind}")
            if key[0] == "saved":
                saved = self.saves[key[1]]
                if not saved.is_result and op.params[saved.index].optional and not p.optional:
                    raise ValueError(f"{where}: the backward {fname}'s parameter {p.name!r} receives optional "
                                     f"{saved.name!r}, which may be None: declare it optional")
        last = max(i for i, b in enumerate(binding) if b is not None) if any(b is not None for b in binding) else -1
        return tuple(binding[:last + 1])

    @staticmethod
    def _name_hint(slots) -> str:
        return ", ".join(f"{' or '.join(slot[1])} for {slot[2]}" for slot in slots)

    # ------------------------------------------------------------ for the adapters ----
    def arguments(self, grads, saved) -> list[Any]:
        """The backward's positional arguments, from the incoming ``grads`` (one per result)
        and the ``saved`` values (in the order of ``saves``), each where ``binding`` puts
        it (None for an optional parameter that receives nothing)."""
        sources = {"grad": grads, "saved": saved}
        return [None if key is None else sources[key[0]][key[1]] for key in self.binding]

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
    text = function.signature_text
    if text is None:
        raise ValueError(f"backward {function.__name__!r} exports no signature; export it with TENSORPLUG_EXPORT")
    return parse_signature(text)[0]


def _shape_text(shape) -> str:
    return "(" + ", ".join(str(d) for d in shape) + ("," if len(shape) == 1 else "") + ")"


__all__ = ["Backward", "BoundBackward", "Saved", "backward", "no_backward_message"]
