"""tensorplug: ship compiled kernels to every Python array framework.

``import tensorplug`` imports no array framework: adapters look their framework up in
``sys.modules`` when one of its tensors is passed.
"""

from __future__ import annotations

from . import _core, _module, _registry, _signature, storage
from ._core import Function, Handle, Tensor
from ._context import get_raw_stream, output_framework, use_raw_stream, use_stream
from ._module import Module, load_module
from ._module import load_library, load_module_from_package
from ._native import function_from_pointer
from ._registry import (AdapterInfo, AdapterRecord, ExchangeTable, adapters, output_table, register_adapter,
                        unregister_adapter)
from ._types import Device
from .gradients import backward
from .ops import Op, get_op, op
from .shapes import Output, TensorSpec, like

__version__ = "0.1.0"

_core.set_device_class(Device)
_core.set_signature_builder(_signature.build)
_core.set_resolver(_registry.registry.resolve)
_core.set_scalar_resolver(_registry.registry.scalar_kind)


def _tvm_ffi():
    from . import tvm_ffi  # on the first library built for apache tvm-ffi, not at ``import tensorplug``

    return tvm_ffi


_module.set_tvm_ffi(_tvm_ffi)


def from_dlpack(obj) -> Tensor:
    """A :class:`Tensor` sharing the memory of ``obj`` (a tensor of any installed adapter,
    or a DLPack capsule)."""
    return _core.from_dlpack(obj)


def empty(shape, dtype, device="cpu") -> Tensor:
    """A new, uninitialized :class:`Tensor` from tensorplug's own allocator (CPU only):
    ``shape`` a sequence of ints, ``dtype`` a name such as ``"float32"`` (or a framework
    dtype), ``device`` ``"cpu"``. Adapters without a CPU allocator of their own use it."""
    return _core.empty(shape, dtype, device)


def register_global_func(name: str, f=None, override: bool = False):
    """Register ``f`` (a Python callable or a compiled Function) under ``name`` in the
    process-wide registry, where C++ code finds it. Without ``f``, returns a decorator."""
    if f is None:
        def decorator(func):
            _core.register_global_func(name, func, override)
            return func
        return decorator
    _core.register_global_func(name, f, override)
    return f


def get_global_func(name: str, allow_missing: bool = False) -> Function | None:
    """The global function ``name`` as a callable Function (C++ or Python defined).
    Raises ValueError when missing unless ``allow_missing``."""
    func = _core.get_global_func(name)
    if func is None and not allow_missing:
        raise ValueError(f"global function '{name}' is not registered")
    return func


def list_global_func_names() -> list[str]:
    """Sorted names of every registered global function."""
    return _core.list_global_func_names()


def remove_global_func(name: str) -> None:
    """Remove the global function ``name`` (no error when missing)."""
    _core.remove_global_func(name)


def call_scratch():
    """The ``"tensorplug.call_scratch"`` capsule (``tensorplug/python.h``, ``TPCallScratch``):
    storage an adapter's compiled exchange functions take for what a view needs until the
    current call returns (element strides converted from a framework's byte strides)."""
    return _core.call_scratch()


def __getattr__(name: str):
    # The C++ build helpers import subprocess/hashlib machinery, the hub its JSON and file
    # machinery (and http.client once a source is remote), hookimpl pluggy: load on first use.
    if name in ("cpp", "hub"):
        import importlib

        return importlib.import_module(f"tensorplug.{name}")
    if name == "hookimpl":
        from .hookspecs import hookimpl

        return hookimpl
    raise AttributeError(f"module 'tensorplug' has no attribute '{name}'")


__all__ = [
    "AdapterInfo", "AdapterRecord", "Device", "ExchangeTable", "Function", "Handle", "Module", "Op", "Output", "Tensor",
    "TensorSpec", "adapters", "backward", "call_scratch", "cpp", "empty", "from_dlpack", "function_from_pointer",
    "get_global_func", "get_op", "get_raw_stream", "hookimpl", "hub", "like", "list_global_func_names", "load_library",
    "load_module",
    "load_module_from_package", "op", "output_framework", "output_table", "register_adapter",
    "register_global_func", "remove_global_func", "storage", "unregister_adapter", "use_raw_stream", "use_stream",
]
