"""paddle adapter: paddle's own DLPack C exchange table (paddle >= 3.3), or
``paddle.utils.dlpack`` through Python callables for older paddle."""

from __future__ import annotations

import sys
import warnings

from tensorplug import AdapterInfo, ExchangeTable, hookimpl

_table: ExchangeTable | None = None


def _paddle_table(paddle) -> ExchangeTable:
    global _table
    if _table is None:
        capsule = getattr(paddle.Tensor, "__dlpack_c_exchange_api__", None)
        # paddle (3.3 included) imports a tensor with negative strides as a request for
        # ~2**64 bytes (MemoryError): the core refuses such tensors with a clear ValueError.
        if capsule is not None:
            _table = ExchangeTable.from_capsule(capsule, "paddle", negative_strides=False)
        else:  # paddle < 3.3
            _table = ExchangeTable.from_python(
                "paddle", from_dlpack=paddle.utils.dlpack.from_dlpack, to_dlpack=paddle.utils.dlpack.to_dlpack,
                current_stream=_current_stream, allocate=_allocate, negative_strides=False)
    return _table


def _current_stream(device_type, device_id):
    paddle = sys.modules["paddle"]
    if device_type == 2:
        return paddle.device.current_stream(f"gpu:{device_id}").stream_base.cuda_stream
    return None


def _allocate(shape, dtype, device):
    paddle = sys.modules["paddle"]
    place = "cpu" if device.type == "cpu" else f"gpu:{device.index}"
    return paddle.empty(shape, dtype=dtype).to(place)


@hookimpl
def tensorplug_adapter_info():
    paddle = sys.modules.get("paddle")
    fast = paddle is None or hasattr(paddle.Tensor, "__dlpack_c_exchange_api__")
    return AdapterInfo(name="paddle", framework="paddle", tensor_types=("paddle.Tensor",),
                       capabilities=("exchange", "stream", "allocator", "output"), fast_path=fast,
                       framework_distribution="paddlepaddle", stream_kinds=("cuda",))


@hookimpl
def tensorplug_exchange_table(tensor_type):
    paddle = sys.modules.get("paddle")
    if paddle is not None and issubclass(tensor_type, paddle.Tensor):
        return _paddle_table(paddle)
    return None


def import_paddle():
    """``import paddle``, as tensorplug does it for a user who asked for paddle by name
    (``output_framework("paddle")``, ``tensorplug demo``, the conformance kit): without
    paddle's import-time warning "No ccache found", which is about building paddle's own C++
    extensions, nothing tensorplug does."""
    paddle = sys.modules.get("paddle")
    if paddle is None:
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message="No ccache found", category=UserWarning)
            import paddle
    return paddle


@hookimpl
def tensorplug_output_table(framework):
    if framework == "paddle":
        return _paddle_table(import_paddle())
    return None


@hookimpl
def tensorplug_stream_handle(stream):
    paddle = sys.modules.get("paddle")
    if paddle is None or not isinstance(stream, getattr(paddle.device, "Stream", ())):
        return None
    place = stream.device
    index = place.gpu_device_id() if hasattr(place, "gpu_device_id") else 0
    return (("cuda", index), stream.stream_base.cuda_stream)
