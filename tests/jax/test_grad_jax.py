"""Gradients in jax from the op's declared backward (tensorplug.backward), with no
user-written custom_vjp: jax.grad, vjp and value_and_grad, eagerly, under jit and vmap,
checked by jax.test_util.check_grads, and the errors for gradients that cannot be had.
Kernels: tests/support/grad_kernels.cc."""

import numpy as np
import pytest

jax = pytest.importorskip("jax")
import jax.numpy as jnp  # noqa: E402
from jax.test_util import check_grads  # noqa: E402



def _x(*shape, seed=0):
    return jnp.asarray(np.random.RandomState(seed).randn(*shape).astype(np.float32))


def _loss(grad_ops, w):
    def loss(x):
        y = grad_ops.scale_by(grad_ops.square(grad_ops.exp(x)), w, 0.5)
        s, c = grad_ops.sin_cos(y)
        return (s * c).sum()
    return loss


def _reference(w):
    def loss(x):
        y = 0.5 * jnp.exp(x) ** 2 * w
        return (jnp.sin(y) * jnp.cos(y)).sum()
    return loss


TRANSFORMS = {"eager": lambda f: f, "jit": jax.jit}


@pytest.mark.parametrize("transform", TRANSFORMS)
def test_grad_and_value_and_grad_equal_jaxs_own_ops(grad_ops, transform):
    x, w = _x(3, 4), _x(3, 4, seed=1)
    loss, reference = _loss(grad_ops, w), _reference(w)
    wrap = TRANSFORMS[transform]
    np.testing.assert_allclose(wrap(jax.grad(loss))(x), jax.grad(reference)(x), rtol=1e-5, atol=1e-5)
    value, grad = wrap(jax.value_and_grad(loss))(x)
    np.testing.assert_allclose(value, reference(x), rtol=1e-5)
    np.testing.assert_allclose(grad, jax.grad(reference)(x), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("transform", TRANSFORMS)
def test_vjp_of_two_results(grad_ops, transform):
    x = _x(5)
    ys, vjp = jax.vjp(grad_ops.sin_cos, x)
    np.testing.assert_allclose(ys[0], jnp.sin(x), rtol=1e-6)
    cts = (jnp.full_like(x, 2.0), jnp.full_like(x, 3.0))
    (got,) = TRANSFORMS[transform](vjp)(cts)
    np.testing.assert_allclose(got, 2 * jnp.cos(x) - 3 * jnp.sin(x), rtol=1e-5, atol=1e-6)
    # one result differentiated, the other not (its cotangent a symbolic zero)
    np.testing.assert_allclose(jax.grad(lambda x: grad_ops.sin_cos(x)[1].sum())(x), -jnp.sin(x), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("transform", TRANSFORMS)
def test_vmap_of_grad(grad_ops, transform):
    xs, w = _x(4, 3), _x(3, seed=1)
    per_row = jax.vmap(jax.grad(_loss(grad_ops, w)))
    np.testing.assert_allclose(TRANSFORMS[transform](per_row)(xs), jax.vmap(jax.grad(_reference(w)))(xs),
                               rtol=1e-5, atol=1e-5)
    # grad of a vmapped op
    np.testing.assert_allclose(jax.grad(lambda xs: jax.vmap(grad_ops.square)(xs).sum())(xs), 2 * xs, rtol=1e-6)


def test_check_grads_reverse_mode(grad_ops):
    x, w = _x(2, 3) * 0.3, _x(2, 3, seed=1)
    check_grads(grad_ops.square, (x,), order=2, modes=["rev"], atol=1e-2, rtol=1e-2)  # declared second derivative
    check_grads(grad_ops.exp, (x,), order=1, modes=["rev"], atol=1e-2, rtol=1e-2)
    check_grads(lambda x: grad_ops.sin_cos(x)[0] + grad_ops.sin_cos(x)[1], (x,), order=1, modes=["rev"], atol=1e-2, rtol=1e-2)
    check_grads(_loss(grad_ops, w), (x,), order=1, modes=["rev"], atol=1e-2, rtol=1e-2)
    check_grads(jax.jit(_loss(grad_ops, w)), (x,), order=1, modes=["rev"], atol=1e-2, rtol=1e-2)


def test_second_derivatives_under_jit(grad_ops):
    x = _x(4)
    hvp = jax.jit(jax.grad(lambda x: jax.grad(lambda x: grad_ops.square(x).sum())(x).sum()))
    np.testing.assert_allclose(hvp(x), jnp.full_like(x, 2.0))


@pytest.mark.parametrize("transform", TRANSFORMS)
def test_grad_through_an_op_without_a_backward_names_it(grad_ops, transform):
    with pytest.raises(TypeError, match=r"^tpgrad::plain_square has no backward: declare one with "
                                        r"tensorplug\.op\('tpgrad::plain_square', \.\.\., "
                                        r"backward=tensorplug\.backward\("):
        TRANSFORMS[transform](jax.grad(lambda x: grad_ops.plain_square(x).sum()))(_x(3))
    # without a gradient it runs, traced or not
    np.testing.assert_allclose(jax.jit(grad_ops.plain_square)(_x(3)), _x(3) ** 2, rtol=1e-6)


@pytest.mark.parametrize("transform", TRANSFORMS)
def test_a_gradient_of_the_wrong_shape_names_the_op_and_the_input(grad_ops, transform):
    # Eagerly as under jit (issue 39), the backward op runs as its XLA custom call, whose
    # handler refuses the allocation against the backward op's rule (like x), naming the
    # backward op (named after the op) and its result (the gradient of x).
    with pytest.raises(jax.errors.JaxRuntimeError, match=r"op 'tpgrad::short_backward': Tensor::FromEnvAlloc call 1 asked for "
                                         r"float32\[11\], but the op's shape rule declares float32\[3, 4\] for "
                                         r"result 0"):
        jax.block_until_ready(TRANSFORMS[transform](jax.grad(lambda x: grad_ops.short(x).sum()))(_x(3, 4)))


@pytest.mark.parametrize("transform", TRANSFORMS)
def test_a_gradient_of_the_wrong_dtype_names_the_op_and_the_input(grad_ops, transform):
    with pytest.raises(jax.errors.JaxRuntimeError, match=r"op 'tpgrad::int32_grad_backward': Tensor::FromEnvAlloc call 1 asked for "
                                         r"int32\[3\], but the op's shape rule declares float32\[3\]"):
        jax.block_until_ready(TRANSFORMS[transform](jax.grad(lambda x: grad_ops.int32_grad(x).sum()))(_x(3)))


def test_a_backward_op_true_to_its_own_rule_still_owes_each_input_its_dtype(grad_ops):
    # The backward op's own rule says int32, so its custom call passes; the gradient check
    # (in the backward rule, on the traced or concrete result) names the op and the input.
    with pytest.raises(ValueError, match=r"^tpgrad::int32_grad_by_rule: the backward tpgrad::int32_backward_by_rule "
                                         r"returned a gradient for 'x' of shape \(3,\) and dtype int32; expected shape "
                                         r"\(3,\) and dtype float32, those of 'x'"):
        jax.grad(lambda x: grad_ops.int32_grad_by_rule(x).sum())(_x(3))


@pytest.mark.parametrize("transform", TRANSFORMS)
def test_a_gradient_of_a_parameter_not_declared_differentiable_is_an_error(grad_ops, transform):
    x, w = _x(3), _x(3, seed=1)
    with pytest.raises(TypeError, match=r"^tpgrad::scale_by: parameter 'w' is not differentiable \(the op's "
                                        r"backward declares differentiable=\('x',\)\)"):
        TRANSFORMS[transform](jax.grad(lambda w: grad_ops.scale_by(x, w, 2.0).sum()))(w)
    np.testing.assert_allclose(TRANSFORMS[transform](jax.grad(lambda x: grad_ops.scale_by(x, w, 2.0).sum()))(x), 2 * w,
                               rtol=1e-6)


def test_an_op_that_writes_arguments_has_no_gradient(grad_ops):
    x = _x(3)
    with pytest.raises(TypeError, match=r"^tpgrad::twice_into writes 'out' in place and has no gradient"):
        jax.grad(lambda x: grad_ops.twice_into(x, jnp.zeros_like(x)).sum())(x)
    np.testing.assert_allclose(jax.jit(grad_ops.twice_into)(x, jnp.zeros_like(x)), 2 * x)


# ---- issue 39: a backward bound by name; layouts; the backward's results checked eagerly too ----

@pytest.mark.parametrize("transform", TRANSFORMS)
def test_a_backward_taking_the_saved_value_first_gets_the_right_gradient(grad_ops, transform):
    # cube_backward(x, grad) with saves=("x",): by position it gave [3, 6, 9].
    x = jnp.asarray([1.0, 2.0, 3.0])
    grad = TRANSFORMS[transform](jax.grad(lambda x: grad_ops.cube(x).sum()))(x)
    assert grad.tolist() == [3.0, 12.0, 27.0]


@pytest.mark.parametrize("transform", TRANSFORMS)
def test_a_declared_layout_contract_holds_in_jax(grad_ops, transform):
    # jax arrays (and XLA's buffers) are always compact: a transposed numpy array becomes a
    # compact one, and the backward's cotangent is a compact array, with the declaration or not.
    x = jnp.asarray(np.arange(12, dtype=np.float32).reshape(4, 3).T / 4)
    for op in (grad_ops.strict_cube, grad_ops.loose_cube):
        grad = TRANSFORMS[transform](jax.grad(lambda x: op(x).sum()))(x)
        np.testing.assert_allclose(grad, 3 * x ** 2, rtol=1e-6)


@pytest.mark.parametrize("transform", TRANSFORMS)
def test_a_backward_returning_more_gradients_than_its_rule_is_refused(grad_ops, transform):
    # Eagerly as under jit: the backward op runs as its XLA custom call, whose handler refuses
    # the third allocation (before issue 39 eager jax.grad dropped the extra gradient).
    x, w = _x(3), _x(3, seed=1)
    with pytest.raises(jax.errors.JaxRuntimeError, match=r"op 'tpgrad::three_gradients_backward': "
                                                         r"Tensor::FromEnvAlloc call 3 \(float32\[3\]\) is one more "
                                                         r"than the 2 result\(s\) its shape rule declares"):
        jax.block_until_ready(TRANSFORMS[transform](
            jax.grad(lambda x, w: grad_ops.three_gradients(x, w, 2.0).sum(), argnums=(0, 1)))(x, w))


@pytest.mark.parametrize("transform", TRANSFORMS)
def test_a_backward_returning_float64_for_float32_is_refused(grad_ops, transform):
    # Eagerly the direct call converted the kernel's float64 to float32 (jax without x64).
    with pytest.raises(jax.errors.JaxRuntimeError, match=r"op 'tpgrad::float64_gradient_backward': "
                                                         r"Tensor::FromEnvAlloc call 1 asked for float64\[3\], but "
                                                         r"the op's shape rule declares float32\[3\] for result 0"):
        jax.block_until_ready(TRANSFORMS[transform](jax.grad(lambda x: grad_ops.float64_gradient(x).sum()))(_x(3)))
