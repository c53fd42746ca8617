"""tensorplug.backward checked against the op when the op is declared: what it may name, the
backward's signature, the op it derives, and ops that write arguments (refused). No framework."""

import functools

import pytest

import grad_kernels  # noqa: E402  (tests/support/grad_kernels.py)

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
     r"saves names 'x' twice; each saved value is received once$"),
])
def test_a_backward_that_does_not_fit_the_op_is_refused(kwargs, message):
    name = f"bad{len(message) % 10}"
    with pytest.raises(ValueError, match=r"^tensorplug.op\('tpgrad_decl::bad\d'\) argument 'backward': " + message):
        _declare(name, mod().square, returns=like("x"), backward=backward(mod().square_backward, **kwargs))
    assert tensorplug.get_op(f"tpgrad_decl::{name}") is None  # nothing left declared


def test_a_backward_with_too_many_parameters_is_refused():
    # square_backward_backward(gg, grad, x) given (grad, x): x and grad bound by name, gg receives nothing
    with pytest.raises(ValueError, match=r"the backward square_backward_backward's parameter\(s\) 'gg' receive "
                                         r"nothing: no name binds them to what the backward receives \(the incoming "
                                         r"gradient of the result, saved 'x'\); parameters it does not receive must "
                                         r"be optional$"):
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


# ---- issue 39: a backward's parameters are bound by name, never silently by position ----

def test_the_saved_value_first_is_bound_by_name():
    # cube_backward(x, grad): by position it would get (grad, x) and compute 3 grad^2 x.
    bound = grad_kernels.ops().cube.backward
    assert bound.binding == (("saved", 0), ("grad", 0))
    assert bound.arguments(["g"], ["x-value"]) == ["x-value", "g"]
    # A derived backward's rule follows the parameter that receives x, wherever it is.
    assert bound.function.params[0].name == "x"


def test_the_conventions_of_binding():
    ops = grad_kernels.ops()
    # sin_cos_backward(grad_sin, grad_cos, x): grads= names the gradients, x by name.
    assert ops.sin_cos.backward.binding == (("grad", 0), ("grad", 1), ("saved", 0))
    # exp_backward(grad, y) with saves=("result",): grad by name, y the one value left.
    assert ops.exp.backward.binding == (("grad", 0), ("saved", 0))
    # square_backward_backward(gg, grad, x) of square_backward(grad, x), saves=("grad", "x"):
    # a saved parameter named grad is that parameter; gg is the one value left (the gradient).
    assert ops.square_backward.backward.binding == (("grad", 0), ("saved", 0), ("saved", 1))
    # scale_by_backward(grad, x, w, alpha): every name.
    assert ops.scale_by.backward.binding == (("grad", 0), ("saved", 0), ("saved", 1), ("saved", 2))


def test_saves_as_a_mapping_names_the_receiving_parameter():
    # sin_cos_backward(grad_sin, grad_cos, x) receiving a parameter saved as 'x' under another name is the
    # same; here exp_backward(grad, y) receives the saved result through the mapping.
    op = _declare("mapped", mod().exp, returns=like("x"),
                  backward=backward(tensorplug.op("tpgrad_decl::mapped_backward", mod().exp_backward,
                                                  returns=like("y")),
                                    saves={"y": "result"}, differentiable="x"))
    assert op.backward.binding == (("grad", 0), ("saved", 0))
    assert "saves={'y': 'result'}" in repr(op.backward.declared)


def test_two_parameters_no_name_binds_are_refused_naming_what_each_would_receive():
    # sin_cos_backward(grad_sin, grad_cos, x) without grads=: the two gradients by position would be a guess.
    with pytest.raises(ValueError, match=r"^tensorplug.op\('tpgrad_decl::guess'\) argument 'backward': the backward "
                                         r"sin_cos_backward's parameter\(s\) 'grad_sin', 'grad_cos' match no name of "
                                         r"what it receives, and binding them by position would be a guess "
                                         r"\('grad_sin' would receive the incoming gradient of result 0, 'grad_cos' "
                                         r"would receive the incoming gradient of result 1\): name each after what it "
                                         r"receives \(grad_result0 for the incoming gradient of result 0, grad_result1 "
                                         r"for the incoming gradient of result 1\), or declare "
                                         r"tensorplug.backward\(\.\.\., grads=\(\.\.\.\)\) / saves="):
        _declare("guess", mod().sin_cos, returns=(like("x"), like("x")),
                 backward=backward(mod().sin_cos_backward, saves=("x",), differentiable="x"))
    assert tensorplug.get_op("tpgrad_decl::guess") is None


def test_a_name_bound_to_the_wrong_kind_is_refused_naming_the_parameter():
    # scale_by_backward(grad, x, w, alpha) with w and alpha swapped: w (a tensor) would receive float alpha.
    with pytest.raises(ValueError, match=r"the backward scale_by_backward's parameter 'w' is a view; it receives "
                                         r"saved 'alpha', a float$"):
        _declare("kind", mod().scale_by, returns=like("x"),
                 backward=backward(mod().scale_by_backward, saves={"x": "x", "w": "alpha", "alpha": "w"},
                                   differentiable="x"))


def test_a_value_without_a_parameter_is_refused():
    # cube_backward(x, grad) also asked to receive w: no parameter is named w, none is left.
    with pytest.raises(ValueError, match=r"the backward cube_backward\(x, grad\) has no parameter for saved 'w' "
                                         r"\(a parameter named 'w'\)$"):
        _declare("missing", mod().scale_by, returns=like("x"),
                 backward=backward(mod().cube_backward, saves=("x", "w"), differentiable="x"))


def test_grads_must_name_parameters_one_per_result():
    with pytest.raises(ValueError, match=r"grads names 1 parameter\(s\) of sin_cos_backward; tpgrad_decl::g1 has 2 "
                                         r"result\(s\), one incoming gradient each$"):
        _declare("g1", mod().sin_cos, returns=(like("x"), like("x")),
                 backward=backward(mod().sin_cos_backward, saves="x", differentiable="x", grads="grad_sin"))
    with pytest.raises(ValueError, match=r"grads names 'dy', which sin_cos_backward does not take \(its parameters: "
                                         r"grad_sin, grad_cos, x\)$"):
        _declare("g2", mod().sin_cos, returns=(like("x"), like("x")),
                 backward=backward(mod().sin_cos_backward, saves="x", differentiable="x", grads=("dy", "grad_cos")))


def test_binding_by_name_is_independent_of_the_order_of_the_parameters():
    hypothesis = pytest.importorskip("hypothesis", reason="hypothesis not installed")
    from hypothesis import given, settings
    from hypothesis import strategies as st

    from tensorplug.ops import Param

    # scale_by(x, w, alpha) saves x, w, alpha: a backward taking grad, x, w, alpha in any
    # order, with at most one of them renamed (the one value left binds to it), gets each
    # value where its name says; two renamed are refused, never guessed.
    bound = grad_kernels.ops().scale_by.backward
    kinds = {"grad": "view", "x": "view", "w": "view", "alpha": "float"}
    source = {"grad": ("grad", 0), "x": ("saved", 0), "w": ("saved", 1), "alpha": ("saved", 2)}

    @settings(max_examples=200, deadline=None)
    @given(order=st.permutations(list(kinds)), renamed=st.sets(st.sampled_from(list(kinds)), max_size=2))
    def check(order, renamed):
        params = tuple(Param(f"{n}_own" if n in renamed else n, kinds[n]) for n in order)
        if len(renamed) == 2:
            with pytest.raises(ValueError, match=r"binding them by position would be a guess"):
                bound._bind("where", "bwd", params)
            return
        binding = bound._bind("where", "bwd", params)
        assert binding == tuple(source[n] for n in order)

    check()


# ---- issue 39: layout contracts, declared once ----

def test_contiguous_is_declared_on_the_op_and_the_backward():
    ops = grad_kernels.ops()
    assert ops.strict_cube.contiguous == ("x",) and ops.strict_cube.contiguous_index == (0,)
    assert ops.strict_cube.backward.function.contiguous == ("x", "grad")
    assert ops.loose_cube.contiguous == () and ops.loose_cube.backward.function.contiguous == ()


def test_contiguous_names_tensor_parameters_that_are_read():
    with pytest.raises(ValueError, match=r"^tensorplug.op\('tpgrad_decl::c1'\) argument 'contiguous': 'alpha' is not a "
                                         r"tensor parameter of scale_by \(its tensor parameters: x, w\)$"):
        _declare("c1", mod().scale_by, returns=like("x"), contiguous=("alpha",))
    with pytest.raises(ValueError, match=r"argument 'contiguous': 'out' is written in place by twice_into, and a "
                                         r"compact copy would take the write away from the caller's tensor"):
        _declare("c2", mod().twice_into, contiguous="out")
    # On the backward: its own parameters, checked on the op it derives.
    with pytest.raises(ValueError, match=r"^tensorplug.op\('tpgrad_decl::c3'\) argument 'backward': "
                                         r"tensorplug.op\('tpgrad_decl::c3_backward'\) argument 'contiguous': 'dy' is "
                                         r"not a tensor parameter of cube_backward \(its tensor parameters: x, grad\)$"):
        _declare("c3", mod().cube, returns=like("x"),
                 backward=backward(mod().cube_backward, saves="x", differentiable="x", contiguous="dy"))
    # A backward op says it on its own declaration.
    with pytest.raises(ValueError, match=r"contiguous 'y': the backward tpgrad::exp_backward is an op, whose own "
                                         r"declaration says which parameters it needs compact"):
        _declare("c4", mod().exp, returns=like("x"),
                 backward=backward(tensorplug.get_op("tpgrad::exp_backward"), saves="result", differentiable="x",
                                   contiguous="y"))


def test_declaring_imports_no_framework():
    import subprocess
    import sys
    from pathlib import Path

    code = ("import sys; sys.path.insert(0, %r); import grad_kernels; grad_kernels.ops(); "
            "print(sorted(m for m in ('torch', 'jax', 'paddle', 'cupy') if m in sys.modules))"
            % str(Path(__file__).parents[1] / "support"))
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"
