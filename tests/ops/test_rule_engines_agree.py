"""One output rule, every engine that evaluates it (docs/compilers.md; tensorplug.Output):
the Python evaluator of ``tensorplug.shapes`` (``Op.output_specs``), torch's native kernel
(the rule compiled to a program run by compiled code, plugins/tensorplug_adapters/
torch/native.py) and the XLA handler under ``jax.jit`` (which refuses an allocation that
differs from the rule) agree with Python's own arithmetic on generated expressions with
every operator (``+ - * // %``, unary ``-``) in both operand orders.

The kernel (tests/support/contract_kernels.cc ``sized``) allocates exactly ``n`` elements, ``n``
computed here by ``eval`` of the expression (floor division and modulo as Python defines
them): an engine that evaluates the rule otherwise either refuses the kernel's allocation
or returns another shape.
"""

from __future__ import annotations

import itertools
import os
from types import SimpleNamespace

import pytest

hypothesis = pytest.importorskip("hypothesis", reason="hypothesis not installed")
np = pytest.importorskip("numpy")
from hypothesis import HealthCheck, assume, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

import tensorplug  # noqa: E402
from tensorplug import Output, TensorSpec  # noqa: E402

import shared_kernels  # noqa: E402  (tests/support/shared_kernels.py)

EXAMPLES = int(os.environ.get("TENSORPLUG_HYPOTHESIS_EXAMPLES", "20"))
BOUNDED = settings(max_examples=EXAMPLES, deadline=None, derandomize=True, database=None,
                   suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])
LIMIT = 64  # results outside [0, LIMIT] are wrapped: (expr) % 13
_names = itertools.count()


def _python_value(expr: str, shape, a: int, b: int) -> int:
    """Python's own arithmetic: the oracle."""
    return eval(expr, {"__builtins__": {}}, {"x": SimpleNamespace(shape=shape), "a": a, "b": b})  # noqa: S307


def _fitted(expr: str, shape, a, b) -> tuple[str, int]:
    value = _python_value(expr, shape, a, b)
    if not 0 <= value <= LIMIT:
        expr = f"({expr}) % 13"
        value = _python_value(expr, shape, a, b)
    return expr, value


def _engines_agree(expr: str, shape, a: int, b: int) -> None:
    expr, n = _fitted(expr, shape, a, b)
    op = tensorplug.op(f"tpcontract_rules::e{next(_names)}", shared_kernels.contract_kernels().sized,
                       returns=Output(shape=(expr,), dtype="x"))
    # 1. the Python evaluator
    (spec,) = op.output_specs({"x": TensorSpec(shape, "float32", tensorplug.Device("cpu", 0)), "a": a, "b": b, "n": n})
    assert spec.shape == (n,), (expr, shape, a, b)
    # 2. torch's native kernel (the compiled program): it checks the kernel's allocation
    torch = _try_import("torch")
    if torch is not None:
        from tensorplug_adapters.torch import native as torch_native

        out = op(torch.zeros(shape), a, b, n)
        assert torch_native.reason(op) is None, (op.name, torch_native.reason(op))
        assert isinstance(out, torch.Tensor) and tuple(out.shape) == (n,), (expr, shape, a, b)
    # 3. the XLA handler under jit: the rule traced in Python, the allocation checked in C++
    jax = _try_import("jax")
    if jax is not None:
        out = jax.block_until_ready(jax.jit(lambda x: op(x, a, b, n))(np.zeros(shape, np.float32)))
        assert out.shape == (n,), (expr, shape, a, b)


def _try_import(name):
    try:
        return __import__(name)
    except ImportError:
        return None


# Every operator in both orders, with operands of each kind (dimension, negative index,
# integer argument, literal); x is 3 x 5, a = 9, b = 4.
PAIRS = [f"{left} {operator} {right}"
         for operator in ("+", "-", "*", "//", "%")
         for left, right in (("x.shape[0]", "1"), ("1", "x.shape[0]"), ("a", "b"), ("b", "a"),
                             ("x.shape[-1]", "x.shape[0]"), ("x.shape[0]", "x.shape[-1]"), ("a", "x.shape[1]"))]
NESTED = ["a - b - 1", "a - (b - 1)", "a // b // 2", "a // (b // 2)", "-a % b", "-(a % b) + 7", "(a - 2 * b) // 3 + 5",
          "x.shape[-1] - -2", "-x.shape[0] + a", "a % -b + 9", "(1 - a) // b + 4", "(b - a) % x.shape[0]"]


def test_every_operator_in_both_orders_in_every_engine():
    for expr in PAIRS + NESTED:
        _engines_agree(expr, (3, 5), 9, 4)


def test_the_row_of_issue_40_shape_minus_one():
    # x.shape[0] - 1 is 2 for a (3, 5) tensor; read as 1 - x.shape[0] it would be -2.
    _engines_agree("x.shape[0] - 1", (3, 5), 0, 0)


LEAVES = st.sampled_from(["x.shape[0]", "x.shape[1]", "x.shape[-1]", "x.shape[-2]", "a", "b", "1", "2", "3", "7"])


def _expressions():
    def extend(children):
        binary = st.tuples(children, st.sampled_from(["+", "-", "*", "//", "%"]), children).map(
            lambda t: f"({t[0]} {t[1]} {t[2]})")
        return binary | children.map(lambda e: f"-{e}")
    return st.recursive(LEAVES, extend, max_leaves=5)


@BOUNDED
@given(expr=_expressions(), shape=st.tuples(st.integers(1, 6), st.integers(1, 6)),
       a=st.integers(-5, 9).filter(bool), b=st.integers(-5, 9).filter(bool))
def test_generated_expressions_agree_in_every_engine(expr, shape, a, b):
    try:
        _python_value(expr, shape, a, b)
    except ZeroDivisionError:
        assume(False)
    _engines_agree(expr, shape, a, b)
