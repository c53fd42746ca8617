"""Numba kernels' scalar parameters accept what a C++ kernel's parameters of the same kind
accept (csrc/include/tensorplug/caster.h: a float takes a float or an int, an int an int or a
bool, a bool a bool or an int), with the same value, from every calling path: a Python call
(the Function's signature converts first), a Python call through the global registry (a C
call with no signature in front), and a C++ kernel calling it, given as an argument or
found by name (``Function::GetGlobal``).

The reference on each path is a C++ kernel of the same parameters called the same way: the
Numba kernel must accept exactly what it accepts, and store the same value.
"""

from __future__ import annotations

import functools
import itertools

import pytest

np = pytest.importorskip("numpy")
pytest.importorskip("numba", reason="numba not installed (pip install '.[test]')")

import tensorplug  # noqa: E402
from tensorplug import cpp  # noqa: E402

KINDS = {"float64": "double", "int64": "int64_t", "bool": "bool"}  # float32 reads a float as float64 does
# (a C++ caller's parameter type, a value of it), and the Python value of the same kind
VALUES = {"int": ("int64_t", 3), "negative int": ("int64_t", -7), "float": ("double", 2.5), "bool": ("bool", True)}

CALLERS = "\n".join(f"""
tp::Tensor call_{tag}(tp::Function f, tp::TensorView x, {ctype} v) {{ return f(x, v).cast<tp::Tensor>(); }}
tp::Tensor call_global_{tag}(std::string name, tp::TensorView x, {ctype} v) {{
  return tp::Function::GetGlobalRequired(name)(x, v).cast<tp::Tensor>();
}}""" for tag, ctype in {"int": "int64_t", "float": "double", "bool": "bool"}.items())

REFERENCES = "\n".join(f"""
tp::Tensor ref_{kind}(tp::TensorView x, {ctype} v) {{
  tp::Tensor out = tp::Tensor::FromEnvAlloc({{1}}, x.dtype(), x.device());
  out.mutable_data_ptr<double>()[0] = static_cast<double>(v);
  return out;
}}""" for kind, ctype in KINDS.items())

_serial = itertools.count()


@functools.cache
def _cpp():
    functions = [f"ref_{k}" for k in KINDS] + [f"call_{t}" for t in ("int", "float", "bool")] + \
        [f"call_global_{t}" for t in ("int", "float", "bool")]
    return cpp.load_inline("numba_kinds_reference", "namespace tp = tensorplug;\n" + REFERENCES + CALLERS,
                           functions=functions)


@functools.cache
def _numba(kind: str):
    import tensorplug.numba

    @tensorplug.numba.kernel({"x": "float64[:]", "v": kind}, returns=tensorplug.like("x"), name=f"numba_{kind}")
    def store(x, v, out):
        out[0] = v

    return store


def _call(path: str, function, value_name: str):
    ctype, value = VALUES[value_name]
    tag = {"int64_t": "int", "double": "float", "bool": "bool"}[ctype]
    x = np.zeros(1, np.float64)
    if path == "python":
        return function(x, value)
    if path == "c++ argument":
        return getattr(_cpp(), f"call_{tag}")(function, x, value)
    name = f"test_numba_kinds.f{next(_serial)}"
    tensorplug.register_global_func(name, function, override=True)
    try:
        if path == "python, through the registry":
            return tensorplug.get_global_func(name)(x, value)
        return getattr(_cpp(), f"call_global_{tag}")(name, x, value)
    finally:
        tensorplug.remove_global_func(name)


def _outcome(path, function, value_name):
    try:
        return ("value", float(np.asarray(_call(path, function, value_name))[0]))
    except TypeError:
        return ("TypeError", None)


PATHS = ["python", "python, through the registry", "c++ argument", "c++ by name"]


# A live gap, reported (issue 40; core/tensorplug/numba.py accepts only kTPInt for an int64
# parameter and only kTPBool for a bool one): from a C++ caller, an int64 parameter refuses
# a bool and a bool parameter an int, which C++ kernels accept. Strict: fixed, these fail.
CASES = [pytest.param(kind, path) for kind in KINDS for path in PATHS]


@pytest.mark.parametrize("kind, path", CASES)
def test_numba_kinds_accept_what_cpp_kinds_accept(path, kind):
    got = {v: _outcome(path, _numba(kind), v) for v in VALUES}
    expected = {v: _outcome(path, getattr(_cpp(), f"ref_{kind}"), v) for v in VALUES}
    assert got == expected


def test_the_documented_cpp_kinds():
    # The reference itself, as caster.h documents it (through a C++ caller, no Python conversion).
    def accepted(kind):
        return {v for v in VALUES if _outcome("c++ argument", getattr(_cpp(), f"ref_{kind}"), v)[0] == "value"}
    assert accepted("float64") == {"int", "negative int", "float"}
    assert accepted("int64") == {"int", "negative int", "bool"}
    assert accepted("bool") == {"int", "negative int", "bool"}


@pytest.mark.parametrize("path", ["c++ argument", "c++ by name", "python, through the registry"])
def test_a_float64_parameter_takes_an_integer_from_a_c_caller(path):
    # the row of issue 40: a C++ kernel (or the registry) passes an int64 for a float64
    assert _outcome(path, _numba("float64"), "int") == ("value", 3.0)
    assert _outcome(path, _numba("float64"), "negative int") == ("value", -7.0)
