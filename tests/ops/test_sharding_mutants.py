"""The sharding rule language at the inputs that tell a right check from a slip (issue 40:
the survivors of cosmic-ray on core/tensorplug/sharding.py, docs/testing.md "Mutation
testing with a tool"). Each test asserts documented behaviour (the module's docstring and
docs/compilers.md): which rules are refused and with what message, what ``...`` stands for,
and which splits ``BoundRule.check_split`` refuses."""

from __future__ import annotations

import pytest

import tensorplug
from tensorplug import Device, TensorSpec
from tensorplug.ops import Param
from tensorplug.shapes import RuleError
from tensorplug.sharding import compile_sharding

import sharding_kernels

CPU = Device("cpu", 0)
MATMUL_OUT = tensorplug.Output(("a.shape[0]", "w.shape[1]"), "a")


@pytest.fixture(scope="module")
def mod():
    return sharding_kernels.load()


_count = iter(range(10**6))


def declare(mod, kernel, sharding, returns=tensorplug.like("x"), **kw):
    return tensorplug.op(f"tpshardmut::{kernel}_{next(_count)}", getattr(mod, kernel), returns=returns,
                         sharding=sharding, **kw)


def spec(*shape):
    return TensorSpec(shape, "float32", CPU)


def refusal(mod, kernel, sharding, returns=tensorplug.like("x")) -> str:
    with pytest.raises(ValueError) as e:
        declare(mod, kernel, sharding, returns)
    return str(e.value)


def bind_error(op, specs) -> str:
    with pytest.raises(ValueError) as e:
        op.sharding.bind(op, specs)
    return str(e.value)


# ----------------------------------------------------------------- declarations ----

def test_a_factor_marked_whole_and_plain_in_one_term_is_named_twice(mod):
    # "[b]" names factor b: in one term with "b" it is the same dimension twice.
    assert "sharding: '[b] b -> b': factor 'b' appears twice in the term '[b] b'" in refusal(mod, "scale", "[b] b -> b")


def test_a_repeated_ellipsis_is_named_as_such(mod):
    assert "sharding: '... ... -> b': '...' appears twice in the term '... ...'" in refusal(mod, "scale", "... ... -> b")


@pytest.mark.parametrize("token", ["*", "-", "(b)", ".."])
def test_every_token_that_is_not_a_factor_is_refused(mod, token):
    # also the tokens sorting before "..." (punctuation)
    assert f"{token!r} is not a factor" in refusal(mod, "scale", f"b {token} -> b")


def test_fewer_input_terms_than_tensor_parameters(mod):
    message = refusal(mod, "matmul", "b i -> b j", MATMUL_OUT)
    assert "has 1 input terms; the kernel has 2 tensor parameters (a, w), one term each" in message


def test_an_empty_term_is_a_tensor_without_dimensions(mod):
    # " -> ": one (empty) term for x and one for the result
    rule = declare(mod, "scale", " -> ").sharding
    assert rule.inputs == (("x", ()),) and rule.outputs == ((),)
    op = declare(mod, "scale", " -> ")
    bound = op.sharding.bind(op, {"x": spec(), "alpha": 1.0})
    assert bound.inputs == {"x": ()} and bound.splittable == frozenset()


def test_elementwise_with_spaces_around_it(mod):
    rule = declare(mod, "scale", " elementwise ").sharding
    assert rule.text == "elementwise" and rule.inputs == (("x", ("...",)),) and rule.outputs == (("...",),)


def test_fewer_output_terms_than_outputs():
    from tensorplug._signature import parse_signature

    params, _ = parse_signature("x:view->tensor")
    with pytest.raises(RuleError, match=r"has 1 output terms; the kernel allocates 2 tensors, one term each"):
        compile_sharding("b -> b", params, 2)


def test_the_conflict_message_names_the_first_factor_in_both_places(mod):
    message = refusal(mod, "scale", "[a] [b] -> a b")
    assert "writes factor 'a' both as [a] and as a; mark it [..] everywhere or nowhere" in message


def test_the_first_list_parameter_is_named():
    with pytest.raises(RuleError, match="parameter 'xs' is a list of tensors"):
        compile_sharding("a, b -> a", (Param("xs", "views"), Param("ys", "views")), 1)


def test_a_list_parameter_parsed_from_a_signature_is_refused():
    # kinds come from parsing the kernel's signature text (not the interned literal)
    from tensorplug._signature import parse_signature

    params, _ = parse_signature("xs:views;x:view->tensor")
    with pytest.raises(RuleError, match="parameter 'xs' is a list of tensors"):
        compile_sharding("b -> b", params, 1)


# ----------------------------------------------------------------- bound calls ----

def test_a_term_naming_fewer_dimensions_than_its_tensor(mod):
    op = declare(mod, "scale", "b -> b")
    message = bind_error(op, {"x": spec(8, 6), "alpha": 1.0})
    assert f"{op.name}: sharding rule 'b -> b': argument 'x' has 2 dimensions (8, 6), its term 'b' names 1" == message


def test_a_later_tensor_of_the_wrong_rank_is_refused(mod):
    # a's term fits; w's does not (the output rule reads w.shape[1], which a 3-d w has)
    op = declare(mod, "matmul", "b i, i j -> b j", MATMUL_OUT)
    message = bind_error(op, {"a": spec(8, 6), "w": spec(6, 4, 1)})
    assert message.endswith("argument 'w' has 3 dimensions (6, 4, 1), its term 'i j' names 2")


def test_a_tensor_with_fewer_dimensions_than_its_term_names_besides_the_ellipsis(mod):
    op = declare(mod, "scale", "... a b -> ... a b")
    message = bind_error(op, {"x": spec(4), "alpha": 1.0})
    assert message == (f"{op.name}: sharding rule '... a b -> ... a b': argument 'x' has 1 dimensions (4,), "
                       "its term '... a b' names at least 2")
    op = declare(mod, "scale", "... a b c -> ... a b c")
    assert bind_error(op, {"x": spec(4, 5), "alpha": 1.0}).endswith(
        "argument 'x' has 2 dimensions (4, 5), its term '... a b c' names at least 3")


def test_the_ellipsis_may_stand_for_no_dimension(mod):
    op = declare(mod, "scale", "... b -> ... b")
    bound = op.sharding.bind(op, {"x": spec(6), "alpha": 1.0})
    assert bound.inputs == {"x": ("b",)} and bound.outputs == (("b",),)
    assert bound.splittable == {"b"} and bound.sizes == {"b": 6}


def test_the_ellipsis_standing_for_more_dimensions_in_a_later_term(mod):
    # one dimension in x's term, two in the output's
    op = declare(mod, "scale", "... -> ...", tensorplug.Output(("x.shape[0]", "x.shape[0]"), "x"))
    message = bind_error(op, {"x": spec(8), "alpha": 1.0})
    assert "'...' stands for 1 dimensions in one term and 2 in output 0 (8, 8)" in message


def test_sizes_are_compared_by_value(mod):
    # sizes above 256 are distinct int objects in CPython, as a framework's shapes give them
    i = int("600")
    op = declare(mod, "matmul", "b i, i j -> b j", MATMUL_OUT)
    bound = op.sharding.bind(op, {"a": spec(8, i), "w": spec(int("600"), 4)})
    assert bound.sizes == {"b": 8, "i": 600, "j": 4}


class Symbolic:
    """A stand-in for a compiler's symbolic size (torch's SymInt under a trace): not an int."""

    def __repr__(self):
        return "s0"


def test_a_symbolic_size_is_skipped_and_the_other_sizes_still_compared(mod):
    op = declare(mod, "matmul", "b i, i j -> b j", MATMUL_OUT)
    message = bind_error(op, {"a": spec(Symbolic(), 6), "w": spec(5, 4)})
    assert message.endswith("dimension 'i' is 6 in argument 'a' (s0, 6) and 5 in argument 'w' (5, 4)")
    bound = op.sharding.bind(op, {"a": spec(Symbolic(), 6), "w": spec(6, 4)})
    assert bound.sizes == {"i": 6, "j": 4}


def test_a_dimension_of_the_ellipsis_is_named_by_its_position(mod):
    op = declare(mod, "matmul", "... i, ... j -> ... j", MATMUL_OUT)
    message = bind_error(op, {"a": spec(8, 6), "w": spec(6, 4)})
    assert message.endswith("dimension '... (dimension 0)' is 8 in argument 'a' (8, 6) and 6 in argument 'w' (6, 4)")


def test_the_ellipsis_expands_where_it_stands(mod):
    op = declare(mod, "scale", "b ... -> b ...")
    bound = op.sharding.bind(op, {"x": spec(8, 6, 4), "alpha": 1.0})
    assert bound.inputs == {"x": ("b", "...0", "...1")}
    assert bound.outputs == (("b", "...0", "...1"),)
    assert bound.sizes == {"b": 8, "...0": 6, "...1": 4}


def test_a_split_in_two_is_checked(mod):
    head = declare(mod, "head", "b -> b", tensorplug.Output(("n",), "x"))
    bound = head.sharding.bind(head, {"x": spec(8), "n": 8})
    with pytest.raises(ValueError, match=r"with 'b' split in 2, the output rule makes output 0 \(8,\) on one "
                                         r"shard, the sharding rule \(4,\): the two rules disagree"):
        bound.check_split({"b": 2})


def test_a_factor_not_split_stays_whole_on_each_shard(mod):
    # only b split: a's i and w's i, j stay whole, so one shard of a @ w is (4, 4)
    op = declare(mod, "matmul", "b i, i j -> b j", MATMUL_OUT)
    bound = op.sharding.bind(op, {"a": spec(8, 6), "w": spec(6, 4)})
    bound.check_split({"b": 2})
    bound.check_split({"j": 2})


def test_an_output_smaller_on_a_shard_than_the_rule_says_is_refused(mod):
    # x.shape[0] ** 2 / 8: 8 for the whole x (agrees globally), 2 for half of it (not 4)
    op = declare(mod, "scale", "b -> b", tensorplug.Output(("x.shape[0] * x.shape[0] // 8",), "x"))
    bound = op.sharding.bind(op, {"x": spec(8), "alpha": 1.0})
    with pytest.raises(ValueError, match=r"with 'b' split in 2, the output rule makes output 0 \(2,\) on one "
                                         r"shard, the sharding rule \(4,\)"):
        bound.check_split({"b": 2})


class _Symbolic:
    """A compiler's symbolic size: not an int, arithmetic gives another symbolic size."""

    def __floordiv__(self, other):
        return self

    __rfloordiv__ = __neg__ = __floordiv__


def test_a_split_of_a_factor_of_symbolic_size_is_checked_where_sizes_are_known(mod):
    # torch.compile's dynamic shapes: the row factor has no number. Splitting it is checked
    # on the other dimensions and refused with a ValueError, never a KeyError (torch's
    # sharding strategy catches ValueError only).
    op = declare(mod, "scale", "b i -> b i")
    rows = _Symbolic()
    bound = op.sharding.bind(op, {"x": spec(rows, 4), "alpha": 1.0})
    assert bound.sizes == {"i": 4}
    bound.check_split({"b": 2})  # nothing to compare on b, i is untouched: accepted
    wrong = declare(mod, "scale", "b i -> b i", tensorplug.Output(("x.shape[0]", 4), "x"))
    bound = wrong.sharding.bind(wrong, {"x": spec(rows, 4), "alpha": 1.0})
    with pytest.raises(ValueError, match="with 'i' split in 2, the output rule makes output 0"):
        bound.check_split({"i": 2})
