"""tensorplug.op with lists: kernels taking lists of tensors (kind ``views``) and int lists
(kind ``ints``), traced as one node by torch.compile (schema ``Tensor[]``, ``SymInt[]``)
and jax.jit (a run of XLA operands, an i64 array attribute), with output rules that read
the lists (``shape="shape"``, ``"len(xs)"``, ``"xs[0].shape[0]"``, ``dtype="xs"``)."""

from __future__ import annotations

import functools
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

import tensorplug
from tensorplug import Output, cpp, like

SOURCE = Path(__file__).parents[1] / "support" / "op_list_kernels.cc"


@functools.cache
def list_ops() -> SimpleNamespace:
    mod = tensorplug.load_module(cpp.build("op_list_kernels", [SOURCE]))
    return SimpleNamespace(
        module=mod,
        weighted_sum=tensorplug.op("tplist::weighted_sum", mod.weighted_sum),
        stack_scaled=tensorplug.op("tplist::stack_scaled", mod.stack_scaled,
                                   returns=Output(shape=("len(xs)", "xs[0].shape[0]"), dtype="xs")),
        filled=tensorplug.op("tplist::filled", mod.filled, returns=Output(shape="shape", dtype="x")),
        plus_optional=tensorplug.op("tplist::plus_optional", mod.plus_optional, returns=like("x")),
    )


def _expected_stack(xs, scales):
    return np.stack([s * np.asarray(x) for x, s in zip(xs, scales)])


# ----------------------------------------------------------------------- rules ----

def test_rules_read_lists():
    ops = list_ops()
    spec = tensorplug.TensorSpec
    cpu = tensorplug.Device("cpu", 0)
    xs = [spec((5,), "float32", cpu)] * 3
    assert ops.stack_scaled.output_specs({"xs": xs, "scales": (1, 2, 3)}) == (spec((3, 5), "float32", cpu),)
    assert ops.filled.output_specs({"x": xs[0], "shape": (2, 4), "value": 1.0}) == (spec((2, 4), "float32", cpu),)


@pytest.mark.parametrize("returns, message", [
    (Output(shape=("len(x)",), dtype="x"), "returns shape[0]: len(x) in 'len(x)': 'x' is not a (non-optional) list "
                                           "parameter"),
    (Output(shape=("shape[0]",), dtype="x"), None),
    (Output(shape=("value[0]",), dtype="x"), "returns shape[0]: 'value' in 'value[0]' is not a (non-optional) int "
                                             "list parameter"),
    (Output(shape=("x[0].shape[0]",), dtype="x"), "returns shape[0]: 'x' in 'x[0].shape[0]' is not a "
                                                  "(non-optional) tensor list parameter"),
    (Output(shape="value", dtype="x"), "returns shape: 'value' is not a tensor parameter (tensor parameters: x)"),
])
def test_list_rules_are_checked_at_declaration(returns, message):
    mod = list_ops().module
    if message is None:  # fits: declared, then never used again
        assert tensorplug.op("tplist_rules::filled_ok", mod.filled, returns=returns).n_outputs == 1
        return
    with pytest.raises(ValueError) as info:
        tensorplug.op("tplist_rules::filled", mod.filled, returns=returns)
    assert str(info.value) == f"tensorplug.op('tplist_rules::filled'): {message}"


def test_optional_int_list_cannot_be_a_shape():
    mod = list_ops().module
    with pytest.raises(ValueError, match=r"^tensorplug.op\('tplist_rules::p'\): returns shape: 'offsets' is an "
                                         r"optional int list; a shape cannot be None$"):
        tensorplug.op("tplist_rules::p", mod.plus_optional, returns=Output(shape="offsets", dtype="x"))


def test_eager_calls_with_numpy_equal_the_kernel():
    ops = list_ops()
    xs = [np.arange(4, dtype=np.float32) + j for j in range(3)]
    np.testing.assert_array_equal(np.asarray(ops.stack_scaled(xs, [1, 2, 3])), _expected_stack(xs, [1, 2, 3]))
    out = np.zeros(4, np.float32)
    ops.weighted_sum(xs, [2, 0, 1], out)
    np.testing.assert_array_equal(out, 2 * xs[0] + xs[2])


# ----------------------------------------------------------------------- torch ----

@pytest.fixture(scope="module")
def torch():
    return pytest.importorskip("torch")


def test_torch_schema_has_list_types(torch):
    ops = list_ops()
    ops.stack_scaled.resolve(torch.Tensor)
    schemas = {name: str(getattr(torch.ops.tplist, name).default._schema)
               for name in ("weighted_sum", "stack_scaled", "filled", "plus_optional")}
    assert schemas == {
        "weighted_sum": "tplist::weighted_sum(Tensor[] xs, SymInt[] weights, Tensor(a!) out) -> ()",
        "stack_scaled": "tplist::stack_scaled(Tensor[] xs, SymInt[] scales) -> Tensor",
        "filled": "tplist::filled(Tensor x, SymInt[] shape, float value) -> Tensor",
        "plus_optional": "tplist::plus_optional(Tensor x, Tensor[]? extra, SymInt[]? offsets) -> Tensor",
    }


def _torch_cases(torch):
    ops = list_ops()
    xs = [torch.arange(5, dtype=torch.float32) + j for j in range(3)]
    x = torch.arange(4, dtype=torch.float32)
    return {
        "weighted_sum": (ops.weighted_sum, (xs, [2, -1, 3], torch.zeros(5))),
        "stack_scaled": (ops.stack_scaled, (xs, [1, 2, 3])),
        "filled": (ops.filled, (x, [2, 3], 0.5)),
        "plus_optional": (ops.plus_optional, ([x, [x * 2, x * 3], [1, 2]])),
        "plus_optional_none": (ops.plus_optional, (x, None, None)),
    }


@pytest.mark.parametrize("case", ["weighted_sum", "stack_scaled", "filled", "plus_optional", "plus_optional_none"])
def test_torch_opcheck(torch, case):
    op, args = _torch_cases(torch)[case]
    op.resolve(torch.Tensor)
    torch.library.opcheck(getattr(torch.ops.tplist, op.opname).default, args)


def _program(torch):
    ops = list_ops()

    def f(a, b):
        xs = [a, b, a * 2]
        out = torch.empty_like(a)
        ops.weighted_sum(xs, [1, 2, 3], out)
        stacked = ops.stack_scaled(xs, [3, 2, 1])
        full = ops.filled(a, [2, a.shape[0]], 1.5)
        plus = ops.plus_optional(a, [b], [4]) + ops.plus_optional(b, None, None)
        return out, stacked, full, plus

    return f


def _eager_expected(torch, a, b):
    xs = [a, b, a * 2]
    return (a + 2 * b + 3 * (a * 2), torch.stack([3 * a, 2 * b, a * 2]), torch.full((2, a.shape[0]), 1.5 + a.sum()),
            a + b + 4 + b)


@pytest.mark.parametrize("backend", ["eager", "aot_eager", "inductor"])
def test_torch_compile_fullgraph_traces_list_ops_as_nodes(torch, backend):
    f = _program(torch)
    a, b = torch.arange(6, dtype=torch.float32), torch.linspace(-1, 1, 6)
    eager = f(a, b)
    for got, want in zip(eager, _eager_expected(torch, a, b)):
        torch.testing.assert_close(got, want)
    torch._dynamo.reset()
    explained = torch._dynamo.explain(f)(a, b)
    assert explained.graph_break_count == 0 and explained.graph_count == 1
    targets = {str(node.target) for gm in explained.graphs for node in gm.graph.nodes if node.op == "call_function"}
    assert {"tplist.weighted_sum.default", "tplist.stack_scaled.default", "tplist.filled.default",
            "tplist.plus_optional.default"} <= targets
    torch._dynamo.reset()
    compiled = torch.compile(f, backend=backend, fullgraph=True)
    for got, want in zip(compiled(a, b), eager):
        torch.testing.assert_close(got, want)


# ------------------------------------------------------------------------- jax ----

@pytest.fixture(scope="module")
def jax():
    return pytest.importorskip("jax")


def test_jax_jit_runs_list_ops(jax):
    ops = list_ops()
    jnp = jax.numpy
    a, b = jnp.arange(4, dtype=jnp.float32), jnp.linspace(-1, 1, 4, dtype=jnp.float32)

    @jax.jit
    def f(a, b):
        xs = [a, b, a * 2]
        summed = ops.weighted_sum(xs, [1, 2, 3], jnp.zeros_like(a))
        stacked = ops.stack_scaled(xs, [3, 2, 1])
        full = ops.filled(a, [2, 3], 1.5)
        plus = ops.plus_optional(a, [b, b], [4, -1])
        bare = ops.plus_optional(b, None, None)
        empty = ops.plus_optional(b, [], [])
        return summed, stacked, full, plus, bare, empty

    an, bn = np.asarray(a), np.asarray(b)
    want = (an + 2 * bn + 6 * an, _expected_stack([an, bn, 2 * an], [3, 2, 1]), np.full((2, 3), 1.5 + an.sum()),
            an + 2 * bn + 3, bn, bn)
    for got, expected in zip(f(a, b), want):
        np.testing.assert_allclose(np.asarray(got), expected, rtol=1e-6)


def test_jax_list_lengths_have_plans_of_their_own(jax):
    ops = list_ops()
    jnp = jax.numpy
    a = jnp.ones(3, jnp.float32)
    for n in (1, 2, 4):
        got = jax.jit(lambda a: ops.stack_scaled([a] * n, list(range(1, n + 1))))(a)
        np.testing.assert_array_equal(np.asarray(got), np.arange(1, n + 1, dtype=np.float32)[:, None] * np.ones(3))


def test_jax_refuses_traced_and_non_int_lists(jax):
    # The message is the whole first line: jax 0.10 appends more on the next line, jax 0.6.2
    # (the last for Python 3.10) nothing (tests/pythons/run.py 3.10 found it).
    ops = list_ops()
    jnp = jax.numpy
    a = jnp.ones(3, jnp.float32)
    with pytest.raises(TypeError, match=r"^tplist::filled\(\) argument 'shape': expected a list of Python ints, "
                                        r"got \[2, 1.5\](\n|$)"):
        jax.jit(lambda a: ops.filled(a, [2, 1.5], 0.0))(a)
    with pytest.raises(TypeError, match=r"^tplist::filled\(\) argument 'shape': expected a list of Python ints, "
                                        r"got 3(\n|$)"):
        jax.jit(lambda a: ops.filled(a, 3, 0.0))(a)
    with pytest.raises(TypeError, match=r"^tplist::weighted_sum\(\) argument 'xs': expected a list of tensors, "
                                        r"got \w*Tracer(\n|$)"):
        jax.jit(lambda a: ops.weighted_sum(a, [1], a))(a)


def test_jax_kernel_error_in_list_op_reaches_python(jax):
    ops = list_ops()
    jnp = jax.numpy
    a = jnp.ones(3, jnp.float32)
    with pytest.raises(Exception, match=r"tplist::weighted_sum\(\): ValueError: weighted_sum: 2 tensors but 1 "
                                        r"weights"):
        jax.block_until_ready(jax.jit(lambda a: ops.weighted_sum([a, a], [1], jnp.zeros_like(a)))(a))


def test_jax_vmap_runs_list_ops_per_element(jax):
    ops = list_ops()
    jnp = jax.numpy
    a = jnp.arange(12, dtype=jnp.float32).reshape(3, 4)
    stacked = jax.vmap(lambda r: ops.stack_scaled([r, r * 2], [1, 3]))(a)
    an = np.asarray(a)
    np.testing.assert_array_equal(np.asarray(stacked), np.stack([np.stack([r, 6 * r]) for r in an]))
    summed = jax.jit(jax.vmap(lambda r: ops.weighted_sum([r, r], [1, 2], jnp.zeros_like(r))))(a)
    np.testing.assert_array_equal(np.asarray(summed), 3 * an)


def test_jax_int_list_may_be_a_numpy_int_array(jax):
    ops = list_ops()
    a = jax.numpy.ones(2, jax.numpy.float32)
    got = jax.jit(lambda a: ops.filled(a, np.array([3, 1], dtype=np.int32), 0.5))(a)
    np.testing.assert_array_equal(np.asarray(got), np.full((3, 1), 2.5, np.float32))
