"""Small value types shared by the package."""

from __future__ import annotations

from typing import NamedTuple

# DLPack device type codes (DLDeviceType) by the names tensorplug uses.
DEVICE_TYPES = {
    "cpu": 1, "cuda": 2, "cuda_host": 3, "opencl": 4, "vulkan": 7, "metal": 8, "vpi": 9,
    "rocm": 10, "rocm_host": 11, "ext_dev": 12, "cuda_managed": 13, "oneapi": 14,
    "webgpu": 15, "hexagon": 16, "maia": 17, "trn": 18,
}
DEVICE_NAMES = {code: name for name, code in DEVICE_TYPES.items()}


class Device(NamedTuple):
    """A device: ``Device("cuda", 0)``; ``str()`` gives ``"cuda:0"``."""

    type: str
    index: int = 0

    @property
    def dlpack(self) -> tuple[int, int]:
        """The ``(device_type, device_id)`` pair of ``__dlpack_device__``."""
        return (DEVICE_TYPES[self.type], self.index)

    def __str__(self) -> str:
        return f"{self.type}:{self.index}"

    def __repr__(self) -> str:
        return f"Device('{self.type}', {self.index})"


def as_device(device) -> Device:
    """A :class:`Device` from ``"cuda:1"``, ``"cpu"``, ``(2, 1)``, a framework device
    object (anything whose ``str()`` is ``type[:index]``) or a Device."""
    if isinstance(device, Device):
        return device
    if isinstance(device, tuple) and len(device) == 2:
        code, index = device
        code = int(code)
        if code not in DEVICE_NAMES:
            raise ValueError(f"device: unknown DLPack device type {code}")
        return Device(DEVICE_NAMES[code], 0 if index is None else int(index))
    text = str(device)
    kind, _, index = text.partition(":")
    kind = {"gpu": "cuda"}.get(kind, kind)
    if kind not in DEVICE_TYPES or (index and not index.isdigit()):
        raise ValueError(f"device: expected 'cpu', 'cuda:0', a (device_type, device_id) pair or a "
                         f"framework device, got {device!r}")
    return Device(kind, int(index) if index else 0)
