"""The gradient check as a contract (tensorplug.gradients, docs/api.md "backward"): each
gradient a backward returns has the shape and dtype of its differentiable parameter, on
every path (torch eager, torch.compile, jax eager, jax.jit), with the differentiable
parameters anywhere in the signature, not only first; a gradient of the wrong extents, the
wrong rank or the wrong dtype is a ValueError naming the op, the backward and the
parameter; a backward returning the wrong number of gradients is refused when declared.

The backward is an op (tests/support/contract_kernels.cc ``grad1`` / ``grad2``) whose rule is true
to what it returns (a gradient of the shape and dtype it is given as saved arguments), so
the only check in the way is the gradient check itself.
"""

from __future__ import annotations

import functools
import os
from types import SimpleNamespace

import pytest

hypothesis = pytest.importorskip("hypothesis", reason="hypothesis not installed")
np = pytest.importorskip("numpy")
from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

import tensorplug  # noqa: E402
from tensorplug import Output, backward, like  # noqa: E402

import shared_kernels  # noqa: E402  (tests/support/shared_kernels.py)

EXAMPLES = int(os.environ.get("TENSORPLUG_HYPOTHESIS_EXAMPLES", "15"))
BOUNDED = settings(max_examples=EXAMPLES, deadline=None, derandomize=True, database=None,
                   suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
PARAMS = ("a", "b", "c")
DIFFERENTIABLE = [("a",), ("b",), ("c",), ("a", "b"), ("a", "c"), ("b", "c")]
DTYPES = ("float32", "float16")


@functools.cache
def _ops() -> SimpleNamespace:
    """forward3(a, b, c, s0, d0, s1, d1) -> like a, once per choice of differentiable
    parameters; its backward returns gradients of shapes s0, s1 and dtypes d0, d1."""
    mod = shared_kernels.contract_kernels()
    g1 = tensorplug.op("tpcontract_grad::grad1", mod.grad1, returns=Output(shape="s0", dtype="d0"))
    g2 = tensorplug.op("tpcontract_grad::grad2", mod.grad2,
                       returns=(Output(shape="s0", dtype="d0"), Output(shape="s1", dtype="d1")))
    ops = {}
    for diff in DIFFERENTIABLE:
        bwd, saves = (g1, ("s0", "d0")) if len(diff) == 1 else (g2, ("s0", "d0", "s1", "d1"))
        ops[diff] = tensorplug.op(f"tpcontract_grad::f_{''.join(diff)}", mod.forward3, returns=like("a"),
                                  backward=backward(bwd, saves=saves, differentiable=diff))
    return SimpleNamespace(module=mod, g1=g1, g2=g2, by_diff=ops)


def _shape_text(shape) -> str:
    return "(" + ", ".join(map(str, shape)) + ("," if len(shape) == 1 else "") + ")"


def _expected_error(op, diff, inputs, grads) -> str | None:
    """The message of the first gradient that does not fit its parameter, or None."""
    for k, name in enumerate(diff):
        shape, dtype = inputs[name]
        got_shape, got_dtype = grads[k]
        if tuple(got_shape) != tuple(shape) or got_dtype != dtype:
            fn = "tpcontract_grad::grad1" if len(diff) == 1 else "tpcontract_grad::grad2"
            return (f"{op.name}: the backward {fn} returned a gradient for {name!r} of shape {_shape_text(got_shape)} "
                    f"and dtype {got_dtype}; expected shape {_shape_text(shape)} and dtype {dtype}, those of {name!r}")
    return None


def _grad_args(diff, grads):
    (s0, d0), (s1, d1) = grads[0], (grads[1] if len(grads) > 1 else ((1,), "float32"))
    return list(s0), d0, list(s1), d1


# ------------------------------------------------------------------- the paths ----
def _torch_path(compiled: bool):
    torch = pytest.importorskip("torch")

    def run(op, diff, inputs, grads):
        tensors = {n: torch.zeros(s, dtype=getattr(torch, d), requires_grad=n in diff) for n, (s, d) in inputs.items()}
        s0, d0, s1, d1 = _grad_args(diff, grads)
        d0, d1 = getattr(torch, d0), getattr(torch, d1)

        def loss(a, b, c):
            return op(a, b, c, s0, d0, s1, d1).sum()

        fn = torch.compile(loss, backend="aot_eager", fullgraph=True) if compiled else loss
        torch._dynamo.reset() if compiled else None
        got = torch.autograd.grad(fn(*(tensors[n] for n in PARAMS)), [tensors[n] for n in diff])
        return [(tuple(g.shape), str(g.dtype).rpartition(".")[2]) for g in got]
    return run


def _jax_path(jit: bool):
    jax = pytest.importorskip("jax")
    jnp = jax.numpy

    def run(op, diff, inputs, grads):
        arrays = {n: jnp.zeros(s, dtype=d) for n, (s, d) in inputs.items()}
        s0, d0, s1, d1 = _grad_args(diff, grads)
        positions = tuple(PARAMS.index(n) for n in diff)

        def loss(a, b, c):
            return op(a, b, c, s0, d0, s1, d1).astype(jnp.float32).sum()

        fn = jax.grad(loss, argnums=positions)
        got = (jax.jit(fn) if jit else fn)(*(arrays[n] for n in PARAMS))
        return [(tuple(g.shape), str(g.dtype)) for g in got]
    return run


PATHS = {"torch": lambda: _torch_path(False), "torch.compile": lambda: _torch_path(True),
         "jax": lambda: _jax_path(False), "jax.jit": lambda: _jax_path(True)}


def _check(path, diff, inputs, grads):
    op = _ops().by_diff[diff]
    expected = _expected_error(op, diff, inputs, grads)
    if expected is None:
        assert path(op, diff, inputs, grads) == [tuple(inputs[n]) for n in diff]
    else:
        with pytest.raises(Exception) as info:
            path(op, diff, inputs, grads)
        error = _value_error(info.value)
        assert error is not None, repr(info.value)
        assert str(error).split("\n")[0] == expected


def _value_error(exc):
    """The ValueError itself, or the one a graph compiler wrapped (torch.compile raises its
    backend's error as BackendCompilerFailed, the ValueError its inner exception)."""
    seen = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        if isinstance(exc, ValueError):
            return exc
        exc = getattr(exc, "inner_exception", None) or exc.__cause__
    return None


# ----------------------------------------------------------- the rows of issue 40 ----
@pytest.mark.parametrize("path", ["torch", "jax"])
def test_each_gradient_is_checked_against_its_own_differentiable_parameter(path):
    # b (second, of another shape and dtype than a) is the only differentiable parameter:
    # its right gradient passes, and one shaped like a (the first input) does not.
    inputs = {"a": ((2,), "float32"), "b": ((3, 4), "float16"), "c": ((5,), "float32")}
    _check(PATHS[path](), ("b",), inputs, [((3, 4), "float16")])
    _check(PATHS[path](), ("b",), inputs, [((2,), "float32")])
    # two differentiable parameters after the first: each against its own
    inputs = {"a": ((1,), "float32"), "b": ((2, 3), "float32"), "c": ((4,), "float16")}
    _check(PATHS[path](), ("b", "c"), inputs, [((2, 3), "float32"), ((4,), "float16")])


@pytest.mark.parametrize("path", ["torch", "jax"])
def test_a_gradient_of_the_right_rank_but_wrong_extents_is_refused(path):
    inputs = {"a": ((2, 3), "float32"), "b": ((4,), "float32"), "c": ((1,), "float32")}
    _check(PATHS[path](), ("a",), inputs, [((3, 2), "float32")])
    _check(PATHS[path](), ("a", "b"), inputs, [((2, 3), "float32"), ((5,), "float32")])


# ------------------------------------------------------------------ the property ----
@st.composite
def cases(draw):
    diff = draw(st.sampled_from(DIFFERENTIABLE))
    inputs = {n: (tuple(draw(st.lists(st.integers(1, 3), min_size=0, max_size=3))), draw(st.sampled_from(DTYPES)))
              for n in PARAMS}
    grads = []
    for name in diff:
        shape, dtype = inputs[name]
        how = draw(st.sampled_from(["right", "right", "extents", "rank", "dtype"]))
        if how == "extents" and shape:
            i = draw(st.integers(0, len(shape) - 1))
            shape = shape[:i] + (shape[i] + draw(st.integers(1, 2)),) + shape[i + 1:]
        elif how == "rank" or (how == "extents" and not shape):
            shape = shape[:-1] if shape and draw(st.booleans()) else shape + (draw(st.integers(1, 2)),)
        elif how == "dtype":
            dtype = next(d for d in DTYPES if d != dtype)
        grads.append((shape, dtype))
    return diff, inputs, grads


@BOUNDED
@given(case=cases())
@pytest.mark.parametrize("path", ["torch", "jax"])
def test_generated_gradients_eager(path, case):
    _check(PATHS[path](), *case)


@pytest.mark.parametrize("path", ["torch.compile", "jax.jit"])
def test_gradients_through_graph_compilers(path):
    a_first = {"a": ((2, 2), "float32"), "b": ((3,), "float32"), "c": ((1,), "float16")}
    for diff, grads in [(("b",), [((3,), "float32")]), (("b",), [((4,), "float32")]),
                        (("a", "c"), [((2, 2), "float32"), ((1,), "float32")]),
                        (("a", "c"), [((2,), "float32"), ((1,), "float16")])]:
        _check(PATHS[path](), diff, a_first, grads)


def test_a_backward_returning_the_wrong_number_of_gradients_is_refused():
    ops = _ops()
    for diff, bwd, saves, n in [(("b",), ops.g2, ("s0", "d0", "s1", "d1"), 2), (("a", "c"), ops.g1, ("s0", "d0"), 1)]:
        name = f"tpcontract_grad::count_{''.join(diff)}"
        with pytest.raises(ValueError) as info:
            tensorplug.op(name, ops.module.forward3, returns=like("a"),
                          backward=backward(bwd, saves=saves, differentiable=diff))
        assert str(info.value) == (f"tensorplug.op({name!r}) argument 'backward': the backward {bwd.name} returns {n} "
                                   f"tensor(s), one gradient per differentiable parameter is {len(diff)} "
                                   f"({', '.join(diff)})")
