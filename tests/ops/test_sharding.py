"""The sharding rule language (tensorplug.sharding, issue 25): parsing and the checks made
when an op is declared and when a call's shapes are bound, without any framework (the
frameworks' forms are tested by tests/jax/test_sharding_jax.py and tests/torch/test_sharding_torch.py)."""

from __future__ import annotations

import pytest

import tensorplug
from tensorplug import Device, TensorSpec

import sharding_kernels

CPU = Device("cpu", 0)


@pytest.fixture(scope="module")
def mod():
    return sharding_kernels.load()


_count = iter(range(10**6))


def declare(mod, kernel, sharding, returns=tensorplug.like("x"), **kw):
    return tensorplug.op(f"tpshardrule::{kernel}_{next(_count)}", getattr(mod, kernel), returns=returns,
                         sharding=sharding, **kw)


def spec(*shape):
    return TensorSpec(shape, "float32", CPU)


MATMUL_OUT = tensorplug.Output(("a.shape[0]", "w.shape[1]"), "a")


# ----------------------------------------------------------------- declarations ----

def test_rule_parts(mod):
    op = declare(mod, "matmul", "b i, i j -> b j", MATMUL_OUT)
    rule = op.sharding
    assert rule.text == "b i, i j -> b j"
    assert rule.inputs == (("a", ("b", "i")), ("w", ("i", "j")))
    assert rule.outputs == (("b", "j"),) and rule.results == (("b", "j"),) and rule.whole == frozenset()
    assert declare(mod, "scale", None).sharding is None


def test_elementwise_is_the_ellipsis_form(mod):
    rule = declare(mod, "scale", "elementwise").sharding
    assert rule.inputs == (("x", ("...",)),) and rule.outputs == (("...",),)
    bound = rule.bind(declare(mod, "scale", "elementwise"), {"x": spec(4, 6), "alpha": 2.0})
    assert bound.inputs == {"x": ("...0", "...1")} and bound.splittable == {"...0", "...1"}


def test_written_parameter_keeps_its_term_as_result(mod):
    rule = declare(mod, "axpy", "n, n ->", returns=None).sharding
    assert rule.written == ("out",) and rule.outputs == () and rule.results == (("n",),)


@pytest.mark.parametrize("sharding, message", [
    ("b, c -> b", "has 2 input terms; the kernel has 1 tensor parameters (x), one term each"),
    ("b -> b, b", "has 2 output terms; the kernel allocates 1 tensors, one term each"),
    ("b", "needs one '->' between the inputs' terms and the outputs' terms (or is 'elementwise')"),
    ("b -> b -> b", "needs one '->'"),
    ("b b -> b b", "factor 'b' appears twice in the term 'b b'; a term names each dimension once"),
    ("b 2 -> b", "'2' is not a factor (a name such as 'b', '[n]' for one that stays whole, or '...')"),
    ("b [n -> b", "'[n' is not a factor"),
    ("b [n] -> b n", "writes factor 'n' both as [n] and as n; mark it [..] everywhere or nowhere"),
    ("b -> ... b", "has '...' in an output term but in no input term"),
    ("... ... -> b", "'...' appears twice"),
    (3, "sharding: expected a rule string such as 'b i, i j -> b j' or 'elementwise', got int"),
])
def test_declaration_refuses_a_rule_that_does_not_fit(mod, sharding, message):
    with pytest.raises(ValueError, match=r"^tensorplug\.op\('tpshardrule::scale_\d+'\): sharding: ") as e:
        declare(mod, "scale", sharding)
    assert message in str(e.value)


def test_declaration_refuses_tensor_lists():
    from tensorplug.ops import Param
    from tensorplug.sharding import compile_sharding
    from tensorplug.shapes import RuleError

    with pytest.raises(RuleError, match="parameter 'xs' is a list of tensors; a sharding rule covers tensor "
                                        "parameters only"):
        compile_sharding("b -> b", (Param("xs", "views"),), 1)


# ----------------------------------------------------------------- bound calls ----

def test_splittable_factors(mod):
    matmul = declare(mod, "matmul", "b i, i j -> b j", MATMUL_OUT)
    bound = matmul.sharding.bind(matmul, {"a": spec(8, 6), "w": spec(6, 4)})
    assert bound.splittable == {"b", "j"}  # i: inputs only, stays whole
    assert bound.sizes == {"b": 8, "i": 6, "j": 4}
    cumsum = declare(mod, "cumsum_rows", "b [n] -> b [n]")
    assert cumsum.sharding.bind(cumsum, {"x": spec(8, 6)}).splittable == {"b"}
    # A factor of the outputs only (a size from an int argument) stays whole.
    head = declare(mod, "head", "b -> n", tensorplug.Output(("n",), "x"))
    assert head.sharding.bind(head, {"x": spec(8), "n": 3}).splittable == frozenset()


def test_bind_refuses_shapes_that_do_not_fit(mod):
    matmul = declare(mod, "matmul", "b i, i j -> b j", MATMUL_OUT)
    with pytest.raises(ValueError) as e:
        matmul.sharding.bind(matmul, {"a": spec(8, 6), "w": spec(5, 4)})
    assert str(e.value) == (f"{matmul.name}: sharding rule 'b i, i j -> b j': dimension 'i' is 6 in argument 'a' "
                            "(8, 6) and 5 in argument 'w' (5, 4)")
    with pytest.raises(ValueError) as e:
        matmul.sharding.bind(matmul, {"a": spec(8), "w": spec(5, 4)})
    assert "argument 'a' has 1 dimensions (8,), its term 'b i' names 2" in str(e.value)


def test_bind_refuses_an_output_rule_that_disagrees(mod):
    # The output rule doubles the columns; the sharding rule says they are x's.
    op = declare(mod, "scale", "b n -> b n", tensorplug.Output(("x.shape[0]", "x.shape[1] * 2"), "x"))
    with pytest.raises(ValueError) as e:
        op.sharding.bind(op, {"x": spec(8, 6), "alpha": 1.0})
    assert str(e.value) == (f"{op.name}: sharding rule 'b n -> b n': dimension 'n' is 6 in argument 'x' (8, 6) and "
                            "12 in output 0 (8, 12)")


def test_check_split_compares_the_output_rule_on_one_shard(mod):
    head = declare(mod, "head", "b -> b", tensorplug.Output(("n",), "x"))
    bound = head.sharding.bind(head, {"x": spec(8), "n": 8})  # globally the sizes agree
    bound.check_split({"b": 1})  # no split: nothing to compare
    with pytest.raises(ValueError) as e:
        bound.check_split({"b": 4})
    assert str(e.value) == (f"{head.name}: sharding rule 'b -> b': with 'b' split in 4, the output rule makes "
                            "output 0 (8,) on one shard, the sharding rule (2,): the two rules disagree")
    matmul = declare(mod, "matmul", "b i, i j -> b j", MATMUL_OUT)
    bound = matmul.sharding.bind(matmul, {"a": spec(7, 6), "w": spec(6, 4)})
    bound.check_split({"b": 2, "j": 2})  # uneven: the first shard, rounded up, as frameworks tile


def test_ellipsis_must_stand_for_one_number_of_dimensions(mod):
    op = declare(mod, "matmul", "... i, i j -> ... j", MATMUL_OUT)
    bound = op.sharding.bind(op, {"a": spec(8, 6), "w": spec(6, 4)})
    assert bound.inputs["a"] == ("...0", "i") and bound.outputs == (("...0", "j"),)
    elementwise = declare(mod, "scale", "... -> ...", tensorplug.Output(("x.shape[0]",), "x"))
    with pytest.raises(ValueError, match=r"'\.\.\.' stands for 2 dimensions in one term and 1 in output 0 \(8,\); "
                                         "it must stand for the same number in every term"):
        elementwise.sharding.bind(elementwise, {"x": spec(8, 6), "alpha": 1.0})


def test_torch_trace_checks_the_rule(mod):
    # torch.compile on plain tensors: the fake implementation binds the rule, naming the op.
    torch = pytest.importorskip("torch", reason="torch not installed")
    op = declare(mod, "cumsum_rows", "b [n] -> b [n]")
    x = torch.arange(6, dtype=torch.float32)
    assert torch.equal(op(x.reshape(2, 3)), torch.cumsum(x.reshape(2, 3), 1))  # eager: the kernel, unchecked
    compiled = torch.compile(lambda t: op(t), backend="aot_eager", fullgraph=True)
    assert torch.equal(compiled(x.reshape(2, 3)), torch.cumsum(x.reshape(2, 3), 1))
    # (dynamo wraps the message; the size is symbolic after a recompile)
    with pytest.raises(RuntimeError, match=rf"{op.name}: sharding rule 'b \[n\] -> b \[n\]': argument 'x' has 1 "
                                           r"dimensions \((6|s\d+),\), its term 'b n' names 2"):
        compiled(x)
