"""Explicit stream and output contexts: context-local (``contextvars``), nestable.

Each context sets the ContextVar ``_core.overrides`` for the code it encloses, so asyncio
tasks and threads each see only the contexts they entered themselves. Its value is None
or a tuple ``(streams, output, packed)``: ``streams`` a tuple of ``(device_type,
device_id, handle)``, one per device; ``output`` an adapter table capsule or None;
``packed`` the same as bytes the core reads without conversions. A call applies
the current value to the thread's environment for its own duration and restores it
after. ``_core.live_overrides`` counts contexts entered and not yet left anywhere; while
it is zero a call does not read the ContextVar at all (the common case costs nothing).
"""

from __future__ import annotations

from . import _core
from ._registry import registry
from ._types import Device, as_device

_overrides = _core.overrides


def _current():
    state = _overrides.get(None)
    return state[:2] if state is not None else ((), None)


class _OverrideContext:
    """Enter: set the ContextVar to a new value; exit: reset it, innermost first."""

    def _new_state(self, streams, output):
        raise NotImplementedError

    def __enter__(self):
        streams, output = _current()
        streams, output = self._new_state(streams, output)
        state = (streams, output, _core.pack_overrides(streams, output))
        token = _overrides.set(state)
        # One object may be entered again while active (nested with-blocks).
        self.__dict__.setdefault("_entered", []).append((token, state))
        _core.live_overrides(1)
        return self

    def __exit__(self, *exc):
        entered = self.__dict__.get("_entered")
        name = type(self).__name__
        if not entered:
            raise RuntimeError(f"{name}: leaving a context that was not entered")
        current = _overrides.get(None)
        index = next((k for k in range(len(entered) - 1, -1, -1) if entered[k][1] is current), None)
        if index is None:
            raise RuntimeError(
                f"{name}: contexts must be left innermost first, in the thread or task that entered "
                f"them (this one is not the innermost context here); the state is unchanged")
        token = entered[index][0]
        try:
            _overrides.reset(token)
        except ValueError:  # entered in another contextvars.Context (copy_context().run, a task)
            raise RuntimeError(
                f"{name}: this context was entered in another thread, task or contextvars.Context; "
                f"leave it where it was entered (the state is unchanged)") from None
        del entered[index]
        _core.live_overrides(-1)
        return False


class use_raw_stream(_OverrideContext):
    """Run calls on ``device`` on the raw stream ``handle`` (an int, 0 or None for the
    default stream) instead of the calling framework's current stream.

    Context-local: the override holds for code in this thread or asyncio task (and
    contexts copied from it), not for others running meanwhile. :func:`get_raw_stream`
    and kernels called inside see it."""

    def __init__(self, device, handle):
        self.device = as_device(device)
        if handle is not None and not isinstance(handle, int):
            raise TypeError(f"use_raw_stream() argument 'handle': expected an int or None, got "
                            f"{type(handle).__name__}")
        if handle is not None and not 0 <= handle < 2**64:
            raise ValueError(f"use_raw_stream() argument 'handle': expected a stream address "
                             f"(0 <= handle < 2**64), got {handle}")
        self.handle = handle or None

    def _new_state(self, streams, output):
        device_type, device_id = self.device.dlpack
        kept = tuple(s for s in streams if (s[0], s[1]) != (device_type, device_id))
        return (kept + ((device_type, device_id, self.handle),), output)


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
    """The current raw stream for ``device`` (None: the default stream): the innermost
    :class:`use_stream`/:class:`use_raw_stream` of the current context, else the calling
    thread's environment (inside a kernel call: the stream the call runs on)."""
    device_type, device_id = as_device(device).dlpack
    if _core.live_overrides(0):
        for entry in _current()[0]:
            if entry[0] == device_type and entry[1] == device_id:
                return entry[2]
    return _core.get_stream(device_type, device_id)


class output_framework(_OverrideContext):
    """Return tensors as the framework of adapter ``name`` (``"torch"``, ``"numpy"``, ...),
    allocated by that framework, whatever tensors the call received. Context-local and
    nestable (the innermost wins); ValueError naming the known adapters when no adapter is
    called ``name``."""

    def __init__(self, name: str):
        self.name = name
        self._table = registry.output_table(name)

    def _new_state(self, streams, output):
        return (streams, self._table._c_table)


__all__ = ["use_raw_stream", "use_stream", "get_raw_stream", "output_framework", "Device"]
