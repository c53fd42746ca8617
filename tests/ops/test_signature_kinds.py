"""The signature kinds have one home (issue 41 item 4a): tensorplug._signature names every
set of kinds the core tests membership in, tensorplug.ops re-exports them for adapters, and
the sets gradients use where they differ from an op's are derived there, not kept apart."""

from __future__ import annotations

import ast
from pathlib import Path

import tensorplug
from tensorplug import _core, _signature, gradients, ops

SETS = ("PARAM_KINDS", "TENSOR_KINDS", "WRITTEN_KINDS", "SCALAR_KINDS", "LIST_KINDS", "TENSOR_LIST_KINDS",
        "UNTRACEABLE_KINDS", "RESULT_KINDS")


def test_ops_re_exports_the_sets_and_the_grammar():
    for name in SETS:
        assert getattr(ops, name) is getattr(_signature, name), name
        assert name in ops.__all__, name
    assert ops.Param is _signature.Param and ops.parse_signature is _signature.parse_signature


def test_the_gradient_sets_are_the_op_sets_with_their_differences():
    assert _signature.GRADIENT_TENSOR_KINDS == _signature.TENSOR_KINDS - _signature.WRITTEN_KINDS
    assert _signature.SAVABLE_KINDS == _signature.GRADIENT_TENSOR_KINDS | _signature.SCALAR_KINDS | {"ints"}
    assert _signature.SAVABLE_KINDS <= set(_core.VOCABULARY["param_kinds"])
    assert _signature.TENSOR_LIST_KINDS <= set(_core.VOCABULARY["param_kinds"])


def test_no_other_core_module_defines_a_kind_set():
    # A module-level "<NAME>_KINDS = frozenset(...)" is a kind set: only _signature.py makes one (a
    # mapping from another vocabulary to the kinds, as tvm_ffi's, is a table, not a set).
    root = Path(tensorplug.__file__).parent
    owners = []
    for path in sorted(root.rglob("*.py")):
        for node in ast.parse(path.read_text()).body:
            targets = node.targets if isinstance(node, ast.Assign) else [node.target] if isinstance(
                node, ast.AnnAssign) else []
            for target in targets:
                if isinstance(target, ast.Name) and target.id.endswith("_KINDS") and isinstance(node.value, ast.Call):
                    owners.append(f"{path.relative_to(root)}: {target.id}")
    assert all(owner.startswith("_signature.py:") for owner in owners), owners
    assert not [name for name in vars(gradients) if name.endswith("_KINDS") and not hasattr(_signature, name)]


def test_split_is_the_grammar_every_reader_uses():
    assert _signature.split("x:view;n:?int=3;h:handle<mylib.Plan>->tensor") == (
        [("x", "view"), ("n", "?int=3"), ("h", "handle<mylib.Plan>")], "tensor")
    params, result = _signature.parse_signature("x:mview;n:?int->void")
    assert params == (ops.Param("x", "mview", False, True), ops.Param("n", "int", True, False)) and result == "void"
