"""tensorplug.backward checked against the op when the op is declared: what it may name, the
backward's signature, the op it derives, and ops that write arguments (refused). No framework."""

import functools

import pytest

import grad_kernels  # noqa: E402  (tests/grad_kernels.py)

import tensorplug
from tensorplug import backward, like


@functools.cache
def mod():
    return grad_kernels.ops().module


def _declare(name, function, **kwargs):
    return tensorplug.op(f"tpgrad_decl::{name}", function, **kwargs)


def test_a_kernel_function_becomes_the_op_name_backward():
    op = grad_kernels.ops().sin_cos
    bound = op.backward
    assert bound.function is tensorplug.get_op("tpgrad::sin_cos_backward")
    assert bound.function.params[2].name == "x" and bound.function.n_outputs == 1
    assert [s.name for s in bound.saves] == ["x"] and bound.differentiable == ("x",)
    assert grad_kernels.ops().plain_square.backward is None


def test_saves_results_by_name():
    bound = grad_kernels.ops().exp.backward
    assert [(s.name, s.is_result, s.is_tensor) for s in bound.saves] == [("result", True, True)]
    assert bound.saved_values(("x-value",), ("y-value",)) == ["y-value"]
    scale_by = grad_kernels.ops().scale_by.backward
    assert [(s.name, s.is_tensor) for s in scale_by.saves] == [("x", True), ("w", True), ("alpha", False)]


@pytest.mark.parametrize("kwargs, message", [
    ({"saves": ("x",), "differentiable": ("nope",)},
     r"differentiable 'nope' is not a tensor parameter of tpgrad_decl::bad\d \(its tensor parameters: x\)"),
    ({"saves": ("y",), "differentiable": ("x",)},
     r"saves 'y' is neither a parameter of tpgrad_decl::bad\d \(x\) nor one of its results \(result\)"),
    ({"saves": ("x", "x"), "differentiable": ("x",)},
     r"the backward square_backward takes 2 parameter\(s\); it is called with 3: the incoming gradient of "
     r"result 0, saved 'x', saved 'x'$"),
])
def test_a_backward_that_does_not_fit_the_op_is_refused(kwargs, message):
    name = f"bad{len(message) % 10}"
    with pytest.raises(ValueError, match=r"^tensorplug.op\('tpgrad_decl::bad\d'\) argument 'backward': " + message):
        _declare(name, mod().square, returns=like("x"), backward=backward(mod().square_backward, **kwargs))
    assert tensorplug.get_op(f"tpgrad_decl::{name}") is None  # nothing left declared


def test_a_backward_with_too_many_parameters_is_refused():
    # square_backward_backward(gg, grad, x) called with (grad, x): x left over, not optional
    with pytest.raises(ValueError, match=r"the backward square_backward_backward has parameter\(s\) 'x' beyond the 2 "
                                         r"it is called with \(the incoming gradient of result 0, saved 'x'\); "
                                         r"parameters after those must be optional"):
        _declare("extra", mod().square, returns=like("x"),
                 backward=backward(mod().square_backward_backward, saves=("x",), differentiable=("x",)))


def test_a_gradient_whose_input_is_not_saved_needs_an_op_with_a_rule():
    with pytest.raises(ValueError, match=r"the gradient of 'x' has the shape and dtype of 'x', which the backward does "
                                         r"not receive: save it \(saves=\(\.\.\., 'x'\)\), or pass a tensorplug\.op"):
        _declare("unsaved", mod().exp, returns=like("x"),
                 backward=backward(mod().exp_backward, saves=("result",), differentiable=("x",)))


def test_a_backward_op_returning_the_wrong_number_of_gradients_is_refused():
    two = tensorplug.get_op("tpgrad::square_backward_backward")  # returns 2 tensors
    with pytest.raises(ValueError, match=r"the backward tpgrad::square_backward_backward returns 2 tensor\(s\), one "
                                         r"gradient per differentiable parameter is 1 \(x\)"):
        _declare("count", mod().square_backward, returns=like("x"),
                 backward=backward(two, saves=("grad", "x"), differentiable=("x",)))


def test_an_op_that_writes_arguments_cannot_declare_a_backward():
    with pytest.raises(ValueError, match=r"^tensorplug.op\('tpgrad_decl::twice_into'\) argument 'backward': "
                                         r"tpgrad_decl::twice_into writes 'out' in place, and a gradient through a "
                                         r"tensor written in place is not defined for an operator .*; declare the "
                                         r"functional form \(a kernel that returns its result"):
        _declare("twice_into", mod().twice_into,
                 backward=backward(mod().square_backward, saves=("x",), differentiable=("x",)))


def test_backward_arguments_are_typed():
    with pytest.raises(TypeError, match=r"^tensorplug.backward\(\) argument 'saves': expected names \(str\), got "
                                        r"\(1,\)"):
        backward(mod().square_backward, saves=(1,), differentiable="x")
    with pytest.raises(ValueError, match=r"argument 'differentiable': expected at least one tensor parameter"):
        backward(mod().square_backward, saves=("x",), differentiable=())
    with pytest.raises(TypeError, match=r"^tensorplug.op\('tpgrad_decl::typed'\) argument 'backward': expected "
                                        r"tensorplug.backward\(...\), got Function"):
        _declare("typed", mod().square, returns=like("x"), backward=mod().square_backward)
    with pytest.raises(TypeError, match=r"expected a kernel function or a tensorplug.Op as the backward, got "
                                        r"function"):
        _declare("typed2", mod().square, returns=like("x"),
                 backward=backward(lambda g, x: g, saves=("x",), differentiable="x"))


def test_declaring_imports_no_framework():
    import subprocess
    import sys
    from pathlib import Path

    code = ("import sys; sys.path.insert(0, %r); import grad_kernels; grad_kernels.ops(); "
            "print(sorted(m for m in ('torch', 'jax', 'paddle', 'cupy') if m in sys.modules))"
            % str(Path(__file__).parent))
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"
