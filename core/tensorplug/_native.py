"""Functions from native entry points: code a compiler produced in this process."""

from __future__ import annotations

from . import _core


def function_from_pointer(pointer: int, signature: str, *, name: str, owner: object = None,
                          release_gil: bool = True) -> _core.Function:
    """A :class:`tensorplug.Function` calling the native function at address ``pointer``.

    The function must follow the packed convention of ``c_api.h`` (``TPPackedFunc``:
    ``int f(void* self, const TPAny* args, int32_t nargs, TPAny* result)``), as an exported
    ``__tensorplug_<name>`` function does; ``signature`` is its signature string
    (``"x:view;out:mview->void"``, docs/capi.md), ``name`` the name it is called by in
    messages. The result is called like a kernel library's function (arguments checked
    against the signature, the caller's stream and allocator bound) and can be made a
    :func:`tensorplug.op`.

    ``owner`` is kept alive as long as the function is (also by the global registry or the
    provider storage, wherever the function goes): pass the object that owns the code (a
    Numba ``cfunc``, a ``ctypes.CDLL``). With an owner the entry receives, as ``self``, a
    pointer of tensorplug's that it must ignore; without one, ``self`` is NULL.

    Raises TypeError for a pointer that is not an int, ValueError for address 0 or a
    malformed signature. Nothing can check that the address is such a function: a wrong
    one crashes the first call.
    """
    if isinstance(pointer, bool) or not isinstance(pointer, int):
        raise TypeError(f"function_from_pointer() argument 'pointer': expected the function's address (int), "
                        f"got {type(pointer).__name__}")
    if not isinstance(signature, str):
        raise TypeError(f"function_from_pointer() argument 'signature': expected a signature string such as "
                        f"'x:view;out:mview->void', got {type(signature).__name__}")
    if not isinstance(name, str) or not name:
        raise TypeError(f"function_from_pointer() argument 'name': expected a non-empty str, got {name!r}")
    return _core.function_from_pointer(pointer, signature, name, owner, release_gil)
