"""The call plan (tensorplug/plan.h, tensorplug.plans): the Python encoding against the C
header's enumerations, and plans refused or made from ops' declarations."""

import re
from pathlib import Path

import pytest

import tensorplug
from tensorplug import plans

HEADER = Path(__file__).resolve().parents[2] / "csrc" / "include" / "tensorplug" / "plan.h"


def _enum(name: str) -> dict[str, int]:
    """The members of C enum `name` in plan.h, as {member: value}."""
    text = HEADER.read_text()
    body = re.search(r"typedef enum \{([^}]*)\}\s*" + name + ";", text)
    assert body, f"plan.h has no enum {name}"
    return {m: int(v) for m, v in re.findall(r"(kTP\w+)\s*=\s*(\d+)", body.group(1))}


def _snake(camel: str) -> str:
    """ListDim -> list_dim, FloorDiv -> floor_div, DType -> dtype."""
    return re.sub(r"(?<!^)(?=[A-Z])", "_", camel.replace("DType", "Dtype")).lower()


def test_rule_ops_match_the_header():
    header = {_snake(m.removeprefix("kTPRule")): v for m, v in _enum("TPRuleOp").items()}
    assert header == plans.RULE_OPS


def test_rule_sources_match_the_header():
    header = {_snake(m.removeprefix("kTPFrom")): v for m, v in _enum("TPRuleFrom").items()}
    assert header == plans.RULE_FROM


def test_param_kinds_match_the_header():
    header = {_snake(m.removeprefix("kTPParam")): v for m, v in _enum("TPParamKind").items()}
    # Python has one more name: an mview is a view the function writes (the plan's `written`).
    assert header == {k: v for k, v in plans.PARAM_KINDS.items() if k != "mview"}
    assert plans.PARAM_KINDS["mview"] == header["view"]
    # Every signature kind the plan passes is one of the core's kinds.
    assert set(plans.PARAM_KINDS) <= set(tensorplug._core.VOCABULARY["param_kinds"])


@pytest.fixture(scope="module")
def lib():
    import op_kernels

    return op_kernels.ops().module


def _op(lib, name, fn, returns, **kw):
    return tensorplug.op(f"tpplans::{name}", getattr(lib, fn), returns=returns, **kw)


def test_make_compiles_every_operator_in_operand_order(lib):
    op = _op(lib, "rows", "row_sum", tensorplug.Output(("(x.shape[0] - 1) // 2 % 5 * 3 + -x.shape[1]",), "x"))
    (rule,) = plans.compile_outputs(op)
    shape_from, _, (dim,), *_ = rule
    assert shape_from == plans.RULE_FROM["dims"]
    ops = plans.RULE_OPS
    # x.shape[0] - 1: the left operand pushed first, `sub` after both.
    assert dim[:3] == [(ops["dim"], 0, 0), (ops["const"], 1), (ops["sub"],)]
    assert [step[0] for step in dim[3:]] == [ops["const"], ops["floor_div"], ops["const"], ops["mod"],
                                             ops["const"], ops["mul"], ops["dim"], ops["neg"], ops["add"]]
    capsule = plans.make(op)
    assert type(capsule).__name__ == "PyCapsule"


def test_python_shape_function_is_not_compilable(lib):
    op = _op(lib, "rows_fn", "row_sum", lambda x: tensorplug.TensorSpec((x.shape[0],), x.dtype))
    with pytest.raises(plans.NotCompilable, match="is a Python shape function"):
        plans.make(op)
    # Without rules the plan declares the result count alone (the XLA handler's form).
    assert type(plans.make(op, rules=False)).__name__ == "PyCapsule"


@pytest.mark.parametrize("outputs, message", [
    ([(2, -1, [[(6,)]], 5, -1, "float32", 6, -1, 0, 0)], "output 0 dimension 0 step 0 needs two operands"),
    ([(2, -1, [[(0, 1), (0, 2)]], 5, -1, "float32", 6, -1, 0, 0)], "output 0 dimension 0 leaves 2 values"),
    ([(2, -1, [[(1, 0)]], 5, -1, "float32", 6, -1, 0, 0)], "reads parameter 'x', which is not an int"),
    ([(2, -1, [[(2, 7, 0)]], 5, -1, "float32", 6, -1, 0, 0)], "names parameter 7 of 1"),
    ([(2, -1, [[(42,)]], 5, -1, "float32", 6, -1, 0, 0)], "has unknown op 42"),
    ([(0, 0, [], 4, 0, "", 6, -1, 0, 0)], "output 0 dtype reads parameter 'x', which is not a dtype"),
    ([(9, 0, [], 5, -1, "float32", 6, -1, 0, 0)], "takes its shape from source 9"),
    ([(2, -1, [[(0, 1)] * 40 + [(6,)] * 39], 5, -1, "float32", 6, -1, 0, 0)], "is deeper than 32"),
])
def test_bad_programs_are_refused_when_the_plan_is_made(lib, outputs, message):
    # A plan checks every fact once, when it is made: a per-call evaluator then never meets
    # a program that underflows, overflows or reads a parameter of another kind.
    with pytest.raises(ValueError, match=re.escape(message)):
        tensorplug._core.plan_create("tpplans::bad", lib.row_sum, [("x", 0, False, False)], 1, outputs)


def test_bad_params_are_refused(lib):
    with pytest.raises(ValueError, match="parameter 'x' has unknown kind 12"):
        tensorplug._core.plan_create("tpplans::bad", lib.row_sum, [("x", 12, False, False)], 0, [])
    with pytest.raises(ValueError, match="parameter 'n' is written, but is not a view or a list of views"):
        tensorplug._core.plan_create("tpplans::bad", lib.row_sum, [("n", 2, False, True)], 0, [])
    with pytest.raises(TypeError, match="expected a tensorplug.Function"):
        tensorplug._core.plan_create("tpplans::bad", len, [], 0, [])
    with pytest.raises(ValueError, match="1 output rules for 2 outputs"):
        tensorplug._core.plan_create("tpplans::bad", lib.row_sum, [("x", 0, False, False)], 2,
                                     [(0, 0, [], 0, 0, "", 6, -1, 0, 0)])
