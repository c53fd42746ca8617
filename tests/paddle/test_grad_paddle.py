"""Gradients of tensorplug ops in paddle (issue 43): the declared backward gives paddle's
autodiff its gradients, eagerly and through ``paddle.jit.to_static`` programs (the grad
operator of paddle's operator for the op); a gradient through an op without a backward, or
of a parameter the backward does not differentiate, is an error naming the op; gradients
are checked like their inputs."""

from __future__ import annotations

import numpy as np
import pytest

paddle = pytest.importorskip("paddle")

from tensorplug.gradients import no_backward_message  # noqa: E402
from tensorplug_adapters.paddle import static as paddle_static  # noqa: E402
from tensorplug_adapters.testing.paddle import paddle_error_text  # noqa: E402

MODES = ["eager", "sot", "full_graph"]


@pytest.fixture(scope="module")
def grad_ops(grad_ops):
    """The shared gradient ops (tests/conftest.py), once paddle's operator for them is built."""
    if not paddle_static.register():
        pytest.skip(f"paddle's operator could not be built: {paddle_static.error()}")
    return grad_ops


def _in(mode, fn):
    if mode == "eager":
        return fn
    return paddle.jit.to_static(fn, full_graph=mode == "full_graph")


def _leaf(values, dtype="float32"):
    x = paddle.to_tensor(np.asarray(values, dtype=dtype))
    x.stop_gradient = False
    return x


@pytest.mark.parametrize("mode", MODES)
def test_declared_backward_gives_the_gradient(grad_ops, mode):
    def f(x):
        return grad_ops.square(x)

    x = _leaf([1.0, -2.0, 3.0])
    _in(mode, f)(x).sum().backward()
    assert x.grad is not None, "no gradient: paddle did not see the op's backward"
    assert x.grad.numpy().tolist() == [2.0, -4.0, 6.0]


@pytest.mark.parametrize("mode", MODES)
def test_two_results_and_a_backward_bound_by_name(grad_ops, mode):
    def f(x):
        s, c = grad_ops.sin_cos(x)
        return s * 2 + c + grad_ops.cube(x)  # cube_backward(x, grad): the saved value first

    values = np.array([0.5, -1.0], dtype=np.float32)
    x = _leaf(values)
    (grad,) = paddle.grad([_in(mode, f)(x).sum()], [x])
    np.testing.assert_allclose(grad.numpy(), 2 * np.cos(values) - np.sin(values) + 3 * values ** 2, rtol=1e-5)


@pytest.mark.parametrize("mode", MODES)
def test_the_backward_reads_the_saved_result(grad_ops, mode):
    def f(x):
        return grad_ops.exp(x)  # saves=("result",)

    x = _leaf([0.0, 1.0])
    _in(mode, f)(x).sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), np.exp([0.0, 1.0]), rtol=1e-6)


@pytest.mark.parametrize("mode", MODES)
def test_an_op_without_a_backward_names_itself(grad_ops, mode):
    def f(x):
        return grad_ops.plain_square(x)

    x = _leaf([1.0, 2.0])
    y = _in(mode, f)(x)  # the forward runs: only a gradient through it is refused
    assert y.numpy().tolist() == [1.0, 4.0]
    with pytest.raises(RuntimeError) as refused:
        y.sum().backward()
    assert paddle_error_text(str(refused.value)) == no_backward_message(grad_ops.plain_square)


@pytest.mark.parametrize("mode", MODES)
def test_a_parameter_left_out_of_differentiable_is_refused_by_name(grad_ops, mode):
    def f(x, w):
        return grad_ops.scale_by(x, w, 2.0)

    x, w = _leaf([1.0, 2.0]), _leaf([3.0, 4.0])
    with pytest.raises(RuntimeError) as refused:
        paddle.grad([_in(mode, f)(x, w).sum()], [x, w])
    assert paddle_error_text(str(refused.value)) == grad_ops.scale_by.backward.not_differentiable("w")
    w.stop_gradient = True  # not asked: x's gradient alone
    (grad,) = paddle.grad([_in(mode, f)(x, w).sum()], [x])
    assert grad.numpy().tolist() == [6.0, 8.0]


@pytest.mark.parametrize("mode", MODES)
def test_a_gradient_of_the_wrong_shape_names_the_op_and_the_input(grad_ops, mode):
    def f(x):
        return grad_ops.short(x)

    x = _leaf([1.0, 2.0, 3.0])
    with pytest.raises(ValueError) as refused:
        _in(mode, f)(x).sum().backward()
    assert paddle_error_text(str(refused.value)) == (
        "tpgrad::short: the backward tpgrad::short_backward returned a gradient for 'x' of shape (2,) and dtype "
        "float32; expected shape (3,) and dtype float32, those of 'x'")


def test_an_op_that_writes_is_refused_when_a_gradient_may_flow(grad_ops):
    x, out = _leaf([1.0, 2.0]), paddle.zeros([2])
    with pytest.raises(RuntimeError) as refused:
        grad_ops.twice_into(x, out)
    assert str(refused.value) == (f"{no_backward_message(grad_ops.twice_into)}; or call it under paddle.no_grad(), on "
                                  "tensors with stop_gradient=True")
    with paddle.no_grad():
        grad_ops.twice_into(x, out)
    assert out.numpy().tolist() == [2.0, 4.0]


def test_no_gradient_wanted_runs_the_kernel_function(grad_ops):
    x = paddle.to_tensor([1.0, 2.0])  # stop_gradient: the eager call is the direct one
    assert grad_ops.plain_square(x).numpy().tolist() == [1.0, 4.0]
    y = _leaf([3.0])
    with paddle.no_grad():
        assert grad_ops.plain_square(y).stop_gradient
