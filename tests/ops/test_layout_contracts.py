"""Layout contracts declared once (issue 39, item 2): ``strict_cube`` (tests/support/grad_kernels.cc)
raises on a non-compact input, and declares ``contiguous=("x",)`` on its op and
``contiguous=("x", "grad")`` on its backward. Over generated layouts (permuted, strided,
expanded, 1 to 3 dimensions) and incoming gradients (torch's expanded one of ``.sum()``, a
weighted one), every path gives the gradient of torch's or jax's own ops, or refuses naming
the argument: torch eager and aot_eager (inductor: tests/torch/test_grad_torch.py), jax eager and
jit, and the op called with numpy or paddle arrays (no operator: checked, not copied).
"""

from __future__ import annotations

import numpy as np
import pytest

hypothesis = pytest.importorskip("hypothesis", reason="hypothesis not installed")
from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402



@st.composite
def layouts(draw):
    """(shape of the base array, steps to make the view): a permutation, a step per
    dimension, and dimensions of extent 1 expanded to 3."""
    ndim = draw(st.integers(1, 3))
    shape = draw(st.lists(st.integers(1, 4), min_size=ndim, max_size=ndim))
    perm = draw(st.permutations(range(ndim)))
    steps = draw(st.lists(st.integers(1, 2), min_size=ndim, max_size=ndim))
    expand = draw(st.lists(st.booleans(), min_size=ndim, max_size=ndim))
    return tuple(shape), tuple(perm), tuple(steps), tuple(expand)


def _numpy_view(layout, seed=0):
    shape, perm, steps, expand = layout
    big = np.random.RandomState(seed).uniform(0.5, 1.5, [n * s for n, s in zip(shape, steps)])
    view = big[tuple(slice(None, None, s) for s in steps)].transpose(perm)
    out_shape = [3 if e and n == 1 else n for n, e in zip(view.shape, expand)]
    return np.broadcast_to(view, out_shape)


SETTINGS = settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@SETTINGS
@given(layout=layouts(), weighted=st.booleans(), compiled=st.booleans())
def test_torch_every_layout(grad_ops, layout, weighted, compiled):
    torch = pytest.importorskip("torch")
    shape, perm, steps, expand = layout
    base = torch.tensor(np.random.RandomState(1).uniform(0.5, 1.5, [n * s for n, s in zip(shape, steps)]),
                        requires_grad=True)

    def view(b):
        v = b[tuple(slice(None, None, s) for s in steps)].permute(perm)
        return v.expand([3 if e and n == 1 else n for n, e in zip(v.shape, expand)])

    w = torch.arange(1.0, 1.0 + view(base).numel(), dtype=torch.float64).reshape(view(base).shape)

    def loss(b, cube):
        y = cube(view(b))
        return (y * w).sum() if weighted else y.sum()  # .sum(): torch's expanded incoming gradient

    fn = torch.compile(loss, backend="aot_eager", fullgraph=True) if compiled else loss
    # Each example is a new layout, so a new graph: beyond dynamo's default of 8 per code object.
    with torch._dynamo.config.patch(recompile_limit=10_000, accumulated_recompile_limit=10_000):
        (got,) = torch.autograd.grad(fn(base, grad_ops.strict_cube), base)
    (want,) = torch.autograd.grad(loss(base, lambda x: x ** 3), base)
    torch.testing.assert_close(got, want)


@SETTINGS
@given(layout=layouts(), jit=st.booleans())
def test_jax_every_layout(grad_ops, layout, jit):
    jax = pytest.importorskip("jax")
    x = jax.numpy.asarray(_numpy_view(layout).astype(np.float32))  # compact: jax arrays always are
    grad = jax.grad(lambda x: grad_ops.strict_cube(x).sum())
    got = (jax.jit(grad) if jit else grad)(x)
    np.testing.assert_allclose(got, 3 * np.asarray(x) ** 2, rtol=1e-6)


@SETTINGS
@given(layout=layouts())
def test_numpy_every_layout_is_checked(grad_ops, layout):
    x = _numpy_view(layout)
    compact = x.flags.c_contiguous or all(n == 1 for n in x.shape) or x.size == 0
    if not compact:
        with pytest.raises(ValueError, match=r"^tpgrad::strict_cube\(\) argument 'x': expected a compact "
                                             r"\(contiguous\) tensor, as the op declares contiguous=\('x',\); got "
                                             r"shape \(.*\) with strides \(.*\): pass a contiguous copy"):
            grad_ops.strict_cube(x)
        x = np.ascontiguousarray(x)
    np.testing.assert_allclose(np.asarray(grad_ops.strict_cube(x)), x ** 3)


def test_paddle_non_compact_is_refused_naming_the_argument(grad_ops):
    paddle = pytest.importorskip("paddle")
    base = paddle.to_tensor(np.arange(6, dtype=np.float32).reshape(2, 3) / 4)
    x = base.transpose([1, 0])  # a strided view (paddle 3)
    if x.is_contiguous():
        pytest.skip("this paddle's transpose copies: no non-compact tensor to hand over")
    # An eager call that needs no gradient runs the kernel function (with paddle's operator
    # of issue 43 too), checked: refused naming the argument.
    with pytest.raises(ValueError, match=r"^tpgrad::strict_cube\(\) argument 'x': expected a compact \(contiguous\) "
                                         r"tensor, as the op declares contiguous=\('x',\); got shape \(3, 2\) with "
                                         r"strides \(1, 3\)"):
        grad_ops.strict_cube(x)
    np.testing.assert_allclose(grad_ops.strict_cube(x.contiguous()).numpy(), x.numpy() ** 3, rtol=1e-6)


def test_a_scalar_first_still_lets_a_torch_tensor_decide(grad_ops):
    # The layout check of an op without a framework's operator is resolved for tensor types
    # only: a scalar first argument (here a keyword) leaves the call to the torch tensor
    # after it, whose operator copies; resolved for float, the check would refuse x.
    torch = pytest.importorskip("torch")
    import tensorplug

    op = tensorplug.get_op("tplayout::scale_by") or tensorplug.op(
        "tplayout::scale_by", grad_ops.module.scale_by, returns=tensorplug.like("x"), contiguous=("x", "w"))
    x = torch.arange(6.0).reshape(2, 3).t()
    assert op.resolve(float) is None
    np.testing.assert_allclose(op(alpha=2.0, x=x, w=torch.ones(3, 2)).numpy(), 2 * x.numpy())
