"""Names the generated ``.pyi`` stubs of kernel libraries annotate with (:mod:`tensorplug.stubs`).

A kernel function takes tensors of every framework an adapter is installed for and returns
tensors of its primary argument's framework (docs/calling.md, "Mixed inputs"): no static
type is both true and narrower than ``Any``. These aliases are ``Any`` with a name, for the
reader and the editor; ``inspect.signature`` of a kernel function shows the same names.
"""

from __future__ import annotations

from typing import Any, TypeAlias

#: A tensor of any framework with an adapter (numpy, torch, jax, paddle, cupy, a DLPack
#: producer, :class:`tensorplug.Tensor`); as a result, a tensor of the caller's framework.
Tensor: TypeAlias = Any
#: A device: ``"cuda:0"``, a ``(device_type, device_id)`` pair, a :class:`tensorplug.Device`
#: or a framework's device object; as a result, a :class:`tensorplug.Device`.
Device: TypeAlias = Any
#: A dtype: a name such as ``"float32"`` or a framework's dtype object.
DType: TypeAlias = Any

__all__ = ["DType", "Device", "Tensor"]
