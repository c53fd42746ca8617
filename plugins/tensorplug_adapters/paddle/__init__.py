"""paddle adapter: paddle's own DLPack C exchange table (paddle >= 3.3), or
``paddle.utils.dlpack`` through Python callables for older paddle. A call that writes a
tensor (an ``mview`` parameter) bumps its inplace version before the kernel runs, as
paddle's in-place ops do."""

from __future__ import annotations

import sys
import warnings

from tensorplug import AdapterInfo, ExchangeTable, hookimpl
from tensorplug.gradients import no_backward_message

_table: ExchangeTable | None = None


def _paddle_table(paddle) -> ExchangeTable:
    global _table
    if _table is None:
        capsule = getattr(paddle.Tensor, "__dlpack_c_exchange_api__", None)
        # paddle (3.3 included) imports a tensor with negative strides as a request for
        # ~2**64 bytes (MemoryError): the core refuses such tensors with a clear ValueError.
        # A call that writes a tensor bumps its inplace version, as paddle's in-place ops do,
        # so that a backward that saved it raises instead of reading the new values.
        writes = paddle.Tensor._bump_inplace_version
        if capsule is not None:
            _table = ExchangeTable.from_capsule(capsule, "paddle", negative_strides=False, write_hook=writes)
        else:  # paddle < 3.3
            _table = ExchangeTable.from_python(
                "paddle", from_dlpack=paddle.utils.dlpack.from_dlpack, to_dlpack=paddle.utils.dlpack.to_dlpack,
                current_stream=_current_stream, allocate=_allocate, negative_strides=False, write_hook=writes)
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


# ------------------------------------------------------------------------- ops ----
# An op called with paddle values: eagerly, the kernel function (the fastest call) unless a
# gradient may flow through it; otherwise, and for the static values of ``paddle.jit.to_static``
# (SOT and full_graph), paddle's operator of the op (static.py: a custom operator built
# at run time, whose grad operator runs the declared backward or refuses naming the op).


def _make_impl(op, paddle):
    """The callable the paddle adapter hands ``op`` for paddle tensors and static values.

    Marked for paddle's ``to_static`` as already unified (``paddle.jit.marker.unified``):
    neither SOT nor the AST transform rewrites it; both call it with the static values
    (``paddle.pir.Value``) of the program being built, and each call adds one operator."""
    from paddle.jit.marker import unified

    value_type, tensor_type, grad_enabled = paddle.pir.Value, paddle.Tensor, paddle.is_grad_enabled
    direct = op.call_compact if op.contiguous else op.function
    written = bool(op.written)

    def call(*args, **kwargs):
        traced = wants_grad = False
        for value in (*args, *kwargs.values()) if kwargs else args:
            for item in value if type(value) in (list, tuple) else (value,):
                if isinstance(item, value_type):
                    traced = True
                elif isinstance(item, tensor_type) and not item.stop_gradient:
                    wants_grad = True
        if not traced and not (wants_grad and grad_enabled()):
            return direct(*args, **kwargs)  # eager, no gradient: the kernel function
        if written and not traced:  # as torch's adapter: a gradient through an eager write would be wrong
            raise RuntimeError(f"{no_backward_message(op)}; or call it under paddle.no_grad(), on tensors with "
                               "stop_gradient=True")
        from . import static

        return static.call(op, args, kwargs)

    call.__name__ = op.opname
    call.__qualname__ = f"paddle_op_{op.namespace}_{op.opname}"
    call.__doc__ = op.__doc__
    return unified(call)


_op_impls: dict = {}


def _impl(op, paddle):
    impl = _op_impls.get(op.name)
    if impl is None:
        impl = _op_impls[op.name] = _make_impl(op, paddle)
    return impl


@hookimpl
def tensorplug_op_declared(op):
    # SOT traces an op's Python __call__, which must find paddle's types resolved: a first
    # resolve() inside SOT runs the adapter hooks under its simulation and fails.
    paddle = sys.modules.get("paddle")
    if paddle is not None:
        _resolve_paddle_types(op, paddle)
    else:
        from ..after_import import call_after_import

        call_after_import("paddle", _resolve_all_after_import)
    return None


def _resolve_paddle_types(op, paddle) -> None:
    for arg_type in (paddle.Tensor, paddle.pir.Value):
        op.resolve(arg_type)
    _mark_unified(op, paddle)


def _mark_unified(op, paddle) -> None:
    """Mark the op itself as ``paddle.jit.marker.unified`` marks a function: SOT then calls
    it as a paddle API, with the static values of the program (it would otherwise run the
    op's C call on its simulation tensors, and fail), and the AST transform calls it as it
    is. ``unified`` takes functions only; the attribute it sets is the one set here."""
    from paddle.jit.dy2static.utils import TransformOptions

    mode = TransformOptions.ToStaticMode.SOT | TransformOptions.ToStaticMode.AST
    setattr(op, TransformOptions.TRANSFORM_OPTIONS_ATTR_NAME, TransformOptions().with_skip_transform_mode(mode))


def _resolve_all_after_import(paddle) -> None:
    from tensorplug.ops import declared_ops

    for op in declared_ops():
        _resolve_paddle_types(op, paddle)


@hookimpl
def tensorplug_op_impl(op, arg_type):
    paddle = sys.modules.get("paddle")
    if paddle is None or not (issubclass(arg_type, paddle.Tensor) or issubclass(arg_type, paddle.pir.Value)):
        return None
    return _impl(op, paddle)
