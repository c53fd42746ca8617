"""jax's side of an op's declared backward (:mod:`tensorplug.gradients`): each traced call
of an op is a ``jax.custom_vjp`` whose rules come from the declaration.

- forward: the op's XLA custom call (``ops.JaxOp``); it returns what the declaration
  ``saves`` as residuals (tensors; scalars are static and stay in the closure);
- backward: the backward op, called with the incoming cotangents and the saved values,
  bound to its parameters by name (``BoundBackward.arguments``), always as its XLA custom
  call (so a backward with a backward of its own gives second derivatives, ``jax.jit``
  traces it as one more custom call, and eager ``jax.grad`` checks its results against its
  output rule in the XLA handler as ``jax.jit`` does); each gradient is checked against
  its parameter's shape and dtype, naming the op and the parameter;
- a tensor argument the declaration leaves out of ``differentiable`` gets no cotangent:
  differentiating with respect to it is an error naming it (``symbolic_zeros``: the forward
  rule sees which arguments are perturbed);
- an op without a backward (and every op that writes arguments) raises in its backward
  rule, when jax asks for the gradient, naming the op and how to declare one (jax's own
  error would name an ``ffi_call``);
- a written parameter given as a ``jax.ShapeDtypeStruct`` (a fresh result, :mod:`.ops`) is
  no array: it stays out of the custom_vjp's arguments, a static value of the closure.

``jax.vmap`` batches both rules as it batches any custom_vjp (the custom calls run once per
batch element). Tensor lists (views) are passed through as arrays without a gradient.
Imports no framework: used only once a traced jax value is in hand.
"""

from __future__ import annotations

import sys

from tensorplug.gradients import no_backward_message
from tensorplug.shapes import dtype_name


def _jax():
    return sys.modules["jax"]


class GradJaxOp:
    """The callable the jax adapter hands an op for traced jax values: ``forward`` (the
    op's :class:`~tensorplug_adapters.jax.ops.JaxOp`) inside a ``jax.custom_vjp``."""

    def __init__(self, op, forward):
        self.op = op
        self.forward = forward
        self.__name__ = op.opname
        self.__doc__ = op.__doc__
        # Parameters whose values are arrays (or lists of arrays): the custom_vjp's argument.
        self.array_params = tuple(p.name for p in op.params if p.is_tensor or p.is_tensor_list)

    def __call__(self, *args, **kwargs):
        jax = _jax()
        op, forward = self.op, self.forward
        if not op.n_outputs and not op.written:
            return forward(*args, **kwargs)  # no result: nothing to differentiate
        bound = op.bind(args, kwargs)
        arrays = {name: bound.pop(name) for name in self.array_params
                  if bound.get(name) is not None and not _fresh(jax, bound[name])}
        static = bound  # scalars and int lists (XLA attributes, Python values) and fresh results' structs
        declared = op.backward
        # What each gradient must be: its parameter's shape and dtype (per batch element under vmap).
        expected = [] if declared is None else [
            (tuple(arrays[name].shape), dtype_name(arrays[name].dtype)) if name in arrays else None
            for name in declared.differentiable]

        def primal(arrays):
            return forward(**static, **arrays)

        fn = jax.custom_vjp(primal)

        def fwd(arrays):
            values = {name: (v.value if not isinstance(v, list) else [item.value for item in v])
                      for name, v in arrays.items()}
            if declared is not None:
                for name, v in arrays.items():
                    if name not in declared.differentiable and _perturbed(v):
                        raise TypeError(declared.not_differentiable(name))
            # Through fn itself, not primal: differentiating this rule again (second
            # derivatives) then meets fn's rules, not a bare custom call.
            out = fn(values)
            if declared is None:
                return out, None
            results = out if isinstance(out, tuple) else (out,)
            saved = [results[s.index] if s.is_result else values.get(s.name) for s in declared.saves if s.is_tensor]
            return out, saved

        def bwd(residuals, cotangents):
            if declared is None:
                raise TypeError(no_backward_message(op))
            saved_tensors = residuals
            cotangents = cotangents if isinstance(cotangents, tuple) else (cotangents,)
            cotangents = [_materialize(jax, ct) for ct in cotangents]
            tensors = iter(saved_tensors)
            saved = [next(tensors) if s.is_tensor else static.get(s.name) for s in declared.saves]
            grads = _traced_call(declared.function)(*declared.arguments(cotangents, saved))
            grads = (grads,) if len(declared.differentiable) == 1 else tuple(grads)
            if len(grads) != len(declared.differentiable):  # the custom call's results follow the rule; kept as a guard
                raise ValueError(f"{op.name}: the backward {declared.function.name} returned {len(grads)} gradient(s); "
                                 f"expected {len(declared.differentiable)}, one per differentiable parameter "
                                 f"({', '.join(declared.differentiable)})")
            for k, (grad, shape_dtype) in enumerate(zip(grads, expected)):
                if shape_dtype is not None:  # None: an optional tensor left out
                    declared.check_gradient(k, tuple(grad.shape), dtype_name(grad.dtype), *shape_dtype)
            by_name = dict(zip(declared.differentiable, grads))
            return ({name: (by_name.get(name) if not isinstance(v, list) else [None] * len(v))
                     for name, v in arrays.items()},)

        fn.defvjp(fwd, bwd, symbolic_zeros=True)
        return fn(arrays)


def _traced_call(backward_op):
    """The backward op as jax's traced path calls it (the XLA custom call, in its own
    custom_vjp), for concrete cotangents too: eager ``jax.grad`` then checks the backward's
    results (their number, dtypes and shapes) against its output rule in the XLA handler,
    as ``jax.jit`` does, where the direct call of the kernel function would hand back what
    it returned (an extra gradient dropped, float64 demoted to float32 without x64)."""
    impl = _backward_impls.get(backward_op.name)
    if impl is None:
        from .. import jax as jax_adapter

        impl = jax_adapter.tensorplug_op_impl(op=backward_op, arg_type=_jax().core.Tracer)
        _backward_impls[backward_op.name] = impl
    return impl


_backward_impls: dict = {}


def _fresh(jax, value) -> bool:
    """Whether ``value`` is (or a list holds) a ``jax.ShapeDtypeStruct``: a fresh result
    buffer for a written parameter (ops.JaxOp), no array, so no argument of the custom_vjp
    (and nothing to differentiate: an op that writes has no gradient)."""
    if isinstance(value, (list, tuple)):
        return any(isinstance(item, jax.ShapeDtypeStruct) for item in value)
    return isinstance(value, jax.ShapeDtypeStruct)


def _perturbed(value) -> bool:
    if isinstance(value, list):
        return any(item.perturbed for item in value)
    return value.perturbed


def _materialize(jax, cotangent):
    # symbolic_zeros: an output nobody differentiates comes as a SymbolicZero.
    if isinstance(cotangent, jax.custom_derivatives.SymbolicZero):
        return jax.numpy.zeros(cotangent.aval.shape, cotangent.aval.dtype)
    return cotangent
