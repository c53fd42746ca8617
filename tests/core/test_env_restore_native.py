"""The calling thread's environment after each native path, read directly (c_api.h:
TPEnvGetAllocator, TPEnvGetStream): torch's native kernel binds torch's allocator (and, on a
GPU, the stream) for the kernel, and XLA's handler lends the call's result buffers
(TPEnvLend); after each call, successful or failed, the thread's allocator and streams are
exactly what they were before. A sentinel allocator and sentinel stream handles, bound
through the C API before the call, must be back after it.

Neither path goes through the Python binding (which sets and restores its own): torch's
dispatcher calls the native kernel, XLA calls the handler. The XLA handler runs on the
calling thread for a small CPU computation; a run that lands on another thread is skipped,
saying so (its state is not this thread's).
"""

from __future__ import annotations

import ctypes
import functools
import threading
from pathlib import Path

import pytest

np = pytest.importorskip("numpy")

import tensorplug  # noqa: E402
from tensorplug import _core, cpp, like  # noqa: E402

KDLCPU, KDLCUDA = 1, 2
STREAMS = {(KDLCPU, 0): 0x5150, (KDLCUDA, 0): 0x5250}

PROBE = r"""
#include <unistd.h>
#include <sys/syscall.h>

static int64_t g_tid = 0, g_allocator = 0;

static int Sentinel(DLTensor*, DLManagedTensorVersioned**, void* ctx,
                    void (*set_error)(void*, const char*, const char*)) {
  set_error(ctx, "RuntimeError", "the sentinel allocator was called");
  return -1;
}

static void Record() {
  g_tid = syscall(SYS_gettid);
  g_allocator = reinterpret_cast<int64_t>(TPEnvGetAllocator());
}

tensorplug::Tensor touch(tensorplug::TensorView x) {
  Record();
  return tensorplug::Tensor::FromEnvAlloc(x.shape(), x.dtype(), x.device());
}
tensorplug::Tensor fail(tensorplug::TensorView x) {
  Record();
  (void)x;
  TENSORPLUG_THROW(ValueError) << "fail: refused";
}
int64_t last_tid() { return g_tid; }
int64_t last_allocator() { return g_allocator; }
int64_t sentinel_address() { return reinterpret_cast<int64_t>(&Sentinel); }
"""


@functools.cache
def _probe():
    mod = cpp.load_inline("env_restore_native_probe", PROBE,
                          functions=["touch", "fail", "last_tid", "last_allocator", "sentinel_address"])
    ops = (tensorplug.op("tpenv_native::touch", mod.touch, returns=like("x")),
           tensorplug.op("tpenv_native::fail", mod.fail, returns=like("x")))
    return mod, ops


@functools.cache
def _capi():
    lib = ctypes.CDLL(str(Path(_core.__file__).parent / "lib" / "libtensorplug.so"))
    lib.TPEnvGetAllocator.restype = ctypes.c_void_p
    lib.TPEnvSetAllocator.restype = ctypes.c_void_p
    lib.TPEnvSetAllocator.argtypes = [ctypes.c_void_p]
    lib.TPEnvGetStream.restype = ctypes.c_void_p
    lib.TPEnvGetStream.argtypes = [ctypes.c_int32, ctypes.c_int32]
    lib.TPEnvSetStream.restype = ctypes.c_void_p
    lib.TPEnvSetStream.argtypes = [ctypes.c_int32, ctypes.c_int32, ctypes.c_void_p]
    return lib


class _DLTensor(ctypes.Structure):
    _fields_ = [("data", ctypes.c_void_p), ("device_type", ctypes.c_int32), ("device_id", ctypes.c_int32),
                ("ndim", ctypes.c_int32), ("code", ctypes.c_uint8), ("bits", ctypes.c_uint8),
                ("lanes", ctypes.c_uint16), ("shape", ctypes.POINTER(ctypes.c_int64)),
                ("strides", ctypes.POINTER(ctypes.c_int64)), ("byte_offset", ctypes.c_uint64)]


def _lent_pending() -> bool:
    """Whether the thread still has tensors lent: with TPLentAllocator bound by hand, an
    allocation finds lent tensors, or reports that none are (the state after every call)."""
    lib = _capi()
    lent = ctypes.cast(lib.TPLentAllocator, ctypes.c_void_p).value
    saved = lib.TPEnvSetAllocator(lent)
    try:
        shape = (ctypes.c_int64 * 1)(3)
        prototype = _DLTensor(None, 1, 0, 1, 2, 32, 1, shape, None, 0)  # float32[3] on the CPU
        out = ctypes.c_void_p()
        lib.TPEnvAllocTensor.argtypes = [ctypes.POINTER(_DLTensor), ctypes.POINTER(ctypes.c_void_p)]
        if lib.TPEnvAllocTensor(ctypes.byref(prototype), ctypes.byref(out)) == 0:
            return True
        kind, message = ctypes.c_char_p(), ctypes.c_char_p()
        lib.TPErrorGet(ctypes.byref(kind), ctypes.byref(message))
        text = message.value  # before TPErrorClear, which frees it
        lib.TPErrorClear()
        return b"no tensors are lent" not in text
    finally:
        lib.TPEnvSetAllocator(saved)


def _state():
    lib = _capi()
    return {"allocator": lib.TPEnvGetAllocator() or 0, "lent pending": _lent_pending(),
            **{f"stream {k}": lib.TPEnvGetStream(*k) or 0 for k in STREAMS}}


@pytest.fixture
def sentinel_env():
    """Binds a sentinel allocator and sentinel streams for this thread; yields the state."""
    mod, _ = _probe()
    lib = _capi()
    saved_allocator = lib.TPEnvSetAllocator(mod.sentinel_address())
    saved_streams = {k: lib.TPEnvSetStream(*k, v) for k, v in STREAMS.items()}
    try:
        expected = _state()
        assert expected == {"allocator": mod.sentinel_address(), "lent pending": False,
                            **{f"stream {k}": v for k, v in STREAMS.items()}}
        yield expected
    finally:
        for k, v in saved_streams.items():
            lib.TPEnvSetStream(*k, v)
        lib.TPEnvSetAllocator(saved_allocator)


def test_torch_native_kernel_restores_the_environment(sentinel_env):
    torch = pytest.importorskip("torch")
    from tensorplug_adapters.torch import native as torch_native

    mod, (touch, fail) = _probe()
    x = torch.ones(3)
    out = touch(x)
    assert torch_native.reason(touch) is None and torch_native.reason(fail) is None
    assert isinstance(out, torch.Tensor) and out.shape == (3,)
    assert mod.last_tid() == threading.get_native_id()  # the kernel ran on this thread
    assert mod.last_allocator() not in (0, sentinel_env["allocator"])  # torch's, during the call
    assert _state() == sentinel_env
    with pytest.raises(RuntimeError, match="fail: refused"):  # torch's kernels raise RuntimeError
        fail(x)
    assert mod.last_tid() == threading.get_native_id()
    assert _state() == sentinel_env


def test_xla_handler_restores_the_environment(sentinel_env):
    jax = pytest.importorskip("jax")
    mod, (touch, fail) = _probe()
    lent = ctypes.cast(_capi().TPLentAllocator, ctypes.c_void_p).value
    out = jax.block_until_ready(jax.jit(lambda x: touch(x))(np.ones(3, np.float32)))
    assert out.shape == (3,)
    if mod.last_tid() != threading.get_native_id():
        pytest.skip("the XLA handler ran on another thread: this thread's environment says nothing about it")
    assert mod.last_allocator() == lent  # the results were lent during the call
    assert _state() == sentinel_env
    with pytest.raises(Exception, match="fail: refused"):
        jax.block_until_ready(jax.jit(lambda x: fail(x))(np.ones(3, np.float32)))
    assert mod.last_tid() == threading.get_native_id()
    assert _state() == sentinel_env
