"""The conformance kit's "gradients" capability: an op's declared backward
(:func:`tensorplug.backward`) gives the framework's autodiff the right gradients, eagerly
and inside its graph compiler, and a gradient through an op without one is an error naming
the op.

Part of :mod:`tensorplug.testing.conformance` (imported there). An adapter that does not
implement the ``tensorplug_op_impl`` hook, or whose Framework has no
:meth:`~tensorplug.testing.Framework.gradient`, reports the capability as "not provided".
"""

from __future__ import annotations

import functools
from types import SimpleNamespace

import pytest

import tensorplug
from tensorplug.gradients import no_backward_message
from tensorplug.testing import capability
from tensorplug.testing.checks import needs_host, needs_ops
from tensorplug.testing.report import NOT_PROVIDED

# What an adapter may raise for a gradient it cannot give: a clear error, never a zero.
_CLEAR_ERRORS = (TypeError, ValueError, RuntimeError, NotImplementedError)


@functools.cache
def gradient_ops(kernels) -> SimpleNamespace:
    """``mul(a, b)`` with its backward, and ``mul_without_backward``, in the namespace
    ``tensorplug_conformance`` (declared once per process: op names are process-wide)."""
    def declare(name, function, **rules):
        return tensorplug.get_op(name) or tensorplug.op(name, function, **rules)

    return SimpleNamespace(
        mul=declare("tensorplug_conformance::mul", kernels.mul, returns=tensorplug.like("a"),
                    backward=tensorplug.backward(kernels.mul_backward, saves=("a", "b"), differentiable=("a", "b"))),
        mul_without_backward=declare("tensorplug_conformance::mul_without_backward", kernels.mul,
                                     returns=tensorplug.like("a")),
    )


def _gradient(framework, fn, *args):
    """The gradients of ``sum(fn(*args))``; skips with "not provided" unless the adapter has
    ops and its Framework differentiates."""
    needs_ops(framework)
    grads = framework.gradient(fn, *args)
    if grads is None:
        pytest.skip(f"{NOT_PROVIDED}: the adapter's Framework has no gradient()")
    return grads


def _floats(framework, values):
    import numpy as np

    return framework.from_numpy(np.asarray(values, dtype=np.float32), framework.device)


@capability("gradients")
class TestGradients:
    """mul's declared backward gives d(sum(a * b))/da = b and /db = a, eagerly and compiled;
    an op without a backward refuses, naming itself."""

    def test_declared_backward_gives_the_gradients(self, tensorplug_adapter, tensorplug_kernels):
        fw = tensorplug_adapter
        needs_ops(fw)  # "not provided" before "lives on a GPU"
        needs_host(fw)
        ops = gradient_ops(tensorplug_kernels)
        a, b = _floats(fw, [1.0, -2.0, 3.5]), _floats(fw, [4.0, 0.5, -1.0])
        grad_a, grad_b = _gradient(fw, lambda a, b: ops.mul(ops.mul(a, b), a), a, b)  # sum(a*a*b)
        assert fw.to_numpy(grad_a).tolist() == [8.0, -2.0, -7.0]  # 2 a b
        assert fw.to_numpy(grad_b).tolist() == [1.0, 4.0, 12.25]  # a * a

    def test_declared_backward_inside_the_compiler(self, tensorplug_adapter, tensorplug_kernels):
        fw = tensorplug_adapter
        needs_ops(fw)  # "not provided" before "lives on a GPU"
        needs_host(fw)
        ops = gradient_ops(tensorplug_kernels)
        a, b = _floats(fw, [1.0, -2.0, 3.5]), _floats(fw, [4.0, 0.5, -1.0])
        compiled = fw.compile(lambda a, b: ops.mul(a, b))
        if compiled is None:
            pytest.skip(f"{NOT_PROVIDED}: the adapter's Framework has no compile()")
        grad_a, grad_b = _gradient(fw, compiled, a, b)
        assert fw.to_numpy(grad_a).tolist() == [4.0, 0.5, -1.0]
        assert fw.to_numpy(grad_b).tolist() == [1.0, -2.0, 3.5]

    def test_an_op_without_a_backward_names_itself(self, tensorplug_adapter, tensorplug_kernels):
        fw = tensorplug_adapter
        needs_ops(fw)  # "not provided" before "lives on a GPU"
        needs_host(fw)
        ops = gradient_ops(tensorplug_kernels)
        a = _floats(fw, [1.0, 2.0])
        with pytest.raises(_CLEAR_ERRORS) as refused:
            _gradient(fw, lambda a: ops.mul_without_backward(a, a), a)
        assert str(refused.value).startswith(no_backward_message(ops.mul_without_backward)), str(refused.value)


__all__ = ["TestGradients", "gradient_ops"]
