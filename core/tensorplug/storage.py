"""Provider storage: process-wide values under string keys, shared with C and C++ code
(``TPEnvStorage*`` in c_api.h, ``GetStorage``/``SetStorage`` in C++).

A value is a tensor (of any installed adapter; read back as a :class:`tensorplug.Tensor`
sharing its memory), a function (a compiled :class:`tensorplug.Function` or a Python
function), a str, an int, a float, a bool or a :class:`tensorplug.Handle` (C code gets a
reference to the handle; it reads back as a handle equal to it). Any other Python object is stored as itself
(C code sees an opaque pointer to it). An opaque pointer stored by C code reads as a
non-owning :class:`tensorplug.Handle` (its ``address`` is the pointer), a handle stored
by C code as a :class:`tensorplug.Handle` sharing it. Values are released when replaced, erased, or at interpreter exit (before the static
destructors of any library). Prefix
keys with your library's name (``"mylib.cache"``).
"""

from __future__ import annotations

import atexit

from . import _core

# Stored values are destroyed when the interpreter exits, before any C or C++ static
# destructor runs (C exit handlers run after Python's): a deleter may use a library's
# static objects, whenever they were constructed.
atexit.register(_core.storage_exit_cleanup)

_MISSING = object()


def set(key: str, value) -> None:  # noqa: A001  (the storage's own vocabulary)
    """Store ``value`` under ``key``, replacing (and releasing) any value stored before.
    Raises TypeError for a non-str key or a None value (use :func:`erase`)."""
    _core.storage_set(key, value)


def get(key: str, default=_MISSING):
    """The value under ``key``; ``default`` when there is none, or KeyError without one."""
    found, value = _core.storage_get(key)
    if found:
        return value
    if default is _MISSING:
        raise KeyError(f"tensorplug.storage has no value under {key!r}")
    return default


def get_or_create(key: str, factory):
    """The value under ``key``, made by ``factory()`` first when there is none. Atomic:
    however many threads (Python or C) race for the key, ``factory`` runs once while it
    succeeds; the others wait and get its value. An exception of ``factory`` propagates
    unchanged and stores nothing."""
    return _core.storage_get_or_create(key, factory)


def erase(key: str) -> None:
    """Remove and release the value under ``key`` (nothing happens when there is none)."""
    _core.storage_erase(key)


def contains(key: str) -> bool:
    """Whether a value is stored under ``key``."""
    return _core.storage_contains(key)


def keys() -> list[str]:
    """Every key, sorted."""
    return _core.storage_keys()


__all__ = ["contains", "erase", "get", "get_or_create", "keys", "set"]
