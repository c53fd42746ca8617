"""The output rule's compiled form (tensorplug.plans.compile_outputs) at the rules that tell
a right encoding from a slip (issue 40: the survivors of cosmic-ray on
core/tensorplug/plans.py, docs/testing.md "Mutation testing with a tool"): where each
output's shape, dtype and device come from (plan.h's TPRuleFrom, the parameter's index),
DLPack's device codes for a fixed device, negative indices, and an op without results."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

import tensorplug
from tensorplug import Output, like, plans
from tensorplug._signature import parse_signature

FROM = plans.RULE_FROM
OPS = plans.RULE_OPS


@pytest.fixture(scope="module")
def kernels():
    import op_kernels

    return op_kernels.ops()


_count = iter(range(10**6))


def _op(kernels, fn, returns):
    return tensorplug.op(f"tpplansmut::{fn}_{next(_count)}", getattr(kernels.module, fn), returns=returns)


def test_shape_dtype_and_device_from_a_tensor_argument(kernels):
    (rule,) = plans.compile_outputs(_op(kernels, "scale", like("x")))
    shape_from, shape_param, dims, dtype_from, dtype_param, _, device_from, device_param, _, _ = rule
    assert (shape_from, shape_param, dims) == (FROM["tensor"], 0, ())
    assert (dtype_from, dtype_param) == (FROM["tensor"], 0)
    assert (device_from, device_param) == (FROM["tensor"], 0)
    # without a device: the primary tensor's
    (rule,) = plans.compile_outputs(_op(kernels, "row_sum", Output(("x.shape[0]",), "x")))
    assert rule[6:] == (FROM["primary"], -1, 0, 0)


def test_shape_from_an_int_list_argument():
    # an op-like declaration: Output(shape="sizes") takes the shape from the int list `sizes`
    params, _ = parse_signature("x:view;sizes:ints->tensor")
    op = SimpleNamespace(n_outputs=1, returns=Output(shape="sizes", dtype="x"), params=params)
    (rule,) = plans.compile_outputs(op)
    assert rule[:3] == (FROM["ints"], 1, ())


def test_device_from_a_device_argument(kernels):
    # arange(n, dtype, device): Output(shape=("n",), dtype="dtype", device="device")
    (rule,) = plans.compile_outputs(kernels.arange)
    assert rule[3:5] == (FROM["dtype"], 1)
    assert rule[6:] == (FROM["device"], 2, 0, 0)
    assert type(plans.make(kernels.arange)).__name__ == "PyCapsule"


@pytest.mark.parametrize("device, code, index", [("cpu", 1, 0), ("cuda", 2, 0), ("cuda:1", 2, 1)])
def test_a_fixed_device_has_dlpacks_code_and_its_index(kernels, device, code, index):
    (rule,) = plans.compile_outputs(_op(kernels, "row_sum", Output(("x.shape[0]",), "x", device=device)))
    assert rule[6] == FROM["fixed"] and rule[8:] == (code, index)


def test_a_negative_index_is_kept(kernels):
    (rule,) = plans.compile_outputs(_op(kernels, "row_sum", Output(("x.shape[-1]",), "x")))
    assert rule[2] == [[(OPS["dim"], 0, -1)]]


def test_an_op_without_results_has_no_output_rules(kernels):
    # axpy writes `out` and returns nothing
    assert kernels.axpy.n_outputs == 0
    assert plans.compile_outputs(kernels.axpy) == []
    assert type(plans.make(kernels.axpy)).__name__ == "PyCapsule"


def test_rules_is_a_keyword(kernels):
    with pytest.raises(TypeError):
        plans.make(kernels.arange, False)


def test_list_steps_name_their_argument_and_indices():
    params, _ = parse_signature("x:view;xs:views;sizes:ints->tensor")
    op = SimpleNamespace(n_outputs=1, params=params,
                         returns=Output(shape=("len(xs)", "xs[1].shape[0]", "sizes[-1]"), dtype="x"))
    (rule,) = plans.compile_outputs(op)
    assert rule[2] == [[(OPS["len"], 1)], [(OPS["list_dim"], 1, 1, 0)], [(OPS["item"], 2, -1)]]
