"""Regression tests for inputs and results that used to crash the interpreter (issue 9).

Each case runs in its own interpreter, so that a crash fails one test, not the run. The
child prints one line per check; the test asserts on the exception types and messages.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

# A kernel library built for these tests: C++ kernels through TENSORPLUG_EXPORT, and a
# raw C-ABI kernel returning hand-made DLPack tensors (NULL, negative or too many
# dimensions' strides) such as a plain-C kernel written against older DLPack returns.
SOURCE = r"""
#include <cstdlib>
#include <cstring>

namespace tp = tensorplug;

namespace {
tp::Tensor AllocFloats(int64_t n) { return tp::Tensor::FromEnvAlloc({n}, tp::kFloat32, tp::kCPU); }
int64_t TakeInt(int64_t n) { return n; }
int64_t DeviceId(DLDevice d) { return d.device_id; }

// Statics destroyed after Py_Finalize, holding Python-owned objects.
tp::Function& KeptFunction() { static tp::Function f; return f; }
tp::Tensor& KeptTensor() { static tp::Tensor t; return t; }
void KeepFunction(tp::Function f) { KeptFunction() = f; }
void KeepTensor(tp::Tensor t) { KeptTensor() = t; }

// Lends `x` to the callback `f` as a view.
void LendView(tp::Function f, tp::TensorView x) { f(x); }

struct RawBlock {
  DLManagedTensorVersioned managed;
  int64_t shape[80];
  int64_t strides[80];
  float data[4];
};
void RawDelete(DLManagedTensorVersioned* self) { delete reinterpret_cast<RawBlock*>(self); }
}  // namespace

TENSORPLUG_EXPORT(alloc_floats, AllocFloats, "n");
TENSORPLUG_EXPORT(take_int, TakeInt, "n");
TENSORPLUG_EXPORT(device_id, DeviceId, "device");
TENSORPLUG_EXPORT(keep_function, KeepFunction, "f");
TENSORPLUG_EXPORT(keep_tensor, KeepTensor, "x");
TENSORPLUG_EXPORT(lend_view, LendView, "f", "x");

// raw_result(ndim, mode, *tensors): a float32 CPU result [1, 2] (1-d) or all-ones shape.
// mode 0: strides NULL; 1: compact strides; 2: stride -1 (1-d, data at the last element).
// The tensor arguments only choose the caller's framework.
extern "C" TP_EXPORT int __tensorplug_raw_result(void*, const TPAny* args, int32_t nargs, TPAny* result) {
  if (nargs < 2 || args[0].type_index != kTPInt || args[1].type_index != kTPInt) {
    TPErrorSet("TypeError", "raw_result(ndim, mode, *tensors)");
    return -1;
  }
  const int64_t ndim = args[0].v_int64, mode = args[1].v_int64;
  auto* b = new RawBlock{};
  b->managed.version = {DLPACK_MAJOR_VERSION, DLPACK_MINOR_VERSION};
  b->managed.manager_ctx = b;
  b->managed.deleter = RawDelete;
  b->data[0] = 1.0f;
  b->data[1] = 2.0f;
  DLTensor& t = b->managed.dl_tensor;
  t.data = b->data;
  t.device = {kDLCPU, 0};
  t.ndim = static_cast<int32_t>(ndim);
  t.dtype = {kDLFloat, 32, 1};
  for (int64_t i = 0; i < ndim && i < 80; ++i) {
    b->shape[i] = ndim == 1 ? 2 : 1;
    b->strides[i] = 1;
  }
  t.shape = b->shape;
  t.strides = mode == 0 ? nullptr : b->strides;
  if (mode == 2) {
    b->strides[0] = -1;
    t.data = b->data + 1;
  }
  result->type_index = kTPTensor;
  result->flags = 0;
  result->v_tensor = &b->managed;
  return 0;
}
"""


@pytest.fixture(scope="module")
def crash_lib():
    from tensorplug import cpp

    return cpp.load_inline("crash_regressions", SOURCE).path


# Prints "ExceptionType: message" (or "ok: value") for one expression.
PRELUDE = """
def check(thunk):
    try:
        print("ok:", thunk())
    except Exception as e:
        print(f"{type(e).__name__}: {e}")
"""


def run_child(lib: str, body: str, setup: str = "", timeout: float = 120) -> list[str]:
    """Run `setup` then `body` in a fresh interpreter with `m` the crash library and
    check() defined; its stdout lines."""
    code = ("import tensorplug\nm = tensorplug.load_module(%r)\n" % str(lib) + PRELUDE + setup + "\n"
            + textwrap.dedent(body))
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=timeout)
    assert out.returncode == 0, f"child exited with {out.returncode}\nstdout:\n{out.stdout}\nstderr:\n{out.stderr}"
    return out.stdout.splitlines()


def test_bool_for_int_parameter(crash_lib):
    lines = run_child(crash_lib, """
        check(lambda: m.take_int(True))
        check(lambda: m.take_int(7))
    """)
    assert lines == ["TypeError: take_int() argument 1 'n': expected an int, got bool", "ok: 7"]


def test_device_index_past_int32(crash_lib):
    lines = run_child(crash_lib, """
        check(lambda: m.device_id("cuda:99999999999"))
        check(lambda: m.device_id((2, 2**40)))
        check(lambda: m.device_id("cuda:2147483647"))
    """)
    assert lines == [
        "ValueError: device_id() argument 1 'device': device index 99999999999 of 'cuda:99999999999' is out "
        "of range (at most 2147483647)",
        "OverflowError: device_id() argument 1 'device': signed integer is greater than maximum",
        "ok: 2147483647",
    ]


def test_cpu_allocation_size_overflow(crash_lib):
    lines = run_child(crash_lib, """
        check(lambda: m.alloc_floats(2**59))       # 2^61 bytes: fits in 64 bits, not in memory
        check(lambda: m.alloc_floats(2**62))       # 2^64 bytes: does not fit in 64 bits
        check(lambda: m.alloc_floats(3).shape)
    """)
    assert lines == [
        "MemoryError: cannot allocate 2305843009213693952 bytes (shape [576460752303423488]) on cpu:0: out of memory",
        "MemoryError: cannot allocate more than 2^64 bytes (shape [4611686018427387904]) on cpu:0: more than "
        "2^63 - 1 bytes, which no allocator can address",
        "ok: (3,)",
    ]


@pytest.mark.parametrize("framework", ["numpy", "torch", "paddle"])
def test_allocation_past_2_63_bytes_never_reaches_the_framework(crash_lib, framework):
    # paddle 3.3 wraps 2^64 bytes (2^62 float32) to an empty block the kernel then writes:
    # the fuzzer's hang (seed 11, case 14902). Refused before any allocator is asked.
    pytest.importorskip(framework)
    lines = run_child(crash_lib, f"""
        with tensorplug.output_framework({framework!r}):
            check(lambda: m.alloc_floats(2**62))  # 2^64 bytes
            check(lambda: m.alloc_floats(2**61))  # 2^63 bytes
    """)
    assert lines == [
        "MemoryError: cannot allocate more than 2^64 bytes (shape [4611686018427387904]) on cpu:0: more than "
        "2^63 - 1 bytes, which no allocator can address",
        "MemoryError: cannot allocate 9223372036854775808 bytes (shape [2305843009213693952]) on cpu:0: more "
        "than 2^63 - 1 bytes, which no allocator can address",
    ]


def test_cpu_allocation_size_overflow_through_numpy(crash_lib):
    pytest.importorskip("numpy")
    lines = run_child(crash_lib, """
        with tensorplug.output_framework("numpy"):
            check(lambda: m.alloc_floats(2**59))
    """)
    assert lines == ["MemoryError: cannot allocate 2305843009213693952 bytes (shape [576460752303423488]) on "
                     "cpu:0: numpy could not allocate it"]


def test_result_with_more_dimensions_than_the_limit(crash_lib):
    pytest.importorskip("numpy")
    lines = run_child(crash_lib, """
        import numpy as np
        x = np.zeros(1, dtype=np.float32)
        check(lambda: m.raw_result(65, 1, x))
        check(lambda: m.raw_result(65, 1))
        check(lambda: m.raw_result(64, 1, x).shape == (1,) * 64)
        print(tensorplug._core.MAX_NDIM)
    """)
    assert lines == [
        "ValueError: the returned tensor has 65 dimensions; tensorplug supports at most 64",
        "ValueError: the returned tensor has 65 dimensions; tensorplug supports at most 64",
        "ok: True",
        "64",
    ]


@pytest.mark.parametrize("framework", ["numpy", "torch", "paddle", "tensorplug"])
def test_result_with_null_strides(crash_lib, framework):
    if framework != "tensorplug":
        pytest.importorskip(framework)
    make = {
        "numpy": "import numpy as np; x = np.zeros(1, dtype=np.float32)",
        "torch": "import torch; x = torch.zeros(1)",
        "paddle": "import paddle; x = paddle.zeros([1])",
        "tensorplug": "import numpy as np; x = tensorplug.from_dlpack(np.zeros(1, dtype=np.float32))",
    }[framework]
    lines = run_child(crash_lib, setup=make, body="""
        import numpy as np
        r = m.raw_result(1, 0, x)          # 1-d [1, 2], strides NULL
        print(type(r).__module__.split(".")[0], np.from_dlpack(r).tolist())
        r2 = m.raw_result(3, 0)            # a tensorplug.Tensor
        print(r2.shape, r2.strides)
    """)
    module = {"numpy": "numpy", "torch": "torch", "paddle": "paddle", "tensorplug": "tensorplug"}[framework]
    assert lines == [f"{module} [1.0, 2.0]", "(1, 1, 1) (1, 1, 1)"]


@pytest.mark.parametrize("framework", ["torch", "paddle"])
def test_negative_stride_result_refused_without_use_after_free(crash_lib, framework):
    pytest.importorskip(framework)
    make = {"torch": "import torch; x = torch.zeros(1)", "paddle": "import paddle; x = paddle.zeros([1])"}[framework]
    lines = run_child(crash_lib, setup=make, body="""
        check(lambda: m.raw_result(1, 2, x))
    """)
    assert lines == [
        f"ValueError: {framework} cannot import a tensor with negative strides (stride -1 of dim 0); return a "
        "contiguous tensor or use output_framework() with another framework"
    ]


def test_negative_stride_result_as_numpy(crash_lib):
    pytest.importorskip("numpy")
    lines = run_child(crash_lib, """
        import numpy as np
        print(m.raw_result(1, 2, np.zeros(1, dtype=np.float32)).tolist())
    """)
    assert lines == ["[2.0, 1.0]"]


def test_jax_array_with_too_many_dimensions(crash_lib):
    pytest.importorskip("jax")
    lines = run_child(crash_lib, """
        import jax.numpy as jnp
        for ndim in (65, 2049):
            a = jnp.zeros((1,) * ndim)
            check(lambda: m.raw_result(1, 1, a))
        print(m.raw_result(1, 1, jnp.zeros((1,) * 64)).tolist())
    """, timeout=300)
    assert lines == [
        "BufferError: raw_result() argument 3: jax array has 65 dimensions; tensorplug supports at most 64",
        "BufferError: raw_result() argument 3: jax array has 2049 dimensions; tensorplug supports at most 64",
        "[1.0, 2.0]",
    ]


@pytest.mark.parametrize("held", ["python callable", "numpy", "jax", "tensorplug", "torch"])
def test_static_holding_python_objects_at_exit(crash_lib, held):
    setup = {
        "python callable": "m.keep_function(lambda v: v)",
        "numpy": "import numpy as np; m.keep_tensor(np.arange(4.0))",
        "jax": "import jax.numpy as jnp; m.keep_tensor(jnp.arange(4.0))",
        "tensorplug": "import numpy as np; m.keep_tensor(tensorplug.from_dlpack(np.arange(4.0)))",
        "torch": "import torch; m.keep_tensor(torch.arange(4.0))",
    }[held]
    module = setup.split(";")[0].split()[1].split(".")[0] if setup.startswith("import") else None
    if module:
        pytest.importorskip(module)
    # The static is destroyed after Py_Finalize: the deleter must not touch Python.
    assert run_child(crash_lib, "print('kept')", setup=setup) == ["kept"]


def test_callback_keeping_the_lent_view(crash_lib):
    pytest.importorskip("numpy")
    lines = run_child(crash_lib, """
        import numpy as np
        kept = []
        def callback(view):
            kept.append(view)
            print("inside", view.shape, float(np.from_dlpack(view).sum()))
        m.lend_view(callback, np.arange(3.0))
        view = kept[0]
        check(lambda: view.shape)
        check(lambda: view.data_ptr)
        check(lambda: np.from_dlpack(view))
        check(lambda: m.take_int(view))
        print(repr(view))
    """)
    expired = ("this tensorplug.Tensor was lent to a Python callback and is no longer valid: its data belongs to "
               "the kernel's caller and may be freed once the callback returns; copy what you need inside the "
               "callback")
    assert lines == [
        "inside (3,) 3.0",
        f"ValueError: {expired}",
        f"ValueError: {expired}",
        f"ValueError: {expired}",
        # An int parameter reads 0-d tensors (docs/calling.md, "Numbers"), so the expired view is
        # reported as such.
        f"ValueError: take_int() argument 1 'n': {expired}",
        "tensorplug.Tensor(<expired view>)",
    ]


def test_expired_view_passed_to_a_kernel(crash_lib):
    pytest.importorskip("numpy")
    lines = run_child(crash_lib, """
        import numpy as np
        kept = []
        m.lend_view(kept.append, np.arange(3.0))
        check(lambda: m.raw_result(1, 1, kept[0]))
    """)
    assert lines == [
        "ValueError: raw_result() argument 3: this tensorplug.Tensor was lent to a Python callback and is no "
        "longer valid: its data belongs to the kernel's caller and may be freed once the callback returns; copy "
        "what you need inside the callback"
    ]


@pytest.mark.parametrize("kind, expected", [
    ("bad_alloc", "MemoryError: "),
    ("stoi", "RuntimeError: tensorplug internal error (C++ exception): stoi"),
    ("out_of_range", "RuntimeError: tensorplug internal error (C++ exception): stoi"),
    ("string", "RuntimeError: tensorplug internal error (C++ exception): basic_string::substr: __pos (which is 1) "
               "> this->size() (which is 0)"),
    ("int", "RuntimeError: tensorplug internal error: unknown C++ exception"),
])
def test_cxx_exception_barrier(crash_lib, kind, expected):
    # A C++ exception thrown inside an entry point from Python becomes a Python exception.
    lines = run_child(crash_lib, f"""
        check(lambda: tensorplug._core._throw_for_test({kind!r}))
        print("alive")
    """)
    assert lines == [expected, "alive"]


# ---------------------------------------------------------------- allocation errors ----
ALLOC_SOURCE = r"""
tensorplug::Tensor alloc_like_dtype(tensorplug::TensorView like, int64_t code, int64_t bits, int64_t n) {
  return tensorplug::Tensor::FromEnvAlloc({n}, DLDataType{uint8_t(code), uint8_t(bits), 1}, tensorplug::kCPU);
}
"""


def test_allocator_refusing_a_dtype_is_a_type_error():
    torch = pytest.importorskip("torch")
    from tensorplug import cpp

    m = cpp.load_inline("alloc_dtype_errors", ALLOC_SOURCE, functions=["alloc_like_dtype"])
    # torch has no float8_e4m3b11fnuz (DLPack code 9); it reports that as out-of-memory.
    with pytest.raises(TypeError, match=r"^cannot allocate a float8_e4m3b11fnuz tensor on cpu:0: the allocator "
                                        r"refuses this dtype \(even for a one-element tensor\): "
                                        r"Unsupported code 9$"):
        m.alloc_like_dtype(torch.zeros(1), 9, 8, 4)
    # Real out-of-memory stays MemoryError, naming the size asked for.
    with pytest.raises(MemoryError, match=r"^cannot allocate 2305843009213693952 bytes \(shape "
                                          r"\[576460752303423488\]\) on cpu:0: "):
        m.alloc_like_dtype(torch.zeros(1), 2, 32, 2**59)
    assert m.alloc_like_dtype(torch.zeros(1), 2, 32, 3).dtype == torch.float32
