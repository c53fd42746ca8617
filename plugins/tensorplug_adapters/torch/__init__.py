"""torch adapter: torch's own DLPack C exchange table (torch >= 2.10), or ``__dlpack__``
through Python callables for older torch.

- Tensors that require grad are passed as their data (like ``tensor.detach()``): kernels
  called through tensorplug are not differentiable, and results never require grad.
- Tensors whose memory does not hold their values are refused with a ValueError, read or
  written (DLPack has no bit for them): conjugate views (``x.conj()`` of a complex tensor;
  call ``.resolve_conj()`` first) and tensors with the negative bit (``x.conj().imag``,
  ``torch._neg_view(x)``; call ``.resolve_neg()`` first). The core asks
  ``_native.lazy_view_probe`` (lazy_views.cc) per tensor (about 20 instructions). Ops
  (``tensorplug.op``) take them: torch's dispatcher resolves the bits before the kernel.
- A call that writes a tensor (an ``mview`` parameter) bumps its autograd version counter
  before the kernel runs, as torch's in-place ops do: a backward that saved the tensor
  raises instead of reading the new values, and an inference tensor is refused outside
  ``torch.inference_mode()`` (``_native.write_hook``, versions.cc).
- CUDA tensors on any device work: the current stream is taken for the tensor's device.
- Ops (``tensorplug.op``) become ``torch.library`` custom ops: see :mod:`.registration`.
"""

from __future__ import annotations

import os
import sys

from tensorplug import AdapterInfo, ExchangeTable, hookimpl

from . import registration

_table: ExchangeTable | None = None


def _torch_table(torch) -> ExchangeTable:
    global _table
    if _table is None:
        capsule = getattr(torch.Tensor, "__dlpack_c_exchange_api__", None)
        # torch (2.13 included) aborts the process when it imports a tensor with negative
        # strides ("Storage size calculation overflowed"): the core refuses them instead.
        negative_strides = False
        # A direct call that writes a tensor bumps its autograd version counter, as the op
        # path and torch's own in-place ops do (``_native.write_hook``).
        libraries = [os.path.join(os.path.dirname(torch.__file__), "lib", "libtorch_cpu.so")]
        from . import _native  # the plugin's compiled module (native.h)

        writes = _native.write_hook(torch, libraries)[0]
        if capsule is not None:
            probe = _native.lazy_view_probe(torch, libraries)[0]
            _table = ExchangeTable.from_capsule(capsule, "torch", lazy_views=probe,
                                                negative_strides=negative_strides, write_hook=writes)
        else:  # torch < 2.10
            _table = ExchangeTable.from_python(
                "torch",
                from_dlpack=torch.utils.dlpack.from_dlpack,
                to_dlpack=_export,
                current_stream=_current_stream,
                allocate=_allocate,
                negative_strides=negative_strides,
                write_hook=writes,
            )
    return _table


def _export(tensor):
    # torch < 2.10: the lazy view probe's refusals, in Python (this path calls __dlpack__).
    if tensor.is_conj() or tensor.is_neg():
        what = ("a torch conjugate view (x.is_conj()); call .resolve_conj() first" if tensor.is_conj() else
                "a torch tensor with the negative bit set (x.is_neg(), e.g. x.conj().imag); "
                "call .resolve_neg() first")
        raise ValueError(f"expected a tensor whose memory holds its values (DLPack has no conjugate or "
                         f"negative bit), got {what}")
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
                       capabilities=("exchange", "stream", "allocator", "output", "compiler"), fast_path=fast,
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
    registration.declared(op)


@hookimpl
def tensorplug_op_impl(op, arg_type):
    return registration.impl(op, arg_type)
