"""Libraries built for apache tvm-ffi, loaded unchanged by tensorplug (issue 42, docs/migration.md).

The tvm-ffi-style migration kernels (tests/support/compat_kernels) are built by the real
``tvm_ffi.cpp.build_inline``, once with tvm-ffi's metadata (``TVM_FFI_DLL_EXPORT_INCLUDE_METADATA=1``)
and once without, and called through ``tensorplug.load_module`` from numpy, torch, jax and
paddle: no rebuild, no port. A kernel's errors keep their kind, its ``Tensor::FromEnvAlloc``
allocates through the caller's framework (numpy included), tvm-ffi's environment is bound
for the call and restored after it, and written tensors declared by the user are refused
read-only memory. The ops, compilers and gradients of these functions are in
tests/tvm_ffi/test_tvm_ffi_ops.py.
"""

from __future__ import annotations

import ctypes
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import tensorplug

np = pytest.importorskip("numpy", reason="numpy not installed")
tvm_ffi = pytest.importorskip("tvm_ffi", reason="apache-tvm-ffi not installed (pip install \"tensorplug[tvm-ffi]\")")
import tvm_ffi.cpp  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
KERNELS = ROOT / "tests" / "support" / "compat_kernels"
# The migration kernels apache-tvm-ffi 0.1.15 compiles (axpy.cc uses `->` on an Optional, which
# its Optional<TensorView> lacks; api_checks.cc calls tensorplug's C API).
SOURCES = ["add_one", "scale", "sum_dim", "square", "minmax", "activate", "plan_run", "sum_list"]
FRAMEWORKS = ["numpy", "torch", "jax", "paddle"]
# tvm-ffi records no parameter names and not which tensors a function writes.
WRITES = {"add_one": [1], "scale": ["arg1"], "run": [1], "sum_list": [1], "activate": [0]}


def build(name: str, directory: Path, metadata: bool) -> str:
    """The SOURCES as one library, by tvm-ffi's own inline builder (-O0: checked for values)."""
    flags = ["-O0"] + (["-DTVM_FFI_DLL_EXPORT_INCLUDE_METADATA=1"] if metadata else [])
    return tvm_ffi.cpp.build_inline(name, cpp_sources=[(KERNELS / f"{s}.cc").read_text() for s in SOURCES],
                                    extra_cflags=flags, extra_include_paths=[str(KERNELS)],
                                    build_directory=str(directory))


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """{"meta" | "plain": path} of the two builds."""
    return {kind: build(f"tvm_ffi_kernels_{kind}", tmp_path_factory.mktemp(kind), kind == "meta")
            for kind in ("meta", "plain")}


@pytest.fixture(scope="module")
def mod(built):
    return tensorplug.load_module(built["meta"], writes=WRITES)


@pytest.fixture(params=FRAMEWORKS)
def fw(request):
    framework = request.config.hook.pytest_tensorplug_framework(name=request.param)
    reason = framework.missing()
    if reason:
        pytest.skip(reason)
    return framework


def _out(fw, array):
    """A writable output: the framework's own, or numpy's where its tensors are immutable (jax)."""
    return array.copy() if fw.read_only else fw.from_numpy(array)


def _np(fw, x):
    return x.copy() if isinstance(x, np.ndarray) else fw.to_numpy(x)


# ------------------------------------------------------------------ loading ----
def test_the_library_is_tvm_ffis_and_loads_as_a_module(built, mod):
    from tensorplug.tvm_ffi import exported_functions, is_tvm_ffi_library

    names = ("activate", "add_one", "plan", "row_minmax", "run", "scale", "square", "sum_dim", "sum_list")
    assert exported_functions(built["meta"]) == (names, ())
    assert is_tvm_ffi_library(built["meta"]) and is_tvm_ffi_library(built["plain"])
    assert isinstance(mod, tensorplug.Module) and mod.functions == names
    assert all(isinstance(mod[n], tensorplug.Function) and mod[n].__name__ == n for n in names)
    # tvm-ffi itself loads the very same file (it is not rebuilt for tensorplug).
    assert tvm_ffi.load_module(built["meta"]).get_function_metadata("scale")


def test_signatures_come_from_tvm_ffis_metadata(mod):
    assert mod.scale.signature_text == "arg0:view;arg1:mview;arg2:float->void"  # arg1: declared written
    assert mod.square.signature_text == "arg0:view->tensor"
    assert mod.sum_dim.signature_text == "arg0:view;arg1:int->tensor"
    assert mod.row_minmax.signature_text == "arg0:view->tuple"
    assert mod.plan.signature_text == "arg0:int;arg1:int->ints"
    assert mod.run.signature_text == "arg0:view;arg1:mview;arg2:ints->void"
    assert mod.sum_list.signature_text == "arg0:views;arg1:mview->void"
    assert mod.activate.signature_text == "arg0:mview;arg1:str->void"


def test_a_library_of_tensorplugs_own_abi_is_untouched():
    from tensorplug import cpp
    from tensorplug.tvm_ffi import exported_functions

    path = cpp.build("tvm_ffi_untouched_native", [KERNELS / "square_native.cc"], extra_cflags=["-O0"])
    assert exported_functions(path) == ((), ("square",))
    own = tensorplug.load_module(path)
    assert own.square.signature_text == "x:view->tensor"
    with pytest.raises(ValueError, match=r"^load_module\(\) arguments 'signatures' and 'writes' are for libraries "
                                         r"built for apache tvm-ffi .*; '.*tvm_ffi_untouched_native.so' is not one$"):
        tensorplug.load_module(path, writes={"square": [0]})


def test_without_metadata_a_function_needs_a_declaration(built):
    with pytest.raises(ValueError) as info:
        tensorplug.load_module(built["plain"])
    message = str(info.value)
    assert message.startswith(f"kernel library '{built['plain']}' (built for tvm-ffi) has no signature for "
                              "activate, add_one, plan, row_minmax, run, scale, square, sum_dim, sum_list: ")
    assert "-DTVM_FFI_DLL_EXPORT_INCLUDE_METADATA=1" in message and "load_module(path, signatures={" in message


def test_declared_signatures_name_the_parameters(built, fw):
    signatures = {"activate": "x:mview;kind:str->void", "add_one": "x:view;y:mview->void",
                  "plan": "n:int;chunk:int->ints", "row_minmax": "x:view->tuple", "run": "x:view;out:mview;plan:ints->void",
                  "scale": "x:view;out:mview;alpha:float=1.0->void", "square": "x:view->tensor",
                  "sum_dim": "x:view;dim:int->tensor", "sum_list": "xs:views;out:mview->void"}
    plain = tensorplug.load_module(built["plain"], signatures=signatures)
    assert plain.scale.signature_text == signatures["scale"]
    data = np.arange(6, dtype=np.float32)
    out = _out(fw, np.zeros(6, np.float32))
    plain.scale(fw.from_numpy(data), out=out)  # a keyword and a default: tensorplug's calling convention
    np.testing.assert_array_equal(_np(fw, out), data)
    np.testing.assert_array_equal(fw.to_numpy(plain.square(fw.from_numpy(data))), data * data)


def test_declarations_are_checked_by_name(built):
    with pytest.raises(ValueError, match=r"^load_module\(\) argument 'signatures': kernel library '.*' has no "
                                         r"function 'nope'; it exports: activate, add_one, "):
        tensorplug.load_module(built["meta"], signatures={"nope": "x:view->void"})
    with pytest.raises(ValueError, match=r"^load_module\(\) argument 'writes': tvm-ffi function 'scale' has no "
                                         r"parameter 'out'; its parameters: arg0, arg1, arg2$"):
        tensorplug.load_module(built["meta"], writes={"scale": ["out"]})
    with pytest.raises(ValueError, match=r"^load_module\(\) argument 'writes': parameter 'arg2' of tvm-ffi function "
                                         r"'scale' is a float, not a tensor$"):
        tensorplug.load_module(built["meta"], writes={"scale": [2]})


def test_without_apache_tvm_ffi_the_error_says_what_to_install(built):
    # A process where the package cannot be found (its directory off sys.path after tensorplug imported).
    code = textwrap.dedent(f"""
        import sys, tensorplug
        sys.path[:] = [p for p in sys.path if 'site-packages' not in p]
        try:
            tensorplug.load_module({built['meta']!r})
        except ModuleNotFoundError as e:
            print(type(e).__name__, e)
    """)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.stdout.strip() == ('ModuleNotFoundError loading a library built for apache tvm-ffi needs its runtime '
                                  '(libtvm_ffi.so): pip install "tensorplug[tvm-ffi]"'), out.stderr


# ------------------------------------------------------------------- calling ----
def test_add_one(mod, fw):
    y = _out(fw, np.zeros(6, np.float32))
    assert mod.add_one(fw.from_numpy(np.arange(6, dtype=np.float32)), y) is None
    np.testing.assert_array_equal(_np(fw, y), np.arange(6, dtype=np.float32) + 1)


@pytest.mark.parametrize("dtype", ["float32", "float64", "int32", "int64"])
def test_scale_dispatches_on_dtype(mod, fw, dtype):
    x = fw.from_numpy(np.arange(-4, 8).reshape(3, 4).astype(dtype))
    data = fw.to_numpy(x)  # jax without x64 holds 64-bit data as 32-bit
    out = _out(fw, np.zeros_like(data))
    mod.scale(x, out, 2.5)
    np.testing.assert_array_equal(_np(fw, out), (data * 2.5).astype(data.dtype))


@pytest.mark.parametrize("dim", [0, 1, -1])
def test_sum_dim_returns_the_callers_tensor(mod, fw, dim):
    data = np.arange(24, dtype=np.float64).reshape(2, 3, 4)
    for layout in (data, data.transpose(2, 0, 1)):
        result = mod.sum_dim(fw.from_numpy(layout), dim)
        assert type(result) is fw.output_type()
        np.testing.assert_allclose(fw.to_numpy(result), layout.sum(axis=dim))


def test_from_env_alloc_allocates_with_the_callers_framework(mod, fw):
    # tvm-ffi's own Python call from numpy fails here ("allocator is nullptr"): tensorplug binds
    # the caller's allocator (numpy's too) as tvm-ffi's for the call.
    data = np.linspace(-2, 2, 10, dtype=np.float32).reshape(2, 5)
    result = mod.square(fw.from_numpy(data))
    assert type(result) is fw.output_type()
    np.testing.assert_array_equal(fw.to_numpy(result), data * data)


def test_tuple_of_allocated_tensors(mod, fw):
    data = np.array([[3, -1, 2], [0, 5, 4]], np.float32)
    result = mod.row_minmax(fw.from_numpy(data))
    assert type(result) is tuple and len(result) == 2 and all(type(t) is fw.output_type() for t in result)
    np.testing.assert_array_equal(fw.to_numpy(result[0]), data.min(axis=1))
    np.testing.assert_array_equal(fw.to_numpy(result[1]), data.max(axis=1))


def test_plan_and_run_pass_an_int_array_both_ways(mod, fw):
    plan = mod.plan(10, 4)
    assert plan == [10, 3, 0, 4, 4, 8, 8, 10]
    data = np.arange(10, dtype=np.float32)
    out = _out(fw, np.zeros(10, np.float32))
    mod.run(fw.from_numpy(data), out, plan)
    np.testing.assert_array_equal(_np(fw, out), np.concatenate([np.cumsum(data[a:b]) for a, b in
                                                                ((0, 4), (4, 8), (8, 10))]))


def test_a_list_of_tensors(mod, fw):
    xs = [fw.from_numpy(np.full(4, k, np.float32)) for k in (1, 2, 3)]
    out = _out(fw, np.zeros(4, np.float32))
    mod.sum_list(xs, out)
    np.testing.assert_array_equal(_np(fw, out), np.full(4, 6, np.float32))


@pytest.mark.parametrize("kind", ["relu", "leaky_relu"])
def test_a_string_argument(mod, fw, kind):
    data = np.array([-2, -0.5, 0, 1.5], np.float32)
    if fw.read_only:
        with pytest.raises(ValueError, match=r"^activate\(\) argument 1 'arg0': expected a writable tensor \(the "
                                             r"kernel writes it\), got a read-only"):
            mod.activate(fw.from_numpy(data), kind)
        return
    x = fw.from_numpy(data)
    mod.activate(x, kind)
    np.testing.assert_allclose(fw.to_numpy(x), np.where(data > 0, data, (0.01 if kind == "leaky_relu" else 0) * data))


def test_written_tensors_refuse_read_only_memory(mod):
    x = np.arange(3, dtype=np.float32)
    out = np.zeros(3, np.float32)
    out.flags.writeable = False
    with pytest.raises(ValueError, match=r"^scale\(\) argument 2 'arg1': expected a writable tensor \(the kernel "
                                         r"writes it\), got a read-only numpy"):
        mod.scale(x, out, 2.0)
    assert not out.any()


@pytest.mark.parametrize("call, kind, message", [
    (lambda m: m.scale(np.zeros(3, np.float32), np.zeros(3), 1.0), TypeError, r"scale: x and out differ in dtype"),
    (lambda m: m.scale(np.zeros((3, 3), np.float32).T, np.zeros((3, 3), np.float32), 1.0), ValueError,
     r"scale: x must be contiguous"),
    (lambda m: m.activate(np.zeros(2, np.float32), "nope"), ValueError, r"activate: unknown activation 'nope'"),
    (lambda m: m.plan(3, 0), ValueError, r"plan: chunk_size must be positive"),
    (lambda m: m.sum_dim(np.zeros((2, 3)), 5), IndexError, r"dim out of range for a 2-D tensor"),
])
def test_a_kernels_error_keeps_its_kind_and_message(mod, call, kind, message):
    with pytest.raises(kind, match=message) as info:
        call(mod)
    assert type(info.value) is kind


def test_tvm_ffis_environment_is_restored_after_the_call(mod):
    lib = ctypes.CDLL(str(Path(tvm_ffi.__file__).parent / "lib" / "libtvm_ffi.so"))
    lib.TVMFFIEnvGetDLPackManagedTensorAllocator.restype = ctypes.c_void_p
    lib.TVMFFIEnvGetStream.restype = ctypes.c_void_p
    before = lib.TVMFFIEnvGetDLPackManagedTensorAllocator()
    mod.square(np.ones(3, np.float32))
    with pytest.raises(ValueError):
        mod.plan(1, 0)
    assert lib.TVMFFIEnvGetDLPackManagedTensorAllocator() == before
    assert lib.TVMFFIEnvGetStream(2, 0) is None  # kDLCUDA: nothing bound outside a call


def test_results_outlive_the_call_and_the_module(built):
    m = tensorplug.load_module(built["meta"])
    results = [m.square(np.full(1000, k, np.float32)) for k in range(20)]
    del m
    import gc

    gc.collect()
    assert [float(r[-1]) for r in results] == [float(k * k) for k in range(20)]


# ------------------------------------------- owning tensors, shapes, optionals ----
EXTRAS = r"""
#include <tvm/ffi/container/shape.h>
#include <tvm/ffi/container/tensor.h>
#include <tvm/ffi/error.h>
#include <tvm/ffi/extra/c_env_api.h>
#include <tvm/ffi/function.h>
#include <tvm/ffi/optional.h>
namespace ffi = tvm::ffi;

ffi::Tensor Identity(ffi::Tensor x) { return x; }
void Fill(ffi::Tensor out, double value) {
  for (int64_t i = 0; i < out.numel(); ++i) static_cast<float*>(out.data_ptr())[i] = static_cast<float>(value);
}
int64_t Product(ffi::Shape shape) { return shape.Product(); }
int64_t OrMinusOne(ffi::Optional<int64_t> x) { return x.value_or(-1); }
ffi::Shape ShapeOf(ffi::TensorView x) { return ffi::Shape(x.shape()); }
ffi::String Greet(ffi::String name) { return "hello " + std::string(name); }
// The stream tvm-ffi's environment gives the kernel for x's device.
int64_t StreamOf(ffi::TensorView x) {
  return reinterpret_cast<int64_t>(TVMFFIEnvGetStream(x.device().device_type, x.device().device_id));
}
// One allocation returned twice (held twice: not handed back as the caller's own tensor).
ffi::Array<ffi::Tensor> Twice(ffi::TensorView x) {
  ffi::Tensor y = ffi::Tensor::FromEnvAlloc(TVMFFIEnvTensorAlloc, x.shape(), x.dtype(), x.device());
  const float* in = static_cast<const float*>(x.data_ptr());
  for (int64_t i = 0; i < x.numel(); ++i) static_cast<float*>(y.data_ptr())[i] = 2 * in[i];
  return {y, y};
}
// A scratch allocation dropped during the call, one kept past it (dropped by the next call or
// by release_kept), and the result.
ffi::Tensor g_kept;
ffi::Tensor KeepAndNegate(ffi::TensorView x) {
  ffi::Tensor scratch = ffi::Tensor::FromEnvAlloc(TVMFFIEnvTensorAlloc, x.shape(), x.dtype(), x.device());
  g_kept = ffi::Tensor::FromEnvAlloc(TVMFFIEnvTensorAlloc, x.shape(), x.dtype(), x.device());
  ffi::Tensor y = ffi::Tensor::FromEnvAlloc(TVMFFIEnvTensorAlloc, x.shape(), x.dtype(), x.device());
  const float* in = static_cast<const float*>(x.data_ptr());
  for (int64_t i = 0; i < x.numel(); ++i) static_cast<float*>(y.data_ptr())[i] = -in[i];
  return y;
}
void ReleaseKept() { g_kept = ffi::Tensor(); }
TVM_FFI_DLL_EXPORT_TYPED_FUNC(twice, Twice);
TVM_FFI_DLL_EXPORT_TYPED_FUNC(keep_and_negate, KeepAndNegate);
TVM_FFI_DLL_EXPORT_TYPED_FUNC(release_kept, ReleaseKept);
TVM_FFI_DLL_EXPORT_TYPED_FUNC(identity, Identity);
TVM_FFI_DLL_EXPORT_TYPED_FUNC(fill, Fill);
TVM_FFI_DLL_EXPORT_TYPED_FUNC(product, Product);
TVM_FFI_DLL_EXPORT_TYPED_FUNC(or_minus_one, OrMinusOne);
TVM_FFI_DLL_EXPORT_TYPED_FUNC(shape_of, ShapeOf);
TVM_FFI_DLL_EXPORT_TYPED_FUNC(greet, Greet);
TVM_FFI_DLL_EXPORT_TYPED_FUNC(stream_of, StreamOf);
"""


@pytest.fixture(scope="module")
def extras(tmp_path_factory):
    path = tvm_ffi.cpp.build_inline("tvm_ffi_extras", cpp_sources=EXTRAS,
                                    extra_cflags=["-O0", "-DTVM_FFI_DLL_EXPORT_INCLUDE_METADATA=1"],
                                    build_directory=str(tmp_path_factory.mktemp("extras")))
    return tensorplug.load_module(path, writes={"fill": [0]})


def test_owning_tensors_shapes_optionals_and_strings(extras, fw):
    assert extras.identity.signature_text == "arg0:tensor->tensor"
    assert extras.fill.signature_text == "arg0:mview;arg1:float->void"
    assert extras.product.signature_text == "arg0:ints->int"
    assert extras.or_minus_one.signature_text == "arg0:?int->int"
    data = np.arange(5, dtype=np.float32)
    same = extras.identity(fw.from_numpy(data))  # the argument's own memory, handed back
    assert type(same) is fw.output_type()
    np.testing.assert_array_equal(fw.to_numpy(same), data)
    out = _out(fw, np.zeros(3, np.float32))
    extras.fill(out, 1.5)  # a written ffi::Tensor parameter: a tvm-ffi tensor over the caller's
    np.testing.assert_array_equal(_np(fw, out), [1.5, 1.5, 1.5])
    assert extras.product([2, 3, 4]) == 24
    assert extras.or_minus_one(None) == -1 and extras.or_minus_one(7) == 7
    assert extras.shape_of(fw.from_numpy(np.zeros((2, 3), np.float32))) == [2, 3]
    assert extras.greet("tensorplug") == "hello tensorplug"


def test_allocations_held_twice_kept_or_dropped_in_the_call(extras, fw):
    """The bridge hands back the caller's own tensor only for an allocation the result alone
    holds; one held twice, one a kernel keeps past the call (dropped by a later call) and a
    scratch one dropped in the call are tvm-ffi's to free, each exactly once."""
    data = np.arange(6, dtype=np.float32)
    a, b = extras.twice(fw.from_numpy(data))
    np.testing.assert_array_equal(fw.to_numpy(a), 2 * data)
    np.testing.assert_array_equal(fw.to_numpy(b), 2 * data)
    try:
        results = [extras.keep_and_negate(fw.from_numpy(data + k)) for k in range(50)]
    finally:
        extras.release_kept()
    assert all(type(r) is fw.output_type() for r in results)
    for k, r in enumerate(results):
        np.testing.assert_array_equal(fw.to_numpy(r), -(data + k))


def test_allocating_calls_from_several_threads(mod, extras):
    """Each thread's allocations are its own (the bridge keeps them per thread, and a thread
    that ends frees what it kept), and tvm-ffi's environment is restored on each thread."""
    import threading

    lib = ctypes.CDLL(str(Path(tvm_ffi.__file__).parent / "lib" / "libtvm_ffi.so"))
    lib.TVMFFIEnvGetDLPackManagedTensorAllocator.restype = ctypes.c_void_p
    failures = []

    def work(k):
        try:
            data = np.full(9, k, np.float32)
            for _ in range(200):
                result = mod.square(data)
                assert type(result) is np.ndarray
                np.testing.assert_array_equal(result, data * data)
                _, second = extras.twice(data)
                np.testing.assert_array_equal(second, 2 * data)
            assert lib.TVMFFIEnvGetDLPackManagedTensorAllocator() is None  # none bound in a new thread
        except BaseException as exc:  # noqa: BLE001  (reported by the main thread)
            failures.append(exc)

    threads = [threading.Thread(target=work, args=(k,)) for k in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert failures == []


def test_the_kernel_sees_no_stream_on_the_cpu(extras):
    assert extras.stream_of(np.zeros(2, np.float32)) == 0


def test_the_kernel_sees_the_callers_cuda_stream(extras):
    torch = pytest.importorskip("torch", reason="torch not installed")
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device: the caller's CUDA stream is checked on a GPU machine")
    stream = torch.cuda.Stream()
    x = torch.zeros(2, device="cuda")
    with torch.cuda.stream(stream):
        assert extras.stream_of(x) == stream.cuda_stream
    assert extras.stream_of(x) == torch.cuda.current_stream().cuda_stream
