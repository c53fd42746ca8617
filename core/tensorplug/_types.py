"""Small value types shared by the package."""

from __future__ import annotations

from collections import namedtuple

from . import _core

# The vocabularies, each read from its one source (csrc/include/tensorplug/vocabulary.h and
# c_api.h's TP_ERROR_KINDS, compiled into _core.VOCABULARY; tests/core/test_vocabulary.py).
VOCABULARY = _core.VOCABULARY
# DLPack device type codes (DLDeviceType) by the names tensorplug uses.
DEVICE_TYPES = dict(VOCABULARY["device_types"])
DEVICE_NAMES = {code: name for name, code in DEVICE_TYPES.items()}
# Names accepted on input only ("gpu": paddle's and jax's name for CUDA devices).
DEVICE_ALIASES = {alias: DEVICE_NAMES[code] for alias, code in VOCABULARY["device_aliases"]}
# Dtype names (canonical ones, as str(dtype) gives them).
DTYPE_NAMES = tuple(name for name, _code, _bits in VOCABULARY["dtypes"])
# Error kinds a kernel may raise that reach Python as the exception of that name.
ERROR_KINDS = VOCABULARY["error_kinds"]


class Device(namedtuple("Device", ("type", "index"), defaults=(0,))):
    """A device: ``Device("cuda", 0)``; ``str()`` gives ``"cuda:0"``."""

    __slots__ = ()

    @property
    def dlpack(self) -> tuple[int, int]:
        """The ``(device_type, device_id)`` pair of ``__dlpack_device__``."""
        return (DEVICE_TYPES[self.type], self.index)

    def __str__(self) -> str:
        return f"{self.type}:{self.index}"

    def __repr__(self) -> str:
        return f"Device('{self.type}', {self.index})"


def as_device(device) -> Device:
    """A :class:`Device` from ``"cuda:1"``, ``"cpu"``, ``(2, 1)``, ``("cuda", 1)``, a framework device
    object (anything whose ``str()`` is ``type[:index]``) or a Device."""
    if isinstance(device, Device):
        return device
    if isinstance(device, tuple) and len(device) == 2:
        kind, index = device
        index = 0 if index is None else int(index)
        if isinstance(kind, str):  # ("cuda", 0): the form the stream hooks of adapters return
            name = DEVICE_ALIASES.get(kind, kind)
            if name not in DEVICE_TYPES:
                raise ValueError(f"device: unknown device type {kind!r}")
            return Device(name, index)
        code = int(kind)
        if code not in DEVICE_NAMES:
            raise ValueError(f"device: unknown DLPack device type {code}")
        return Device(DEVICE_NAMES[code], index)
    text = str(device)
    kind, _, index = text.partition(":")
    kind = DEVICE_ALIASES.get(kind, kind)
    if kind not in DEVICE_TYPES or (index and not index.isdigit()):
        raise ValueError(f"device: expected 'cpu', 'cuda:0', a (device_type, device_id) pair or a "
                         f"framework device, got {device!r}")
    return Device(kind, int(index) if index else 0)
