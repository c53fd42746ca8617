"""The compiled torch bridge: an op's dispatcher kernels compiled against the headers of
the torch in hand, at run time, for ops whose parameters are plain tensors and scalars.

tensorplug's own build reaches torch through the stable C shim (:mod:`.native`), which
works with every torch >= 2.10 unchanged, but where torch boxes each tensor argument into a
heap handle per call and each tensor is read through seven shim calls: about 1,500
instructions per call that a kernel compiled against torch's headers does not pay
(benchmarks/README.md). ``bridge.cc`` is that kernel: it passes torch's own stack on,
borrowed, to the same plan (the plugin's ``_native`` module, kernel.cc), so everything else (rules,
checks, the stream and allocator, the Autograd kernel's choices) is the stable path's.

It is on unless ``TENSORPLUG_TORCH_BRIDGE=0``: the first torch op of a process builds it with
the system C++ compiler (about 6 s, once per torch version: :func:`tensorplug.cpp.build`'s
cache) and loads it. Without a compiler, or if the build fails, the ops keep the stable
kernels and the reason is logged (INFO; WARNING where ``TENSORPLUG_TORCH_BRIDGE=1`` asked for
the bridge). docs/decisions.md says why it is the default.
"""

from __future__ import annotations

import ctypes
import logging
import os

_log = logging.getLogger("tensorplug")

ENV = "TENSORPLUG_TORCH_BRIDGE"
_SOURCE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "bridge.cc")
_LIBRARY = "tensorplug_torch_bridge"

_library: ctypes.CDLL | None = None
_attach_error: str | None = None


_warned: set[str] = set()
_SWITCH = {"1": True, "true": True, "on": True, "yes": True, "0": False, "false": False, "off": False, "no": False}


def wanted() -> bool:
    """Whether the bridge is to be used: unless ``TENSORPLUG_TORCH_BRIDGE`` says no
    (0/false/off/no, in any case); a value that is none of 0/1/false/true/off/on/no/yes is
    refused with a warning naming it, and the default (on) holds."""
    value = os.environ.get(ENV)
    if value is None or not value.strip():
        return True
    switch = _SWITCH.get(value.strip().lower())
    if switch is None:
        if value not in _warned:  # once per value, not once per op declared
            _warned.add(value)
            _log.warning("tensorplug: %s=%r is not one of 0/1, false/true, off/on, no/yes; the compiled torch "
                         "bridge stays on (the default)", ENV, value)
        return True
    return switch


def _asked_by_name() -> bool:
    return _SWITCH.get(os.environ.get(ENV, "").strip().lower()) is True


def _log_failure() -> None:
    # Asked for by name, a missing bridge is worth a warning; by default it is a fact of the
    # machine (no compiler, a read-only cache), and every op still works.
    level = logging.WARNING if _asked_by_name() else logging.INFO
    _log.log(level, "tensorplug: %s; torch ops keep the stable kernels", _attach_error)


def build_options(torch) -> dict:
    """The :func:`tensorplug.cpp.build` keywords that compile a source against ``torch``'s
    headers and libraries (also the serving library's, serving.py)."""
    root = os.path.dirname(torch.__file__)
    include, lib = os.path.join(root, "include"), os.path.join(root, "lib")
    # torch's headers as system headers: the cache's stamp lists the headers a build
    # included, and torch's hundreds are named by its version and commit instead.
    cflags = ["-isystem", include, "-isystem", os.path.join(include, "torch", "csrc", "api", "include"),
              f"-D_GLIBCXX_USE_CXX11_ABI={int(torch.compiled_with_cxx11_abi())}",
              f"-DTENSORPLUG_TORCH_VERSION={torch.__version__}+{getattr(torch.version, 'git_version', '')}"]
    ldflags = [f"-L{lib}", "-lc10", "-ltorch_cpu", f"-Wl,-rpath,{lib}"]
    return {"extra_cflags": cflags, "extra_ldflags": ldflags}


def build(torch) -> str:
    """Compile ``bridge.cc`` against ``torch``'s headers and libraries (cached by
    :func:`tensorplug.cpp.build`, keyed also by torch's version and commit) and return the
    library's path. Raises :class:`tensorplug.cpp.BuildError` when no compiler is found or
    the build fails."""
    from tensorplug import cpp

    return cpp.build(_LIBRARY, [_SOURCE], **build_options(torch))


def attach(torch) -> bool:
    """Build (or find) and load the bridge, once per process; False, with :func:`error`
    saying why, where it cannot be had. torch's shim must be loaded (native.py). The
    library is loaded as :func:`tensorplug.cpp.load_cdll` verifies it (the file its build
    recorded; a truncated or replaced one is built again)."""
    global _library, _attach_error
    if _library is not None or _attach_error is not None:
        return _library is not None
    from tensorplug import cpp

    from . import _native

    try:
        library = cpp.load_cdll(_LIBRARY, [_SOURCE], **build_options(torch))
        init, register_kernel, read = (library.tp_torch_bridge_init, library.tp_torch_bridge_register,
                                       library.tp_torch_bridge_read)
    except (cpp.BuildError, OSError, ValueError, AttributeError) as e:  # ValueError: IntegrityError
        _attach_error = f"the compiled torch bridge could not be built or loaded: {e}"
        _log_failure()
        return False
    interface, run, error_text, dtypes, num_dtypes = _native.bridge_entry()
    init.restype = ctypes.c_int32
    init.argtypes = [ctypes.c_int32, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int32]
    expected = init(interface, run, error_text, dtypes, num_dtypes)
    if expected != 0:
        _attach_error = f"the compiled torch bridge speaks interface {expected}, this tensorplug {interface}"
        _log_failure()
        return False
    register_kernel.restype = ctypes.c_int32
    register_kernel.argtypes = [ctypes.c_char_p, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_int32, ctypes.c_char_p,
                                ctypes.c_char_p, ctypes.c_size_t]
    _native.bridge_read(ctypes.cast(read, ctypes.c_void_p).value)
    _library = library
    return True


def attached() -> bool:
    """Whether the bridge is loaded in this process."""
    return _library is not None


def error() -> str | None:
    """Why :func:`attach` failed (None when it did not, or was not asked)."""
    return _attach_error


def register(slot: int, kinds: str, namespace: str, key: str, name: str) -> None:
    """The bridge's kernel for plan ``slot`` (parameters ``kinds``, as
    ``_native.bridge_kinds`` gives them) as the ``key`` kernel of
    ``namespace::name``; for ``key`` ``"Autograd"``, the plan's Autograd kernel.
    RuntimeError when torch refuses it."""
    message = ctypes.create_string_buffer(1024)
    if _library.tp_torch_bridge_register(namespace.encode(), key.encode(), name.encode(), slot, kinds.encode(),
                                         message, len(message)) != 0:
        raise RuntimeError(f"torch refused the bridge kernel of '{namespace}::{name}' for key '{key}': "
                           f"{message.value.decode(errors='replace')}")
