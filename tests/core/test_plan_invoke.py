"""TPPlanInvoke called the way a third party's op kernel calls it, through ctypes with no
framework: a caller that makes its own views and skips TPPlanPrepare (``expected`` NULL, as
XLA's handler does) still has every written view checked in the call, and
TP_ANY_FLAG_COMPACT (the producer vouching for a dense view) lets only a view that carries it
skip the overlap test."""

from __future__ import annotations

import ctypes
from pathlib import Path

import numpy as np
import pytest

from tensorplug import cpp, plans

K_TP_NONE, K_TP_FLOAT, K_TP_DLTENSOR_PTR = 0, 2, 8
TP_ANY_FLAG_READ_ONLY, TP_ANY_FLAG_COMPACT = 1, 2


class DLTensor(ctypes.Structure):
    _fields_ = [("data", ctypes.c_void_p), ("device_type", ctypes.c_int32), ("device_id", ctypes.c_int32),
                ("ndim", ctypes.c_int32), ("code", ctypes.c_uint8), ("bits", ctypes.c_uint8),
                ("lanes", ctypes.c_uint16), ("shape", ctypes.POINTER(ctypes.c_int64)),
                ("strides", ctypes.POINTER(ctypes.c_int64)), ("byte_offset", ctypes.c_uint64)]


class TPAnyValue(ctypes.Union):
    _fields_ = [("v_int64", ctypes.c_int64), ("v_float64", ctypes.c_double), ("v_pointer", ctypes.c_void_p)]


class TPAny(ctypes.Structure):
    _fields_ = [("type_index", ctypes.c_int32), ("flags", ctypes.c_uint32), ("value", TPAnyValue)]


class TPPlanBinding(ctypes.Structure):
    _fields_ = [("device_type", ctypes.c_int32), ("device_id", ctypes.c_int32), ("stream", ctypes.c_void_p),
                ("allocator", ctypes.c_void_p), ("lent", ctypes.c_void_p)]


@pytest.fixture(scope="module")
def lib():
    lib = ctypes.CDLL(str(Path(cpp.lib_dir()) / "libtensorplug.so"))
    lib.TPPlanInvoke.argtypes = [ctypes.c_void_p, ctypes.POINTER(TPAny), ctypes.POINTER(TPPlanBinding),
                                 ctypes.c_void_p, ctypes.POINTER(TPAny)]
    lib.TPErrorGet.argtypes = [ctypes.POINTER(ctypes.c_char_p), ctypes.POINTER(ctypes.c_char_p)]
    lib.TPErrorClear.argtypes = []
    return lib


@pytest.fixture(scope="module")
def axpy_plan(ops):
    capsule = plans.make(ops.axpy)
    get = ctypes.pythonapi.PyCapsule_GetPointer
    get.restype, get.argtypes = ctypes.c_void_p, [ctypes.py_object, ctypes.c_char_p]
    return capsule, get(capsule, b"tensorplug.TPPlanHandle")


def view(array: np.ndarray, keep: list) -> DLTensor:
    """A float32 view of `array` (its shape and element strides kept alive in `keep`)."""
    shape = (ctypes.c_int64 * array.ndim)(*array.shape)
    strides = (ctypes.c_int64 * array.ndim)(*(s // array.itemsize for s in array.strides))
    keep += [shape, strides]
    return DLTensor(data=array.ctypes.data, device_type=1, device_id=0, ndim=array.ndim, code=2, bits=32, lanes=1,
                    shape=shape, strides=strides, byte_offset=0)


def invoke(lib, plan, x, y, out, alpha, out_flags):
    """axpy(x, y, out, alpha) through TPPlanInvoke with `expected` NULL: (rc, kind, message)."""
    keep: list = []
    views = [view(x, keep), view(y, keep), view(out, keep)]
    args = (TPAny * 4)()
    for k, (v, flags) in enumerate(zip(views, (TP_ANY_FLAG_READ_ONLY, TP_ANY_FLAG_READ_ONLY, out_flags))):
        args[k].type_index, args[k].flags = K_TP_DLTENSOR_PTR, flags
        args[k].value.v_pointer = ctypes.addressof(v)
    args[3].type_index, args[3].value.v_float64 = K_TP_FLOAT, alpha
    binding = TPPlanBinding(device_type=1, device_id=0)
    result = TPAny()
    rc = lib.TPPlanInvoke(plan, args, ctypes.byref(binding), None, ctypes.byref(result))
    kind, message = ctypes.c_char_p(), ctypes.c_char_p()
    if rc != 0:
        lib.TPErrorGet(ctypes.byref(kind), ctypes.byref(message))
        kind, message = kind.value.decode(), message.value.decode()
        lib.TPErrorClear()
    assert result.type_index == K_TP_NONE  # destination passing: nothing returned, nothing to release
    return rc, kind, message


def test_a_written_view_whose_elements_overlap_is_refused_without_prepare(lib, axpy_plan):
    x, y = np.arange(4, dtype=np.float32), np.ones(4, dtype=np.float32)
    base = np.zeros(1, dtype=np.float32)
    out = np.lib.stride_tricks.as_strided(base, shape=(4,), strides=(0,), writeable=True)
    rc, kind, message = invoke(lib, axpy_plan[1], x, y, out, 2.0, out_flags=0)
    assert (rc, kind) == (-1, "ValueError")
    assert message == ("tptest::axpy(): argument 'out': expected a tensor whose elements do not overlap (the "
                       "kernel writes it), got shape [4] strides [0]: several elements share memory (as after "
                       "expand() or broadcast_to); pass a copy")
    assert base[0] == 0  # the kernel never ran


@pytest.mark.parametrize("out_flags", [0, TP_ANY_FLAG_COMPACT], ids=["checked", "vouched-compact"])
def test_a_dense_written_view_is_written(lib, axpy_plan, out_flags):
    x, y = np.arange(6, dtype=np.float32).reshape(2, 3), np.ones((2, 3), dtype=np.float32)
    out = np.zeros((2, 3), dtype=np.float32)
    assert invoke(lib, axpy_plan[1], x, y, out, 2.0, out_flags)[0] == 0
    np.testing.assert_array_equal(out, 2.0 * x + y)


def test_a_strided_written_view_that_does_not_overlap_is_written(lib, axpy_plan):
    # Not compact (every other column), so the full overlap test runs, and passes it.
    x, y = np.arange(3, dtype=np.float32), np.ones(3, dtype=np.float32)
    storage = np.zeros(6, dtype=np.float32)
    out = storage[::2]
    assert invoke(lib, axpy_plan[1], x, y, out, 3.0, out_flags=0)[0] == 0
    np.testing.assert_array_equal(storage, [1, 0, 4, 0, 7, 0])
