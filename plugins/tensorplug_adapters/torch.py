"""torch adapter: torch's own DLPack C exchange table (torch >= 2.10), or ``__dlpack__``
through Python callables for older torch.

- Tensors that require grad are passed as their data (like ``tensor.detach()``): kernels
  called through tensorplug are not differentiable, and results never require grad.
- Conjugate views (``x.conj()`` of a complex tensor) are refused with a ValueError (DLPack
  has no conjugate bit); call ``.resolve_conj()`` first. Known limit: the negative bit of
  ``x.conj().imag`` (a real view) is not detected on the C-table path (checking every real
  tensor would cost a Python call per argument); call ``.resolve_neg()`` on such views.
- CUDA tensors on any device work: the current stream is taken for the tensor's device.
- Ops (``tensorplug.op``) become ``torch.library`` custom ops: see ``torch_compile``.
"""

from __future__ import annotations

import sys

from tensorplug import AdapterInfo, ExchangeTable, hookimpl

from . import torch_compile

_table: ExchangeTable | None = None


def _torch_table(torch) -> ExchangeTable:
    global _table
    if _table is None:
        capsule = getattr(torch.Tensor, "__dlpack_c_exchange_api__", None)
        # torch (2.13 included) aborts the process when it imports a tensor with negative
        # strides ("Storage size calculation overflowed"): the core refuses them instead.
        negative_strides = False
        if capsule is not None:
            _table = ExchangeTable.from_capsule(capsule, "torch", complex_check=_refuse_conjugate,
                                                negative_strides=negative_strides)
        else:  # torch < 2.10
            _table = ExchangeTable.from_python(
                "torch",
                from_dlpack=torch.utils.dlpack.from_dlpack,
                to_dlpack=_export,
                current_stream=_current_stream,
                allocate=_allocate,
                negative_strides=negative_strides,
            )
    return _table


def _refuse_conjugate(tensor):
    # DLPack has no conjugate bit: passing the data of x.conj() would silently drop it.
    if tensor.is_conj():
        raise ValueError("a conjugate view cannot be passed to a kernel (DLPack has no conjugate bit); "
                         "call .resolve_conj() first")


def _export(tensor):
    _refuse_conjugate(tensor) if tensor.is_complex() else None
    return tensor.detach()


def _current_stream(device_type, device_id):
    torch = sys.modules["torch"]
    if device_type in (2, 10):  # CUDA / ROCm
        return torch.cuda.current_stream(device_id).cuda_stream
    return None


def _allocate(shape, dtype, device):
    torch = sys.modules["torch"]
    name = "cuda" if device.type in ("cuda", "rocm") else device.type
    return torch.empty(shape, dtype=getattr(torch, dtype), device=f"{name}:{device.index}")


@hookimpl
def tensorplug_adapter_info():
    torch = sys.modules.get("torch")
    fast = torch is None or hasattr(torch.Tensor, "__dlpack_c_exchange_api__")
    return AdapterInfo(name="torch", framework="torch", tensor_types=("torch.Tensor",),
                       capabilities=("exchange", "stream", "allocator", "output"), fast_path=fast,
                       stream_kinds=("cuda", "rocm"),
                       # aten: torch's operators; prim, prims: its primitives (torch.library reserves
                       # "prim" itself; an "aten::add" declared here would dispatch to torch's own add)
                       op_namespaces=("aten", "prim", "prims"))


@hookimpl
def tensorplug_exchange_table(tensor_type):
    torch = sys.modules.get("torch")
    if torch is not None and issubclass(tensor_type, torch.Tensor):
        return _torch_table(torch)
    return None


@hookimpl
def tensorplug_output_table(framework):
    if framework == "torch":
        import torch

        return _torch_table(torch)
    return None


@hookimpl
def tensorplug_stream_handle(stream):
    torch = sys.modules.get("torch")
    if torch is not None and torch.cuda.is_available() and isinstance(stream, torch.cuda.Stream):
        return (("cuda", stream.device.index or 0), stream.cuda_stream)
    return None


@hookimpl
def tensorplug_op_declared(op):
    torch_compile.declared(op)


@hookimpl
def tensorplug_op_impl(op, arg_type):
    return torch_compile.impl(op, arg_type)
