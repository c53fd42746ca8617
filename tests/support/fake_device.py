"""A test-only adapter whose tensors say they live on a GPU, so that every rule tensorplug
applies to non-CPU tensors is tested on every machine.

``FakeDeviceTensor`` holds real host memory (a numpy array, or a ``tensorplug.Tensor`` the
core handed back) and reports the device it was given: ``(kDLCUDA, 0)`` by default. Its
DLPack export is numpy's (or tensorplug's) with the device field rewritten, so the core
sees a CUDA tensor whose pointer no test kernel dereferences (the kit's element kernels
refuse non-host tensors; the others never read data). Should something read it anyway, the
memory is there: nothing can crash.

``FakeDeviceAdapter`` builds its table from Python callables, the path a third party
writes, and records what the core asks of it: every ``current_stream(device_type,
device_id)`` query and every ``allocate(shape, dtype, device)``. Its current stream per
device is a plain dict the tests set, like ``torch.cuda.stream(s)`` does for torch.

Register it in a fixture (``tensorplug.register_adapter``) and unregister it after; the
kit's Framework for it (``FakeDeviceFramework``) certifies it through the conformance kit,
CUDA checks included.
"""

from __future__ import annotations

import contextlib
import ctypes
import itertools

import numpy as np

import tensorplug
from tensorplug.testing import Framework, numpy_view

CPU, CUDA = 1, 2  # DLDeviceType codes
UINT, BFLOAT = 1, 4  # DLDataTypeCode codes


class _DLDevice(ctypes.Structure):
    _fields_ = [("device_type", ctypes.c_int32), ("device_id", ctypes.c_int32)]


class _ManagedTensorVersioned(ctypes.Structure):
    """DLManagedTensorVersioned (DLPack 1.x), its DLTensor inlined."""

    _fields_ = [("major", ctypes.c_uint32), ("minor", ctypes.c_uint32), ("manager_ctx", ctypes.c_void_p),
                ("deleter", ctypes.c_void_p), ("flags", ctypes.c_uint64), ("data", ctypes.c_void_p),
                ("device", _DLDevice), ("ndim", ctypes.c_int32), ("dtype_code", ctypes.c_uint8),
                ("dtype_bits", ctypes.c_uint8), ("dtype_lanes", ctypes.c_uint16), ("shape", ctypes.c_void_p),
                ("strides", ctypes.c_void_p), ("byte_offset", ctypes.c_uint64)]


_capsule_pointer = ctypes.pythonapi.PyCapsule_GetPointer
_capsule_pointer.restype = ctypes.c_void_p
_capsule_pointer.argtypes = [ctypes.py_object, ctypes.c_char_p]


def relabeled_capsule(producer, device: tuple[int, int], bfloat16_as_uint16: bool = False):
    """``producer.__dlpack__`` as a versioned capsule whose tensor reports ``device``.

    numpy exports no bfloat16 (ml_dtypes'): such an array is exported as its uint16 bits,
    relabelled bfloat16; ``bfloat16_as_uint16`` does the reverse, for numpy to import."""
    bfloat16 = isinstance(producer, np.ndarray) and producer.dtype.name == "bfloat16"
    if bfloat16:
        producer = producer.view(np.uint16)
    capsule = producer.__dlpack__(max_version=(1, 0))
    managed = _ManagedTensorVersioned.from_address(_capsule_pointer(capsule, b"dltensor_versioned"))
    managed.device.device_type, managed.device.device_id = device
    if bfloat16:
        managed.dtype_code = BFLOAT
    if bfloat16_as_uint16 and managed.dtype_code == BFLOAT:
        managed.dtype_code = UINT
    return capsule


def managed_of(capsule) -> _ManagedTensorVersioned:
    """The DLManagedTensorVersioned of an unconsumed versioned capsule, to edit in place."""
    return _ManagedTensorVersioned.from_address(_capsule_pointer(capsule, b"dltensor_versioned"))


class _HostView:
    """A DLPack producer of a fake tensor's memory labelled as the CPU (for numpy)."""

    def __init__(self, base):
        self.base = base

    def __dlpack__(self, **kwargs):
        return relabeled_capsule(self.base, (CPU, 0), bfloat16_as_uint16=True)

    def __dlpack_device__(self):
        return (CPU, 0)


class FakeDeviceTensor:
    """Host memory that reports ``device`` ((device_type, device_id)) through DLPack."""

    def __init__(self, base, device=(CUDA, 0)):
        self.base = base  # a numpy array or a tensorplug.Tensor: owns the memory
        self.device = tuple(device)

    @property
    def shape(self):
        return tuple(self.base.shape)

    def __dlpack__(self, **kwargs):
        return relabeled_capsule(self.base, self.device)

    def __dlpack_device__(self):
        return self.device

    def numpy(self):
        """The memory as a numpy array (a view)."""
        if isinstance(self.base, np.ndarray):
            return self.base
        array = np.from_dlpack(_HostView(self.base))
        if str(self.base.dtype) == "bfloat16":
            import ml_dtypes

            array = array.view(ml_dtypes.bfloat16)
        return array

    @property
    def data_ptr(self) -> int:
        return self.numpy().__array_interface__["data"][0]

    def __repr__(self):
        return f"FakeDeviceTensor(shape={self.shape}, device={self.device})"


class FakeStream:
    """A stream object of the fake framework, for ``tensorplug.use_stream``."""

    def __init__(self, device_id: int, handle: int):
        self.device_id, self.handle = device_id, handle


def _device_code(device) -> tuple[int, int]:
    """(device_type, device_id) of a tensorplug.Device."""
    return {"cpu": CPU, "cuda": CUDA}[device.type], device.index


class FakeDeviceAdapter:
    """The adapter of one FakeDeviceTensor subclass (several can be registered at once).

    ``streams[device_id]`` is the current stream it reports for ``(kDLCUDA, device_id)``
    (default ``0xC0DA00 + device_id``); ``stream_queries`` and ``allocations`` record
    what the core asked."""

    _names = itertools.count()

    def __init__(self, name: str = "fakegpu", stream_base: int = 0xC0DA00):
        self.name = name
        self.tensor_type = type(f"FakeDeviceTensor_{name.replace('-', '_')}", (FakeDeviceTensor,), {})
        self.stream_base = stream_base
        self.streams: dict[int, int] = {}
        self.stream_queries: list[tuple[int, int]] = []
        self.allocations: list[tuple[tuple[int, ...], str, str]] = []
        self.table = tensorplug.ExchangeTable.from_python(
            name, from_dlpack=self._from_dlpack, current_stream=self._current_stream, allocate=self._allocate)

    # What the core calls.
    def _from_dlpack(self, tensor):
        return self.tensor_type(tensor, tensor.__dlpack_device__())

    def _current_stream(self, device_type, device_id):
        self.stream_queries.append((device_type, device_id))
        if device_type != CUDA:
            return None
        return self.streams.get(device_id, self.stream_base + device_id)

    def _allocate(self, shape, dtype, device):
        self.allocations.append((tuple(shape), str(dtype), str(device)))
        if str(dtype) == "bfloat16":
            import ml_dtypes

            data = np.empty(shape, ml_dtypes.bfloat16)
        else:
            data = np.empty(shape, str(dtype))
        return self.tensor_type(data, _device_code(device))

    # For tests.
    def tensor(self, array, device=(CUDA, 0)):
        """A tensor of this adapter holding a copy of ``array``."""
        return self.tensor_type(np.array(array, copy=True), device)

    def allocated_bytes(self) -> int:
        total = 0
        for shape, dtype, _ in self.allocations:
            n = 1
            for extent in shape:
                n *= extent
            total += n * (2 if dtype == "bfloat16" else np.dtype(dtype).itemsize)
        return total

    def clear(self):
        self.stream_queries.clear()
        self.allocations.clear()

    # The hooks.
    @tensorplug.hookimpl
    def tensorplug_adapter_info(self):
        return tensorplug.AdapterInfo(name=self.name, framework="numpy", tensor_types=(self.tensor_type.__name__,),
                                      capabilities=("exchange", "stream", "allocator", "output"), fast_path=False,
                                      stream_kinds=("cuda",))

    @tensorplug.hookimpl
    def tensorplug_exchange_table(self, tensor_type):
        return self.table if tensor_type is self.tensor_type else None

    @tensorplug.hookimpl
    def tensorplug_output_table(self, framework):
        return self.table if framework == self.name else None

    @tensorplug.hookimpl
    def tensorplug_stream_handle(self, stream):
        if isinstance(stream, FakeStream) and getattr(stream, "adapter", None) is self:
            return ((CUDA, stream.device_id), stream.handle)
        return None

    def new_stream(self, device_id: int, handle: int) -> FakeStream:
        stream = FakeStream(device_id, handle)
        stream.adapter = self
        return stream


@contextlib.contextmanager
def registered(*adapters):
    """Register the adapters for the duration of the block, then unregister them."""
    done = []
    try:
        for adapter in adapters:
            tensorplug.register_adapter(adapter)
            done.append(adapter)
        yield adapters
    finally:
        for adapter in reversed(done):
            tensorplug.unregister_adapter(adapter)


class FakeDeviceFramework(Framework):
    """The conformance kit's Framework for a FakeDeviceAdapter: tensors on ``cpu`` (real
    host tensors the element kernels read) and on the fake ``cuda:0`` and ``cuda:1``,
    where the kit's device checks (stream, allocator, primary argument) run."""

    module = "numpy"

    def __init__(self, adapter: FakeDeviceAdapter):
        self.adapter = adapter
        self.name = adapter.name

    def cuda_devices(self):
        return ["cuda:0", "cuda:1"]

    def unsupported_dtype(self, dtype):
        return None

    @staticmethod
    def _code(device) -> tuple[int, int]:
        kind, _, index = str(device or "cpu").partition(":")
        return {"cpu": CPU, "cuda": CUDA}[kind], int(index or 0)

    def from_numpy(self, array, device=None, dtype=None):
        if dtype == "bfloat16":
            import ml_dtypes

            array = array.astype(ml_dtypes.bfloat16)
        return self.adapter.tensor(array, self._code(device))

    def as_strided(self, base, shape, strides, offset):
        return self.adapter.tensor_type(numpy_view(base.numpy(), shape, strides, offset), base.device)

    def to_numpy(self, x):
        a = np.array(x.numpy(), copy=True)
        return a.astype(np.float32) if a.dtype.name == "bfloat16" else a

    def data_ptr(self, x):
        return x.data_ptr

    def output_type(self):
        return self.adapter.tensor_type

    def read_only_tensor(self, array):
        frozen = array.copy()
        frozen.flags.writeable = False  # numpy's DLPack export carries the read-only flag
        return self.adapter.tensor_type(frozen, (CPU, 0))

    def allocation_counter(self, device):
        adapter = self.adapter

        @contextlib.contextmanager
        def counting():
            start = adapter.allocated_bytes()
            yield lambda: adapter.allocated_bytes() - start

        return counting()

    def current_stream(self, device):
        kind, index = self._code(device)
        if kind != CUDA:
            return None
        return self.adapter.streams.get(index, self.adapter.stream_base + index)

    def stream(self, device):
        kind, index = self._code(device)
        if kind != CUDA:
            return None
        adapter = self.adapter

        @contextlib.contextmanager
        def using():
            handle = 0x5A000 + index
            stream = adapter.new_stream(index, handle)
            previous = adapter.streams.get(index)
            adapter.streams[index] = handle
            try:
                yield stream, handle
            finally:
                if previous is None:
                    adapter.streams.pop(index)
                else:
                    adapter.streams[index] = previous

        return using()
