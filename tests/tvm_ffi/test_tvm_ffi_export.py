"""tensorplug kernel libraries that also export apache tvm-ffi's calling convention (issue 42 item
7): ``tensorplug.cpp.build(..., export_tvm_ffi=True)`` adds ``__tvm_ffi_<name>`` beside each
``__tensorplug_<name>``, and the real ``tvm_ffi.load_module`` calls the library: tensors in as
views, written tensors, tvm-ffi's allocator serving ``Tensor::FromEnvAlloc``, scalars, strings,
None, and errors that keep their kind and message. The library still loads in tensorplug as
one of its own.
"""

from __future__ import annotations

import builtins

import pytest

np = pytest.importorskip("numpy", reason="numpy not installed")
tvm_ffi = pytest.importorskip("tvm_ffi", reason="apache-tvm-ffi not installed (pip install \"tensorplug[tvm-ffi]\")")

import tensorplug  # noqa: E402
from tensorplug import cpp  # noqa: E402
from tensorplug.tvm_ffi import exported_functions  # noqa: E402
from tensorplug.tvm_ffi.export import exported_names  # noqa: E402

SOURCE = r"""
#include <tensorplug/tensorplug.h>
#include <optional>
#include <string>
#include <tuple>
namespace tp = tensorplug;

// x + 1, allocated through the caller's allocator (float32).
tp::Tensor AddOne(tp::TensorView x) {
  TENSORPLUG_CHECK(x.dtype() == tp::kFloat32, TypeError) << "add_one: float32 only, got " << x.dtype();
  tp::Tensor out = tp::Tensor::FromEnvAlloc(x.shape(), x.dtype(), x.device());
  const float* a = x.data_ptr<float>();
  float* o = out.mutable_data_ptr<float>();
  for (int64_t i = 0; i < x.numel(); ++i) o[i] = a[i] + 1;
  return out;
}
// out = alpha * x, written in place.
void Scale(tp::TensorView x, tp::MutableView out, double alpha) {
  TENSORPLUG_CHECK(x.numel() == out.numel(), ValueError) << "scale: x and out differ in size";
  const float* a = x.data_ptr<float>();
  float* o = out.mutable_data_ptr<float>();
  for (int64_t i = 0; i < x.numel(); ++i) o[i] = float(alpha) * a[i];
}
int64_t Count(tp::TensorView x, int64_t extra, bool twice) { return (x.numel() + extra) * (twice ? 2 : 1); }
double Half(double v) { return v / 2; }
bool IsEven(int64_t n) { return n % 2 == 0; }
std::string Greet(std::string who) { return "hello " + who; }
int64_t Maybe(std::optional<tp::TensorView> x) { return x ? x->numel() : -1; }
tp::Tensor Identity(tp::Tensor x) { return x; }
void Fail(std::string kind, std::string message) { throw tp::Error(kind, message); }
std::tuple<int64_t, int64_t> Pair(int64_t n) { return {n, n + 1}; }
// The allocator bound for tensorplug during the call (0: none).
int64_t BoundAllocator(tp::TensorView x) { return int64_t(reinterpret_cast<intptr_t>(TPEnvGetAllocator())); }
int64_t Total(tp::IntArrayView values) { int64_t t = 0; for (int64_t v : values) t += v; return t; }
TENSORPLUG_EXPORT(add_one, AddOne, "x");
TENSORPLUG_EXPORT(scale, Scale, "x", "out", "alpha");
TENSORPLUG_EXPORT(count, Count, "x", "extra", "twice");
TENSORPLUG_EXPORT(half, Half, "v");
TENSORPLUG_EXPORT(is_even, IsEven, "n");
TENSORPLUG_EXPORT(greet, Greet, "who");
TENSORPLUG_EXPORT(maybe, Maybe, "x");
TENSORPLUG_EXPORT(identity, Identity, "x");
TENSORPLUG_EXPORT(fail, Fail, "kind", "message");
TENSORPLUG_EXPORT(pair, Pair, "n");
TENSORPLUG_EXPORT(total, Total, "values");
TENSORPLUG_EXPORT(bound_allocator, BoundAllocator, "x");
"""
FUNCTIONS = ["add_one", "bound_allocator", "count", "fail", "greet", "half", "identity", "is_even", "maybe", "pair", "scale", "total"]


@pytest.fixture(scope="module")
def library(tmp_path_factory):
    directory = tmp_path_factory.mktemp("tvm_ffi_export")
    source = directory / "kernels.cc"
    source.write_text(SOURCE)
    return cpp.build("tp_tvm_ffi_export", [source], export_tvm_ffi=True, build_directory=directory / "build")


@pytest.fixture(scope="module")
def mod(library):
    return tvm_ffi.load_module(library)


def test_the_library_exports_both_conventions(library):
    tvm, own = exported_functions(library)
    assert sorted(tvm) == sorted(own) == FUNCTIONS
    # still a library of tensorplug's own ABI for tensorplug
    mine = tensorplug.load_module(library)
    assert mine.scale.signature_text == "x:view;out:mview;alpha:float->void"
    np.testing.assert_array_equal(mine.add_one(np.zeros(3, np.float32)), [1, 1, 1])


def test_torch_tensors_through_tvm_ffi(mod):
    torch = pytest.importorskip("torch", reason="torch not installed")
    x = torch.arange(4, dtype=torch.float32)
    y = mod.add_one(x)  # FromEnvAlloc: tvm-ffi's allocator for a torch caller, bound as tensorplug's
    assert type(y) is torch.Tensor
    torch.testing.assert_close(y, x + 1)
    out = torch.zeros(4)
    assert mod.scale(x, out, 2.5) is None
    torch.testing.assert_close(out, x * 2.5)  # written in place: the caller's memory
    strided = torch.arange(8, dtype=torch.float32)[::2]
    assert mod.count(strided, 1, True) == 10


def test_tvm_ffis_allocator_is_bound_for_the_call(mod, library):
    torch = pytest.importorskip("torch", reason="torch not installed")
    through_tvm_ffi = mod.bound_allocator(torch.zeros(2))
    # tvm-ffi's allocator for a torch caller is torch's DLPack allocator, the one tensorplug binds for torch
    assert through_tvm_ffi != 0
    assert through_tvm_ffi == tensorplug.load_module(library).bound_allocator(torch.zeros(2))
    # none set by tvm-ffi (a tvm-ffi tensor from numpy): none bound, and nothing left bound after a call
    assert mod.bound_allocator(tvm_ffi.from_dlpack(np.zeros(2, np.float32))) == 0


def test_tvm_ffi_tensors_and_results(mod):
    x = tvm_ffi.from_dlpack(np.arange(3, dtype=np.float32))
    y = mod.add_one(x)
    assert isinstance(y, tvm_ffi.Tensor)
    np.testing.assert_array_equal(np.from_dlpack(y), [1, 2, 3])
    same = mod.identity(x)  # an owning tensor parameter and result: the same memory back
    assert isinstance(same, tvm_ffi.Tensor)
    assert np.from_dlpack(same).ctypes.data == np.from_dlpack(x).ctypes.data


def test_scalars_strings_and_none(mod):
    x = tvm_ffi.from_dlpack(np.zeros((2, 3), np.float32))
    assert mod.count(x, 4, False) == 10 and type(mod.count(x, 4, False)) is int
    assert mod.half(3.0) == 1.5 and mod.half(3) == 1.5  # an int for a float parameter
    assert mod.is_even(4) is True and mod.is_even(3) is False
    assert mod.greet("you") == "hello you"  # a small string (inline in the value)
    assert mod.greet("a string longer than seven bytes, ü") == "hello a string longer than seven bytes, ü"
    assert mod.maybe(None) == -1 and mod.maybe(x) == 6


def test_errors_keep_kind_and_message(mod):
    torch = pytest.importorskip("torch", reason="torch not installed")
    with pytest.raises(ValueError, match=r"^scale: x and out differ in size"):
        mod.scale(torch.zeros(4), torch.zeros(3), 1.0)
    # the kinds tvm-ffi's Python maps to exceptions of their name (it raises others as RuntimeError)
    for kind in ("ValueError", "TypeError", "KeyError", "IndexError", "AttributeError"):
        with pytest.raises(getattr(builtins, kind)) as info:
            mod.fail(kind, f"{kind} from a tensorplug kernel")
        assert type(info.value).__name__ == kind
        assert f"{kind} from a tensorplug kernel" in str(info.value)
    with pytest.raises(TypeError, match=r"add_one.*float32 only"):
        mod.add_one(torch.zeros(2, dtype=torch.float64))
    with pytest.raises(TypeError, match=r"count\(\) argument 1: expected a tensor, got str"):
        mod.count("no", 1, True)


def test_what_the_convention_cannot_carry_is_a_clear_error(mod):
    with pytest.raises(TypeError, match=r"pair\(\) returns a value tvm-ffi's calling convention cannot carry here"):
        mod.pair(3)
    with pytest.raises(TypeError, match=r"total\(\) argument 1: a parameter of kind 'ints' cannot be passed"):
        mod.total((1, 2))


def test_load_inline_exports_too(tmp_path):
    mod = cpp.load_inline("tp_tvm_ffi_export_inline", "int64_t Twice(int64_t n) { return 2 * n; }",
                          functions=["Twice"], export_tvm_ffi=True, build_directory=tmp_path)
    assert mod.Twice(4) == 8
    assert tvm_ffi.load_module(mod.path).Twice(21) == 42


def test_functions_exported_another_way_are_found_in_the_library(tmp_path):
    # The export line's name is a macro parameter: read from the sources it is wrong ('n'),
    # so the library is built again with the names its symbol table has.
    source = tmp_path / "other.cc"
    source.write_text("#include <tensorplug/tensorplug.h>\n"
                      "#define EXPORT_INT(n, f) TENSORPLUG_EXPORT(n, f, \"v\")\n"
                      "int64_t Inc(int64_t v) { return v + 1; }\nEXPORT_INT(inc, Inc);\n")
    assert exported_names([source]) == ["n"]
    path = cpp.build("tp_tvm_ffi_export_other", [source], export_tvm_ffi=True, build_directory=tmp_path / "b")
    assert exported_functions(path) == (("inc",), ("inc",))
    assert tvm_ffi.load_module(path).inc(1) == 2
