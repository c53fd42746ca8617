"""cupy adapter: ``cupy.ndarray`` through Python callables (cupy has no DLPack C exchange
table). Kernels run on cupy's current stream of the array's device (cupy's per-thread,
per-device stream); tensors allocated during a call come from cupy's memory pool."""

from __future__ import annotations

import sys

from tensorplug import AdapterInfo, ExchangeTable, hookimpl

_table: ExchangeTable | None = None


def _cupy():
    return sys.modules["cupy"]


def _current_stream(device_type, device_id):
    cupy = _cupy()
    with cupy.cuda.Device(device_id):
        return cupy.cuda.get_current_stream().ptr or None


def _allocate(shape, dtype, device):
    cupy = _cupy()
    if device.type not in ("cuda", "rocm"):
        raise ValueError(f"cupy cannot allocate on {device}")
    with cupy.cuda.Device(device.index):
        return cupy.empty(shape, dtype=dtype)


def _cupy_table() -> ExchangeTable:
    global _table
    if _table is None:
        _table = ExchangeTable.from_python("cupy", from_dlpack=_cupy().from_dlpack,
                                           current_stream=_current_stream, allocate=_allocate)
    return _table


@hookimpl
def tensorplug_adapter_info():
    return AdapterInfo(name="cupy", framework="cupy", tensor_types=("cupy.ndarray",),
                       capabilities=("exchange", "stream", "allocator", "output"), fast_path=False,
                       framework_distribution="cupy-cuda12x", stream_kinds=("cuda",))


@hookimpl
def tensorplug_exchange_table(tensor_type):
    cupy = sys.modules.get("cupy")
    if cupy is not None and issubclass(tensor_type, cupy.ndarray):
        return _cupy_table()
    return None


@hookimpl
def tensorplug_output_table(framework):
    if framework == "cupy":
        import cupy  # noqa: F401  (asked for by name)

        return _cupy_table()
    return None


@hookimpl
def tensorplug_stream_handle(stream):
    cupy = sys.modules.get("cupy")
    if cupy is None or not isinstance(stream, cupy.cuda.Stream):
        return None
    return (("cuda", stream.device_id), stream.ptr)
