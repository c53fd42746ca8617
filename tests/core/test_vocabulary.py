"""One source per vocabulary: device types, dtypes, error kinds and signature kinds are
listed once (csrc/include/tensorplug/vocabulary.h; the error kinds in c_api.h), and every
other layer is generated from or checked against that list here. A test fails when a copy
drifts or a new copy appears."""

from __future__ import annotations

import builtins
import re
from pathlib import Path

import pytest

import tensorplug
from tensorplug import _core, _signature, _types

ROOT = Path(__file__).resolve().parents[2]
HEADERS = ROOT / "csrc" / "include" / "tensorplug"
VOCAB_H = (HEADERS / "vocabulary.h").read_text()
C_API_H = (HEADERS / "c_api.h").read_text()


def x_macro(text: str, name: str) -> list[tuple[str, ...]]:
    """The entries of `#define NAME(X) X(a, b) ...` as tuples of stripped, unquoted strings."""
    match = re.search(rf"#define {name}\(X\)((?:.*\\\n)*.*)", text)
    assert match, f"{name} not found"
    body = re.sub(r"/\*.*?\*/", "", match.group(1).replace("\\\n", " "))
    return [tuple(a.strip().strip('"') for a in args.split(",")) for args in re.findall(r"X\(([^)]*)\)", body)]


def dlpack_codes() -> dict[str, int]:
    text = (HEADERS / "dlpack.h").read_text()
    return {name: int(value) for name, value in re.findall(r"\b(kDL\w+) = (\d+)", text)}


def test_every_list_reaches_python_unchanged():
    codes = dlpack_codes()
    vocab = _core.VOCABULARY
    assert vocab["device_types"] == tuple((name, codes[c]) for c, name in x_macro(VOCAB_H, "TP_DEVICE_TYPES"))
    assert vocab["device_aliases"] == tuple((name, codes[c]) for c, name in x_macro(VOCAB_H, "TP_DEVICE_ALIASES"))
    assert vocab["dtypes"] == tuple((n, codes[c], int(b)) for n, c, b in x_macro(VOCAB_H, "TP_DTYPES"))
    assert vocab["dtype_aliases"] == tuple((n, codes[c], int(b)) for n, c, b in x_macro(VOCAB_H, "TP_DTYPE_ALIASES"))
    assert vocab["dtype_codes"] == tuple((codes[c], s, z == "1") for c, s, z in x_macro(VOCAB_H, "TP_DTYPE_CODES"))
    assert vocab["param_kinds"] == tuple(n for _, n in x_macro(VOCAB_H, "TP_PARAM_KINDS"))
    assert vocab["result_kinds"] == tuple(n for _, n in x_macro(VOCAB_H, "TP_RESULT_KINDS"))
    assert vocab["error_kinds"] == tuple(n for (n,) in x_macro(C_API_H, "TP_ERROR_KINDS"))
    assert "cuda" in dict(vocab["device_types"]) and "ZeroDivisionError" in vocab["error_kinds"]


def test_python_layer_reads_the_lists():
    vocab = _core.VOCABULARY
    assert _types.DEVICE_TYPES == dict(vocab["device_types"])
    assert _types.DEVICE_ALIASES == {"gpu": "cuda"}
    assert _types.DTYPE_NAMES == tuple(n for n, _, _ in vocab["dtypes"])
    assert _types.ERROR_KINDS is vocab["error_kinds"]
    # inspect.Signature annotations exist for every signature kind, and for nothing else.
    assert set(_signature._ANNOTATIONS) == set(vocab["param_kinds"]) | set(vocab["result_kinds"])


def test_conformance_kit_reads_the_lists():
    from tensorplug.testing import DTYPES, conformance

    assert conformance.ERROR_KINDS is _core.VOCABULARY["error_kinds"]
    # The kit certifies a subset of the dtypes (those frameworks commonly have).
    assert set(DTYPES) <= set(_types.DTYPE_NAMES), set(DTYPES) - set(_types.DTYPE_NAMES)


def test_cpp_layers_use_only_listed_kinds():
    headers = "\n".join(p.read_text() for p in sorted(HEADERS.glob("*.h")))
    params, results = set(_core.VOCABULARY["param_kinds"]), set(_core.VOCABULARY["result_kinds"])
    arg_kinds = set(re.findall(r'ArgKind\(\) \{ return "(\w+)"; \}', headers))
    result_kinds = set(re.findall(r'ResultKind\(\) \{ return "(\w+)"; \}', headers))
    assert arg_kinds and arg_kinds <= params, arg_kinds - params
    assert result_kinds and result_kinds <= results, result_kinds - results
    # The signature grammar in c_api.h names every kind.
    grammar = C_API_H[C_API_H.index(" * Parameter kinds:"):C_API_H.index("arguments (tensors are passed as views)")]
    for kind in params | results:
        assert re.search(rf"\b{kind}\b", grammar), f"c_api.h's signature grammar does not name '{kind}'"
    # Error kinds thrown by the C++ headers and set by the runtime are listed (InternalError
    # is deliberately not: it reaches Python as RuntimeError, naming the broken invariant).
    sources = headers + "".join(p.read_text() for p in (ROOT / "csrc" / "runtime").glob("*.cc"))
    used = set(re.findall(r"TENSORPLUG_THROW\((\w+Error)\)", sources))
    used |= set(re.findall(r'"(\w+Error)"', sources)) - {"InternalError", "KernelSpecificError"}
    assert used <= set(_types.ERROR_KINDS), used - set(_types.ERROR_KINDS)


@pytest.mark.parametrize("kind", _core.VOCABULARY["error_kinds"])
def test_every_error_kind_names_a_python_exception(kind):
    assert issubclass(getattr(builtins, kind), BaseException)


# Literals that belong to one list only: seeing one elsewhere in the sources means a copy
# (the error kinds are X(Name) entries in c_api.h: quoted, they appear nowhere).
SINGLE_SOURCE_LITERALS = {
    '"cuda_host"': ["vocabulary.h"],
    '"cuda_managed"': ["vocabulary.h"],
    '"uint32"': ["vocabulary.h"],
    '"float8_e5m2"': ["vocabulary.h"],
    '"cdouble"': ["vocabulary.h"],
    # One use of the kind, not a list: a call plan's output rule divides by zero with the
    # error Python's own evaluation of the rule raises.
    '"ZeroDivisionError"': ["plan.cc"],
    '"AssertionError"': [],
}


@pytest.mark.parametrize("literal", sorted(SINGLE_SOURCE_LITERALS))
def test_no_second_copy_of_a_list(literal):
    files = [p for pattern in ("csrc/**/*.h", "csrc/**/*.cc", "core/tensorplug/**/*.py") for p in ROOT.glob(pattern)]
    holders = sorted(p.name for p in files if literal in p.read_text() or literal.replace('"', "'") in p.read_text())
    assert holders == SINGLE_SOURCE_LITERALS[literal], f"{literal} is listed in {holders}"


def test_device_names_round_trip():
    for name, code in _types.DEVICE_TYPES.items():
        device = tensorplug.Device(name, 3)
        assert device.dlpack == (code, 3)
        assert _types.as_device((code, 3)) == device
        assert _types.as_device(f"{name}:3") == device
    assert _types.as_device("gpu:1") == tensorplug.Device("cuda", 1)


def test_dtype_names_round_trip():
    for name in _types.DTYPE_NAMES:
        assert tensorplug.empty((2,), name).dtype == name
    for alias, code, bits in _core.VOCABULARY["dtype_aliases"]:
        canonical = next(n for n, c, b in _core.VOCABULARY["dtypes"] if (c, b) == (code, bits))
        assert tensorplug.empty((1,), alias).dtype == canonical


@pytest.mark.parametrize(("shape", "strides"), [
    ((2, 3), (3, 1)),
    ((2, 0, 3), (3, 3, 1)),  # a size-0 dim counts as 1: strides stay >= 1
    ((0,), (1,)),
    ((4, 1, 5), (5, 5, 1)),  # a size-1 dim too
    ((), ()),
])
def test_one_contiguous_strides_rule(shape, strides):
    assert tensorplug.empty(shape, "float32").strides == strides
