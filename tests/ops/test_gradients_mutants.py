"""tensorplug.backward at the inputs that tell a right check from a slip (issue 40: the
survivors of cosmic-ray on core/tensorplug/gradients.py, docs/testing.md "Mutation testing
with a tool"). Each test asserts documented behaviour (docs/api.md "backward", the module's
docstrings): what a declaration is refused for and with what message, how a two-result op's
results are saved, and what BoundBackward.check_gradient accepts. No framework."""

from __future__ import annotations

import functools

import pytest

import grad_kernels  # tests/support/grad_kernels.py
import op_kernels  # tests/support/op_kernels.py

import tensorplug
from tensorplug import backward, like

_count = iter(range(10**6))


@functools.cache
def mod():
    return grad_kernels.ops().module


def refusal(function, **kwargs) -> str:
    name = f"tpgrad_mut::op{next(_count)}"
    with pytest.raises(ValueError) as e:
        tensorplug.op(name, function, **kwargs)
    assert tensorplug.get_op(name) is None  # nothing left declared
    return str(e.value).replace(name, "OP")


def test_a_parameter_named_twice_as_differentiable_is_refused():
    message = refusal(mod().square, returns=like("x"),
                      backward=backward(mod().square_backward, saves=("x",), differentiable=("x", "x")))
    assert message == "tensorplug.op('OP') argument 'backward': differentiable names a parameter twice: ('x', 'x')"


def test_the_results_of_a_two_result_op_are_saved_as_result_k():
    # sin_cos has two results: "result[0]" is one of them (received as `result0`), "result" is not
    message = refusal(mod().sin_cos, returns=(like("x"), like("x")),
                      backward=backward(mod().sin_cos_backward, saves=("x", "result[0]"), differentiable=("x",),
                                        grads=("grad_sin", "grad_cos")))
    assert message.endswith("has no parameter for saved 'result[0]' (a parameter named 'result0')")
    message = refusal(mod().sin_cos, returns=(like("x"), like("x")),
                      backward=backward(mod().sin_cos_backward, saves=("x", "result"), differentiable=("x",),
                                        grads=("grad_sin", "grad_cos")))
    assert message.endswith("saves 'result' is neither a parameter of OP (x) nor one of its results "
                            "(result[0], result[1])")


def test_an_optional_parameter_saved_into_a_required_one_is_refused():
    # scale(x, alpha, bias=None): square_backward's `x` would receive bias, which may be None
    scale = op_kernels.ops().module.scale
    message = refusal(scale, returns=like("x"),
                      backward=backward(mod().square_backward, saves={"x": "bias"}, differentiable=("x",)))
    assert message == ("tensorplug.op('OP') argument 'backward': the backward square_backward's parameter 'x' "
                       "receives optional 'bias', which may be None: declare it optional")


def test_check_gradient_compares_shapes_by_value():
    bound = grad_kernels.ops().square.backward
    bound.check_gradient(0, (2, 3), "float32", [2, 3], "float32")  # equal shapes, other sequence types
    bound.check_gradient(0, [4], "float64", (4,), "float64")
    with pytest.raises(ValueError) as e:
        bound.check_gradient(0, (2, 3), "float32", (3, 2), "float32")
    assert str(e.value) == ("tpgrad::square: the backward tpgrad::square_backward returned a gradient for 'x' of "
                            "shape (2, 3) and dtype float32; expected shape (3, 2) and dtype float32, those of 'x'")
    with pytest.raises(ValueError, match=r"of shape \(4,\) and dtype float64; expected shape \(4,\) and dtype "
                                         r"float32, those of 'x'$"):
        bound.check_gradient(0, (4,), "float64", (4,), "float32")
    with pytest.raises(ValueError, match=r"of shape \(4,\) and dtype float32; expected shape \(4,\) and dtype "
                                         r"float64, those of 'x'$"):
        bound.check_gradient(0, (4,), "float32", (4,), "float64")


def test_a_backward_with_one_parameter_for_two_incoming_gradients_is_refused():
    # sin_cos has two results; square_backward(grad, x) has one parameter left for both gradients
    message = refusal(mod().sin_cos, returns=(like("x"), like("x")),
                      backward=backward(mod().square_backward, saves=("x",), differentiable=("x",)))
    assert message.endswith("the backward square_backward(grad, x) has no parameter for the incoming gradient of "
                            "result 0 (a parameter named 'grad_result0'), the incoming gradient of result 1 (a "
                            "parameter named 'grad_result1')")


def test_a_scalar_gradient_shape_is_written_as_an_empty_tuple():
    bound = grad_kernels.ops().square.backward
    with pytest.raises(ValueError, match=r"of shape \(\) and dtype float32; expected shape \(1,\) and dtype float32"):
        bound.check_gradient(0, (), "float32", (1,), "float32")


def test_a_backward_declaration_shows_its_function_and_its_names():
    declared = backward(mod().square_backward, saves=("x",), differentiable=("x",))
    assert repr(declared) == "tensorplug.backward(square_backward, saves=('x',), differentiable=('x',))"
    declared = backward(grad_kernels.ops().square_backward, saves={"g": "x"}, differentiable="x", grads="grad")
    assert repr(declared) == ("tensorplug.backward(tpgrad::square_backward, saves={'g': 'x'}, "
                              "differentiable=('x',), grads=('grad',))")


def test_unmatched_parameters_are_not_bound_by_position():
    # square saves its result; scale_by_backward(grad, x, w, alpha) has three parameters
    # named after nothing it receives, for one saved value: a guess, refused
    message = refusal(mod().square, returns=like("x"),
                      backward=backward(mod().scale_by_backward, saves=("result",), differentiable=("x",)))
    assert message.endswith("the backward scale_by_backward's parameter(s) 'x', 'w', 'alpha' match no name of what "
                            "it receives, and binding them by position would be a guess ('x' would receive saved "
                            "'result'): name each after what it receives (result for saved 'result'), or declare "
                            "tensorplug.backward(..., grads=(...)) / saves={parameter: saved name}")


NAMED = r"""
namespace tp = tensorplug;
tp::Tensor ident(tp::TensorView input) {
  tp::Tensor y = tp::Tensor::FromEnvAlloc(input.shape(), input.dtype(), input.device());
  return y;
}
tp::Tensor ident_backward(tp::TensorView grad, tp::TensorView input) {
  tp::Tensor y = tp::Tensor::FromEnvAlloc(input.shape(), input.dtype(), input.device());
  return y;
}
void touch(tp::TensorView input) {}
tp::Tensor opt_backward(tp::TensorView grad, tp::TensorView x, std::optional<tp::TensorView> bias) {
  return tp::Tensor::FromEnvAlloc(x.shape(), x.dtype(), x.device());
}
tp::Tensor grad_only(tp::TensorView grad) {
  return tp::Tensor::FromEnvAlloc(grad.shape(), grad.dtype(), grad.device());
}
tp::Tensor ident_n(tp::TensorView input, int64_t n) {
  return tp::Tensor::FromEnvAlloc(input.shape(), input.dtype(), input.device());
}
tp::Tensor ident_n_backward(tp::TensorView grad, tp::TensorView input, double n) {
  return tp::Tensor::FromEnvAlloc(input.shape(), input.dtype(), input.device());
}
tp::Tensor ident_backward_kinds(std::optional<tp::TensorView> unused, tp::TensorView grad, double input) {
  return tp::Tensor::FromEnvAlloc(grad.shape(), grad.dtype(), grad.device());
}
"""


@functools.cache
def named():
    from tensorplug import cpp

    return cpp.load_inline("grad_mutants_named", NAMED,
                           functions=["ident", "ident_backward", "ident_backward_kinds", "touch",
                                      "ident_n", "ident_n_backward", "grad_only",
                                      "opt_backward"])


def test_names_are_compared_by_value():
    # parameter names built at run time (not the interned literals of a declaration)
    saved, diff = "".join(["in", "put"]), "".join(["inp", "ut"])
    name = f"tpgrad_mut::ident{next(_count)}"
    op = tensorplug.op(name, named().ident, returns=like("input"),
                       backward=backward(named().ident_backward, saves=(saved,), differentiable=(diff,)))
    assert op.backward.differentiable == ("input",) and [s.name for s in op.backward.saves] == ["input"]


def test_every_bound_parameter_has_its_kind_checked():
    # the first parameter (optional) receives nothing; `input` after it is a float receiving a tensor
    message = refusal(named().ident, returns=like("input"),
                      backward=backward(named().ident_backward_kinds, saves=("input",), differentiable=("input",)))
    assert message.endswith("the backward ident_backward_kinds's parameter 'input' is a float; it receives saved "
                            "'input', a tensor")


def test_an_op_without_results_has_no_result_to_save():
    # touch(input) returns nothing and writes nothing
    message = refusal(named().touch, backward=backward(named().ident_backward, saves=("input", "result"),
                                                       differentiable=("input",)))
    assert message.endswith("saves 'result' is neither a parameter of OP (input) nor one of its results ()")


def test_a_gradient_takes_the_shape_of_its_own_parameter():
    # w is differentiable, x is saved before it: the derived backward's rule is w's
    op = tensorplug.op(f"tpgrad_mut::scale_by{next(_count)}", mod().scale_by, returns=like("x"),
                       backward=backward(mod().scale_by_backward, saves=("x", "w", "alpha"), differentiable=("w",)))
    rule = op.backward.function.returns
    assert (rule.shape, rule.dtype, rule.device) == ("w", "w", "w")


def test_saved_scalars_bind_to_scalar_parameters():
    bound = grad_kernels.ops().scale_by.backward
    assert bound.binding == (("grad", 0), ("saved", 0), ("saved", 1), ("saved", 2))


def test_a_saved_scalar_needs_a_parameter_of_its_own_kind():
    # n is an int; ident_n_backward takes it as a float
    message = refusal(named().ident_n, returns=like("input"),
                      backward=backward(named().ident_n_backward, saves=("input", "n"), differentiable=("input",)))
    assert message.endswith("the backward ident_n_backward's parameter 'n' is a float; it receives saved 'n', a int")


def test_a_backward_receiving_only_the_incoming_gradient_binds_it():
    # an elementwise op's backward as an op of its own, taking the gradient alone
    bwd = tensorplug.op(f"tpgrad_mut::grad_only{next(_count)}", named().grad_only, returns=like("grad"))
    op = tensorplug.op(f"tpgrad_mut::ident{next(_count)}", named().ident, returns=like("input"),
                       backward=backward(bwd, differentiable=("input",)))
    assert op.backward.binding == (("grad", 0),)
    assert op.backward.arguments(["g"], []) == ["g"]


def test_an_optional_parameter_saved_into_an_optional_one_is_taken():
    # scale(x, alpha, bias=None): opt_backward's optional `bias` receives it
    scale = op_kernels.ops().module.scale
    op = tensorplug.op(f"tpgrad_mut::scale{next(_count)}", scale, returns=like("x"),
                       backward=backward(named().opt_backward, saves=("x", "bias"), differentiable=("x",)))
    assert op.backward.binding == (("grad", 0), ("saved", 0), ("saved", 1))


def test_more_gradient_names_than_results_are_refused():
    message = refusal(mod().square, returns=like("x"),
                      backward=backward(mod().square_backward, saves=("x",), differentiable=("x",),
                                        grads=("grad", "x")))
    assert message.endswith("grads names 2 parameter(s) of square_backward; OP has 1 result(s), one incoming "
                            "gradient each")
