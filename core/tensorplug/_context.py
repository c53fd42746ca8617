"""Explicit stream and output contexts; per thread, nestable."""

from __future__ import annotations

from . import _core
from ._registry import registry
from ._types import Device, as_device


class use_raw_stream:
    """Run calls on ``device`` on the raw stream ``handle`` (an int, 0 or None for the
    default stream) instead of the calling framework's current stream.

    The stream is set in the calling thread's environment on entry (so
    :func:`get_raw_stream` and kernels see it) and restored on exit."""

    def __init__(self, device, handle):
        self.device = as_device(device)
        if handle is not None and not isinstance(handle, int):
            raise TypeError(f"use_raw_stream() argument 'handle': expected an int or None, got "
                            f"{type(handle).__name__}")
        self.handle = handle or None

    def __enter__(self):
        _core.push_stream(*self.device.dlpack, self.handle)
        return self

    def __exit__(self, *exc):
        _core.pop_stream()
        return False


class use_stream(use_raw_stream):
    """Run calls on a framework stream object (``torch.cuda.Stream``, a cupy ``Stream``,
    ...): its adapter's ``tensorplug_stream_handle`` hook turns it into a device and raw
    handle, then as :class:`use_raw_stream`. TypeError when no adapter knows the type."""

    def __init__(self, stream):
        found = registry.stream_handle(stream)
        if found is None:
            raise TypeError(f"use_stream() argument 'stream': no adapter knows streams of type "
                            f"{type(stream).__module__}.{type(stream).__qualname__}")
        device, handle = found
        super().__init__(device, handle)
        self.stream = stream


def get_raw_stream(device) -> int | None:
    """The calling thread's current raw stream for ``device`` (None: the default stream)."""
    return _core.get_stream(*as_device(device).dlpack)


class output_framework:
    """Return tensors as the framework of adapter ``name`` (``"torch"``, ``"numpy"``, ...),
    allocated by that framework, whatever tensors the call received. A context manager,
    per thread and nestable; ValueError naming the known adapters when no adapter is
    called ``name``."""

    def __init__(self, name: str):
        self.name = name
        self._table = registry.output_table(name)

    def __enter__(self):
        _core.push_output(self._table._c_table)
        return self

    def __exit__(self, *exc):
        _core.pop_output()
        return False


__all__ = ["use_raw_stream", "use_stream", "get_raw_stream", "output_framework", "Device"]
