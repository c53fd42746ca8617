"""The tvm-ffi compatibility layer (docs/migration.md).

Kernels written in the style of libraries built on apache tvm-ffi's C++ API
(tests/support/compat_kernels/*.cc) compile against tensorplug with only an include-path change and
give the same results as their native twins (*_native.cc) from numpy, torch, jax and paddle.
Where apache-tvm-ffi itself is installed, the same sources are also built by it and compared
from torch, which shows that they are unchanged sources of that project.

Over 500 lines: one place for the layer's tests (kernel pairs, the names one by one, the
ways to build), all sharing the kernels the module fixture builds once.
"""

from __future__ import annotations

import functools
import inspect
import re
import shutil
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

import tensorplug
from tensorplug import cpp

np = pytest.importorskip("numpy", reason="numpy not installed")

ROOT = Path(__file__).resolve().parents[2]
KERNELS = ROOT / "tests" / "support" / "compat_kernels"
# Kernel pairs: <name>.cc (the other project's API) and <name>_native.cc (tensorplug's).
PAIRS = ["add_one", "scale", "sum_dim", "square", "axpy", "minmax", "activate"]
LIST_PAIRS = ["plan_run", "sum_list"]  # Array<T> parameters: tensorplug's list argument kinds
FRAMEWORKS = ["numpy", "torch", "jax", "paddle"]


def _build(name: str, compat: bool):
    source = KERNELS / (f"{name}.cc" if compat else f"{name}_native.cc")
    include_dirs = [cpp.compat_include_dir()] if compat else []
    # -O0: these kernels are checked for values, not speed, and build twice as fast.
    path = cpp.build(f"{name}_{'compat' if compat else 'native'}", [source], include_dirs=include_dirs,
                     extra_cflags=["-O0"])
    return tensorplug.load_module(path)


@pytest.fixture(scope="module")
def mods():
    """{(name, "compat" | "native"): Module} for PAIRS and api_checks, built two at a time."""
    jobs = [(name, kind) for name in PAIRS for kind in ("compat", "native")] + [("api_checks", "compat")]
    with ThreadPoolExecutor(2) as pool:
        built = pool.map(lambda job: _build(job[0], job[1] == "compat"), jobs)
        return dict(zip(jobs, built))


@pytest.fixture(scope="module")
def api(mods):
    return mods["api_checks", "compat"]


def _pair(mods, name):
    return mods[name, "compat"], mods[name, "native"]


@pytest.fixture(params=FRAMEWORKS)
def fw(request):
    """The tensorplug.testing Framework of one framework (skips when it is not installed)."""
    framework = request.config.hook.pytest_tensorplug_framework(name=request.param)
    reason = framework.missing()
    if reason:
        pytest.skip(reason)
    return framework


def _out(fw, array):
    """A writable output tensor: the framework's own, or numpy's where the framework's tensors
    enter kernels read-only (jax: its arrays are immutable)."""
    return array.copy() if fw.read_only else fw.from_numpy(array)


def _np(fw, x):
    return x.copy() if isinstance(x, np.ndarray) else fw.to_numpy(x)


# ------------------------------------------------------------- the sources ----
@pytest.mark.parametrize("name", PAIRS + LIST_PAIRS + ["api_checks", "own_device_ops_compat"])
def test_sources_use_only_the_other_projects_api(name):
    text = (KERNELS / f"{name}.cc").read_text()
    assert "tensorplug" not in text.lower()
    includes = re.findall(r"#include\s*[<\"]([^>\"]+)[>\"]", text)
    assert includes and all(i.startswith(("tvm/ffi/", "dlpack/")) or "/" not in i for i in includes), includes


def test_without_the_compat_include_dir_the_sources_do_not_compile(tmp_path):
    with pytest.raises(cpp.BuildError, match=r"tvm/ffi/container/tensor\.h"):
        cpp.build("add_one_no_compat", [KERNELS / "add_one.cc"], build_directory=tmp_path)


# ------------------------------------------------- compat against native twins ----
def test_signatures_match_the_native_twins(mods):
    for name in PAIRS:
        compat, native = _pair(mods, name)
        for func in compat.functions:
            c, n = inspect.signature(compat[func]), inspect.signature(native[func])
            assert [p.annotation for p in c.parameters.values()] == [p.annotation for p in n.parameters.values()]
            assert c.return_annotation == n.return_annotation
            # C++ has no parameter names for the export macro to read: arg0, arg1, ...
            assert list(c.parameters) == [f"arg{i}" for i in range(len(c.parameters))]


def test_add_one(mods, fw):
    x = fw.from_numpy(np.arange(6, dtype=np.float32))
    results = []
    for mod in _pair(mods, "add_one"):
        y = _out(fw, np.zeros(6, np.float32))
        assert mod.add_one(x, y) is None
        results.append(_np(fw, y))
    np.testing.assert_array_equal(results[0], np.arange(6, dtype=np.float32) + 1)
    np.testing.assert_array_equal(results[0], results[1])


@pytest.mark.parametrize("dtype", ["float32", "float64", "int32", "int64"])
def test_scale_dispatches_on_dtype(mods, fw, dtype):
    x = fw.from_numpy(np.arange(-4, 8).reshape(3, 4).astype(dtype))
    data = fw.to_numpy(x)  # jax without x64 holds 64-bit data as 32-bit
    results = []
    for mod in _pair(mods, "scale"):
        out = _out(fw, np.zeros_like(data))
        mod.scale(x, out, 2.5)
        results.append(_np(fw, out))
    np.testing.assert_array_equal(results[0], (data * 2.5).astype(data.dtype))
    np.testing.assert_array_equal(results[0], results[1])


@pytest.mark.parametrize("dim", [0, 1, -1])
def test_sum_dim_with_an_owning_shape_from_a_utility_header(mods, fw, dim):
    data = np.arange(24, dtype=np.float64).reshape(2, 3, 4)
    for layout in (data, data.transpose(2, 0, 1)):
        x = fw.from_numpy(layout)
        compat, native = (mod.sum_dim(x, dim) for mod in _pair(mods, "sum_dim"))
        assert type(compat) is type(native) is fw.output_type()
        np.testing.assert_allclose(fw.to_numpy(compat), layout.sum(axis=dim))
        np.testing.assert_array_equal(fw.to_numpy(compat), fw.to_numpy(native))


def test_square_allocates_with_the_callers_framework(mods, fw):
    data = np.linspace(-2, 2, 10, dtype=np.float32).reshape(2, 5)
    compat, native = (mod.square(fw.from_numpy(data)) for mod in _pair(mods, "square"))
    assert type(compat) is type(native) is fw.output_type()
    np.testing.assert_array_equal(fw.to_numpy(compat), data * data)
    np.testing.assert_array_equal(fw.to_numpy(compat), fw.to_numpy(native))


@pytest.mark.parametrize("bias, alpha", [(None, None), (True, None), (None, 3.0), (True, -0.5)])
def test_axpy_optional_arguments(mods, fw, bias, alpha):
    data = np.arange(5, dtype=np.float32)
    b = np.full(5, 10, np.float32)
    x = fw.from_numpy(data)
    bias_arg = fw.from_numpy(b) if bias else None
    results = []
    for mod in _pair(mods, "axpy"):
        out = _out(fw, np.zeros(5, np.float32))
        mod.axpy(x, out, bias_arg, alpha)
        results.append(_np(fw, out))
    expected = (1.0 if alpha is None else alpha) * data + (b if bias else 0)
    np.testing.assert_allclose(results[0], expected)
    np.testing.assert_array_equal(results[0], results[1])


def test_minmax_tuple_result(mods, fw):
    data = np.array([[3, -1, 2], [0, 5, 4]], np.float32)
    compat, native = (mod.row_minmax(fw.from_numpy(data)) for mod in _pair(mods, "minmax"))
    assert type(compat) is tuple and len(compat) == 2
    assert all(type(t) is fw.output_type() for t in compat + native)
    np.testing.assert_array_equal(fw.to_numpy(compat[0]), data.min(axis=1))
    np.testing.assert_array_equal(fw.to_numpy(compat[1]), data.max(axis=1))
    for c, n in zip(compat, native):
        np.testing.assert_array_equal(fw.to_numpy(c), fw.to_numpy(n))


@pytest.mark.parametrize("kind", ["relu", "leaky_relu"])
def test_activate_string_argument(mods, fw, kind):
    if fw.read_only:
        pytest.skip(f"{fw.name} tensors are read-only (immutable): an in-place kernel does not apply")
    data = np.array([-2, -0.5, 0, 1.5], np.float32)
    results = []
    for mod in _pair(mods, "activate"):
        x = fw.from_numpy(data)
        mod.activate(x, kind)
        results.append(fw.to_numpy(x))
    np.testing.assert_allclose(results[0], np.where(data > 0, data, (0.01 if kind == "leaky_relu" else 0) * data))
    np.testing.assert_array_equal(results[0], results[1])


@pytest.mark.parametrize("name, call, kind, message", [
    ("scale", lambda m: m.scale(np.zeros(3, np.float32), np.zeros(3), 1.0), TypeError,
     "scale: x and out differ in dtype (check failed: x.dtype() == out.dtype(), float32 vs. float64)"),
    ("scale", lambda m: m.scale(np.zeros((3, 3), np.float32).T, np.zeros((3, 3), np.float32), 1.0),
     ValueError, "scale: x must be contiguous (check failed: x.IsContiguous())"),
    ("scale", lambda m: m.scale(np.zeros(3, np.int8), np.zeros(3, np.int8), 1.0), TypeError,
     "scale: unsupported dtype int8"),
    ("activate", lambda m: m.activate(np.zeros(2, np.float32), "tanh"), ValueError,
     "activate: unknown activation 'tanh'"),
    ("sum_dim", lambda m: m.sum_dim(np.zeros((2, 2)), 2), IndexError,
     "dim out of range for a 2-D tensor (check failed: dim >= 0 && dim < ndim)"),
    ("add_one", lambda m: m.add_one("x", np.zeros(2, np.float32)), TypeError,
     "add_one() argument 1 'arg0': expected a tensor, got str"),
    ("axpy", lambda m: m.axpy(np.zeros(2, np.float32), np.zeros(2, np.float32), 1.5, None), TypeError,
     "axpy() argument 3 'arg2': expected a tensor, got float"),
])
def test_errors_name_kind_and_message(mods, name, call, kind, message):
    with pytest.raises(kind) as info:
        call(mods[name, "compat"])
    assert str(info.value) == message
    with pytest.raises(kind):  # the native twin refuses the same call with the same kind
        call(mods[name, "native"])


def test_internal_check_is_a_runtime_error_naming_the_file_and_line(mods):
    with pytest.raises(RuntimeError) as info:
        mods["add_one", "compat"].add_one(np.zeros(3, np.float32), np.zeros(4, np.float32))
    line = next(i for i, text in enumerate((KERNELS / "add_one.cc").read_text().splitlines(), 1)
                if "TVM_FFI_ICHECK_EQ" in text)
    # InternalError is no Python exception: it arrives as RuntimeError with the kind in front.
    assert re.fullmatch(r"InternalError: x and y must have the same shape \(check failed: x\.size\(0\) == y\.size\(0\), "
                        rf"3 vs\. 4, at .*add_one\.cc:{line}\)", str(info.value)), str(info.value)


# ------------------------------------------------- Array<T> parameters (lists) ----
@functools.lru_cache(maxsize=None)
def _list_pair(name):
    """The compat and native builds of a kernel with Array / std::vector parameters; skips
    only when native tensorplug itself has no list argument kinds yet."""
    try:
        native = _build(name, compat=False)
    except cpp.BuildError as e:
        if "unsupported parameter type" in str(e):
            return None
        raise
    return _build(name, compat=True), native


def _list_pair_or_skip(name):
    pair = _list_pair(name)
    if pair is None:
        pytest.skip("tensorplug has no list argument kinds (std::vector parameters) in this build")
    return pair


def test_plan_run_round_trip(fw):
    compat, native = _list_pair_or_skip("plan_run")
    data = np.arange(1, 8, dtype=np.float32)
    results = []
    for mod in (compat, native):
        plan = mod.plan(7, 3)
        assert list(plan) == [7, 3, 0, 3, 3, 6, 6, 7]
        out = _out(fw, np.zeros(7, np.float32))
        mod.run(fw.from_numpy(data), out, plan)
        results.append(_np(fw, out))
    np.testing.assert_array_equal(results[0], [1, 3, 6, 4, 9, 15, 7])
    np.testing.assert_array_equal(results[0], results[1])


def test_sum_list_of_tensors(fw):
    compat, native = _list_pair_or_skip("sum_list")
    xs = [fw.from_numpy(np.full(4, k, np.float32)) for k in (1, 2, 4)]
    results = []
    for mod in (compat, native):
        out = _out(fw, np.zeros(4, np.float32))
        mod.sum_list(xs, out)
        results.append(_np(fw, out))
    np.testing.assert_array_equal(results[0], np.full(4, 7, np.float32))
    np.testing.assert_array_equal(results[0], results[1])


# ----------------------------------------------------- the names one by one ----
def test_shapes(api):
    x = np.zeros((2, 3, 4), np.float32)
    # A Shape result is a tuple, or a list where tensorplug has the integer-array kind.
    assert type(api.strides_of(x)) in (tuple, list)
    assert list(api.strides_of(x)) == [12, 4, 1]
    assert list(api.strides_of(x.transpose(2, 0, 1))) == [1, 12, 4]
    assert list(api.compact_strides(x.transpose(2, 0, 1))) == [6, 3, 1]
    assert api.shape_product(x) == 24
    assert api.shape_at(x, 2) == 4
    with pytest.raises(IndexError, match="^index 3 out of range for a shape of 3$"):
        api.shape_at(x, 3)


def test_tensor_accessors(api, fw):
    data = np.arange(6, dtype=np.float32).reshape(2, 3)
    x = fw.from_numpy(data)
    assert api.data_size(x) == api.data_size_dl(x) == 24
    assert api.contiguous(x) is True
    assert api.rank(x) == 202
    copy = api.copy_owned(x)
    assert type(copy) is fw.output_type()
    np.testing.assert_array_equal(fw.to_numpy(copy), data)


def test_from_env_alloc_errors(api):
    with pytest.raises(MemoryError, match="^workspace exhausted$"):
        api.alloc_fails()
    with pytest.raises(ValueError, match=r"^FromEnvAlloc: negative extent in shape \[2, -1\]$"):
        api.alloc_negative()


@pytest.mark.parametrize("name", ["float32", "bfloat16", "int8", "uint64", "bool", "float8_e4m3fn", "float32x4"])
def test_dtype_names_round_trip(api, name):
    assert api.dtype_round_trip(name) == name


def test_unknown_dtype_name(api):
    with pytest.raises(ValueError, match="^unknown dtype 'float33'$"):
        api.dtype_round_trip("float33")


@pytest.mark.parametrize("which, kind, message", [
    (0, RuntimeError, r"InternalError: which must not be zero \(check failed: which != 0, 0 vs\. 0, at .*api_checks\.cc:\d+\)"),
    (1, ValueError, r"check failed: which < 0, 1 vs\. 0"),
    (2, NotImplementedError, r"logged first"),
    (3, ValueError, r"check not null: null_pointer"),
    (4, ValueError, r"bytes print as numbers \(check failed: small == 8, 7 vs\. 8\)"),
    (5, TypeError, r"dtypes \(check failed: f32 == f16, float32 vs\. float16\)"),
    (6, IndexError, r"check failed: static_cast<size_t>\(1\) >= 2, 1 vs\. 2"),
    (7, RuntimeError, r"InternalError: check failed: which < 0, at .*api_checks\.cc:\d+"),
])
def test_check_macro_messages(api, which, kind, message):
    with pytest.raises(kind) as info:
        api.check_message(which)
    assert re.fullmatch(message, str(info.value)), str(info.value)


def test_log_and_throw_prints_before_throwing(capfd, api):
    with pytest.raises(NotImplementedError):
        api.check_message(2)
    assert "NotImplementedError: logged first" in capfd.readouterr().err


def test_check_macros_are_single_statements(api):
    assert api.dangling_else(1) == 0
    assert api.dangling_else(-1) == -11
    assert api.evaluated_once() == 1


def test_optional(api):
    assert api.optional_or(None) == -1
    assert api.optional_or(5) == 1005
    assert api.optional_value(7) == 7
    with pytest.raises(ValueError, match="^access of an empty Optional$"):
        api.optional_value(None)
    assert api.optional_is_none(None) is True
    assert api.optional_is_none(np.zeros(1)) is False
    assert api.maybe_name(True) == "named"
    assert api.maybe_name(False) is None


def test_array_and_tuple_results(api, fw):
    assert type(api.iota(4)) in (tuple, list)  # a list where tensorplug has the integer-array kind
    assert list(api.iota(4)) == [0, 1, 2, 3]
    assert list(api.iota(0)) == []
    assert api.array_at(2) == 2
    with pytest.raises(IndexError, match="^Array index 3 out of range for an Array of 3$"):
        api.array_at(3)
    x = fw.from_numpy(np.arange(3, dtype=np.float32))
    copies = api.two_copies(x)
    assert type(copies) in (tuple, list) and len(copies) == 2  # a list with tensorplug's list kinds
    assert all(type(c) is fw.output_type() for c in copies)
    np.testing.assert_array_equal(fw.to_numpy(copies[1]), np.arange(3, dtype=np.float32))
    assert api.mixed() == (1, "two", 3.5)


def test_functions(api):
    assert api.call_global("compat.test.no_such_function", 1) == -1
    tensorplug.register_global_func("compat.test.add_ten", lambda v: v + 10, override=True)
    assert api.call_global("compat.test.add_ten", 5) == 15
    assert api.call_typed(21) == 42


def test_env_streams(api):
    assert api.stream_round_trip(0x1234) == 0x1234


# ---------------------------------------------------- load_inline, config, CMake ----
# Written as a kernel for the other project's load_inline: no #include lines, because that
# loader adds the tvm/ffi headers itself; `functions` maps names to docstrings.
INLINE_SOURCE = r"""
void add_one_cpu(tvm::ffi::TensorView x, tvm::ffi::TensorView y) {
  TVM_FFI_ICHECK(x.ndim() == 1) << "x must be a 1D tensor";
  DLDataType f32_dtype{kDLFloat, 32, 1};
  TVM_FFI_ICHECK(x.dtype() == f32_dtype) << "x must be a float tensor";
  for (int i = 0; i < x.size(0); ++i) {
    static_cast<float*>(y.data_ptr())[i] = static_cast<float*>(x.data_ptr())[i] + 1;
  }
}
"""


@pytest.mark.parametrize("functions", [["add_one_cpu"], {"add_one_cpu": "adds one"}])
def test_load_inline_compat_compiles_the_other_projects_inline_source(functions):
    mod = cpp.load_inline("compat_inline", cpp_sources=INLINE_SOURCE, functions=functions, compat="tvm_ffi")
    x, y = np.arange(4, dtype=np.float32), np.zeros(4, np.float32)
    mod.add_one_cpu(x, y)
    np.testing.assert_array_equal(y, x + 1)
    assert list(inspect.signature(mod.add_one_cpu).parameters) == ["x", "y"]  # read from the source


def test_load_inline_without_compat_does_not_know_the_names():
    with pytest.raises(cpp.BuildError, match="tvm"):
        cpp.load_inline("compat_inline_plain", cpp_sources=INLINE_SOURCE, functions=["add_one_cpu"])


def test_load_inline_refuses_an_unknown_compat_name():
    with pytest.raises(ValueError, match=r"^load_inline\(\) argument 'compat': expected one of \['tvm_ffi'\] or None, "
                                         r"got 'pybind11'$"):
        cpp.load_inline("x", cpp_sources="", compat="pybind11")


def test_config_prints_the_compat_include_dir():
    out = subprocess.run([sys.executable, "-m", "tensorplug", "config", "--compat-includedir"],
                         capture_output=True, text=True, check=True).stdout.strip()
    assert out == cpp.compat_include_dir()
    assert (Path(out) / "tvm" / "ffi" / "tvm_ffi.h").is_file()
    assert (Path(out) / "dlpack" / "dlpack.h").is_file()
    with pytest.raises(ValueError, match="expected one of"):
        cpp.compat_include_dir("nope")


def _syntax_check(tmp_path, source):
    src = tmp_path / "check.cc"
    src.write_text(source)
    return subprocess.run(["c++", "-std=c++17", "-fsyntax-only", f"-I{cpp.include_dir()}",
                           f"-I{cpp.compat_include_dir()}", str(src)], capture_output=True, text=True)


def test_dlpack_header_forwards_to_tensorplugs_declarations(tmp_path):
    proc = _syntax_check(tmp_path, "#include <dlpack/dlpack.h>\n#include <tensorplug/dlpack.h>\n"
                                   "static_assert(DLPACK_MAJOR_VERSION == 1 && DLPACK_MINOR_VERSION >= 3, \"\");\n"
                                   "DLManagedTensorVersioned* p = nullptr; DLPackExchangeAPI* api = nullptr;\n")
    assert proc.returncode == 0, proc.stderr


# Each header out of scope, and a use of one of its names.
OUT_OF_SCOPE = [
    ("container/map.h", "tvm::ffi::Map", "void f(tvm::ffi::Map<int, int> m) {}"),
    ("container/dict.h", "tvm::ffi::Dict", "tvm::ffi::Dict<int, int> d;"),
    ("container/list.h", "tvm::ffi::List", "tvm::ffi::List<int> l;"),
    ("container/variant.h", "tvm::ffi::Variant", "tvm::ffi::Variant<int, float> v;"),
    ("object.h", "tvm::ffi::ObjectRef", "tvm::ffi::ObjectRef r;"),
    ("object.h", "tvm::ffi::Object", "class Mine : public tvm::ffi::Object {};"),
    ("object.h", "tvm::ffi::make_object", "void f() { tvm::ffi::make_object<int>(1); }"),
    ("object.h", "TVM_FFI_DECLARE_OBJECT_INFO_FINAL",
     'struct Mine { TVM_FFI_DECLARE_OBJECT_INFO_FINAL("mine", Mine, int); };'),
    ("reflection/registry.h", "TVM_FFI_STATIC_INIT_BLOCK", "TVM_FFI_STATIC_INIT_BLOCK() { int x = 0; (void)x; }"),
    ("reflection/registry.h", "tvm::ffi::reflection::GlobalDef", "void f() { tvm::ffi::reflection::GlobalDef(); }"),
    ("extra/module.h", "tvm::ffi::Module", "tvm::ffi::Module m;"),
    ("extra/cuda/cubin_launcher.h", "TVM_FFI_EMBED_CUBIN", "TVM_FFI_EMBED_CUBIN(kernels);"),
]


@pytest.mark.parametrize("header", sorted({header for header, _, _ in OUT_OF_SCOPE}))
def test_headers_out_of_scope_compile_when_nothing_of_theirs_is_used(tmp_path, header):
    # As mini-sglang's radix kernel includes <tvm/ffi/object.h> and uses none of it.
    proc = _syntax_check(tmp_path, f"#include <tvm/ffi/{header}>\n#include <tvm/ffi/container/tensor.h>\n"
                                   "int64_t numel(tvm::ffi::TensorView x) { return x.numel(); }\n")
    assert proc.returncode == 0, proc.stderr


@pytest.mark.parametrize("header, name, use", OUT_OF_SCOPE)
def test_names_out_of_scope_say_so_where_used(tmp_path, header, name, use):
    proc = _syntax_check(tmp_path, f"#include <tvm/ffi/{header}>\n{use}\n")
    assert proc.returncode != 0
    assert (f"{name} (<tvm/ffi/{header}>) is not provided by tensorplug's tvm-ffi compatibility layer; see "
            "docs/migration.md (Not supported)") in proc.stderr, proc.stderr


def test_cmake_target_compiles_the_sources_unchanged(tmp_path):
    cmake = shutil.which("cmake") or shutil.which("cmake", path=str(Path(sys.executable).parent))
    if cmake is None:
        pytest.skip("cmake not installed")
    source = tmp_path / "src"
    source.mkdir()
    (source / "CMakeLists.txt").write_text(
        "cmake_minimum_required(VERSION 3.18)\nproject(migrated LANGUAGES CXX)\n"
        "find_package(tensorplug CONFIG REQUIRED)\n"
        f"tensorplug_add_kernel_library(migrated {(KERNELS / 'sum_dim.cc').as_posix()})\n"
        "target_link_libraries(migrated PRIVATE tensorplug::compat_tvm_ffi)\n")
    build = tmp_path / "build"
    for cmd in ([cmake, "-S", str(source), "-B", str(build), f"-Dtensorplug_DIR={cpp.cmake_dir()}"],
                [cmake, "--build", str(build)]):
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
        assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    mod = tensorplug.load_module(build / "libmigrated.so")
    np.testing.assert_array_equal(mod.sum_dim(np.ones((2, 3)), 1), [3.0, 3.0])


# ------------------------------------------- a library's own DLDevice operators ----
@pytest.mark.parametrize("source, include_dirs", [("own_device_ops.cc", []),
                                                  ("own_device_ops_compat.cc", ["compat"])])
def test_a_librarys_own_dldevice_operators_compile_and_win(source, include_dirs):
    dirs = [cpp.compat_include_dir() for _ in include_dirs]
    mod = tensorplug.load_module(cpp.build(Path(source).stem, [KERNELS / source], include_dirs=dirs,
                                           extra_cflags=["-Wall", "-Wextra", "-Werror"]))
    x = np.zeros(2, np.float32)
    assert mod.describe(x, "cpu") == "library-device(1, 0) matches float32"
    assert mod.describe(x.astype(np.float64), "cuda:0") == "library-device(1, 0) differs other"


# ------------------------------------------------------------ the .cu variant ----
def _cuda_device():
    torch = pytest.importorskip("torch", reason="torch not installed")
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device")
    return torch


def test_cuda_variant_matches_the_cpu_kernel(mods):
    torch = _cuda_device()
    mod = tensorplug.load_module(cpp.build("add_one_cuda_compat", [KERNELS / "add_one.cu"],
                                           include_dirs=[cpp.compat_include_dir()]))
    x = torch.arange(1000, dtype=torch.float32, device="cuda")
    y = torch.empty_like(x)
    mod.add_one_cuda(x, y)
    torch.cuda.synchronize()
    torch.testing.assert_close(y.cpu(), x.cpu() + 1)


# ---------------------------------------------- the same sources on tvm-ffi ----
def test_the_sources_are_unchanged_tvm_ffi_sources(mods, tmp_path):
    """apache-tvm-ffi builds the very same files; from torch both give the same values."""
    tvm_ffi = pytest.importorskip("tvm_ffi", reason="apache-tvm-ffi not installed")
    torch = pytest.importorskip("torch", reason="torch not installed")
    import tvm_ffi.cpp

    path = tvm_ffi.cpp.build("tvm_ffi_compat_kernels", cpp_files=[str(KERNELS / "scale.cc"),
                                                                  str(KERNELS / "sum_dim.cc")],
                             extra_include_paths=[str(KERNELS)], build_directory=str(tmp_path))
    theirs = tvm_ffi.load_module(path)
    x = torch.arange(-6, 6, dtype=torch.float32).reshape(3, 4)
    outs = [torch.empty_like(x) for _ in range(2)]
    theirs.scale(x, outs[0], 1.5)
    mods["scale", "compat"].scale(x, outs[1], 1.5)
    torch.testing.assert_close(outs[0], outs[1], rtol=0, atol=0)
    a = torch.arange(24, dtype=torch.float64).reshape(2, 3, 4).permute(2, 0, 1)
    torch.testing.assert_close(torch.from_dlpack(theirs.sum_dim(a, 1)), mods["sum_dim", "compat"].sum_dim(a, 1),
                               rtol=0, atol=0)
