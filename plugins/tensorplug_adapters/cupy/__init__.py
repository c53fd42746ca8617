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


def exported(x):
    """``x`` for its ``__dlpack__``, refusing negative strides: cupy's export divides each
    byte stride by the item size as unsigned numbers, so -16 bytes of float32 reach the kernel
    as 4611686018427387900 elements (seen with cupy 14.2 on a GPU), where it would read wild
    memory."""
    for dim, stride in enumerate(x.strides):
        if stride < 0:
            raise ValueError(f"cupy cannot export a tensor with negative strides (stride {stride // x.itemsize} of "
                             f"dim {dim}): its DLPack export turns them into huge positive ones; pass "
                             f"cupy.ascontiguousarray(x)")
    return x


def _cupy_table() -> ExchangeTable:
    global _table
    if _table is None:
        # negative_strides=False: cupy's import of negative strides is unproven (its export's
        # are wrong), so the core refuses to hand cupy such a tensor.
        _table = ExchangeTable.from_python("cupy", from_dlpack=_cupy().from_dlpack, to_dlpack=exported,
                                           current_stream=_current_stream, allocate=_allocate,
                                           negative_strides=False)
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
