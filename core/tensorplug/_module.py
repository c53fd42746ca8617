"""Loading kernel libraries."""

from __future__ import annotations

import os
import types

from . import _core

# tensorplug.tvm_ffi, for libraries built for apache tvm-ffi: a function returning the
# module, which the package sets (__init__.py) and which imports it on first use. Not
# imported here: tvm_ffi builds its bridge with tensorplug.cpp, which loads Modules, so an
# import of it here would close an import cycle (tests/core/test_no_import_cycles.py).
_tvm_ffi = None


def set_tvm_ffi(get_module) -> None:
    """Where :class:`Module` finds :mod:`tensorplug.tvm_ffi` (``get_module()``)."""
    global _tvm_ffi
    _tvm_ffi = get_module


class Module(types.ModuleType):
    """A loaded kernel library. Its exported functions are attributes (``m.scale``) and
    items (``m["scale"]``); ``m.functions`` lists them; ``"scale" in m`` tests for one.

    A Module is a module object: attribute lookups take the interpreter's fast path for
    module attributes, which matters when a function is looked up on every call. A missing
    name raises AttributeError (KeyError for ``m[name]``) listing what the library exports.
    ``m.path`` is the library's path; made by :func:`load_module`.
    """

    def __init__(self, path, *, release_gil: bool = True, _load_flags: int = 0, _display_path: str | None = None,
                 signatures=None, writes=None):
        path = os.fspath(path)
        # _display_path: the file a verified load (/proc/self/fd/N, _verified.py) stands for.
        shown = path if _display_path is None else _display_path
        super().__init__(os.path.basename(shown), f"tensorplug kernel library {shown}")
        # A library built for apache tvm-ffi (tensorplug/tvm_ffi): tried only when the loader
        # found no tensorplug function (it reads that from the file, before dlopen), so a
        # library of tensorplug's own ABI loads as it always did.
        tvm_ffi_functions: tuple[str, ...] = ()
        try:
            if signatures is not None or writes is not None:
                tvm_ffi_functions = self._tvm_ffi_functions(path, shown, required=True)
            if not tvm_ffi_functions:
                handle, names = _core.load_library(path, _load_flags)
        except (OSError, ValueError, RuntimeError) as exc:
            if not (isinstance(exc, ValueError) and "exports no tensorplug function" in str(exc)
                    and (tvm_ffi_functions := self._tvm_ffi_functions(path, shown))):
                if shown == path:
                    raise
                raise type(exc)(str(exc).replace(path, shown)) from None
        self.path = shown
        if tvm_ffi_functions:
            made, self._handle = _tvm_ffi().load(path, shown, tvm_ffi_functions, signatures=signatures,
                                                 writes=writes, release_gil=release_gil)
            self.functions = tuple(made)
            for name, function in made.items():
                setattr(self, name, function)
        else:
            self.functions: tuple[str, ...] = tuple(names)
            self._handle = handle
            for name in names:
                setattr(self, name, _core.get_function(handle, name, release_gil))
        # Looked up by the module type only when normal lookup fails.
        self.__getattr__ = self._missing_attribute

    @staticmethod
    def _tvm_ffi_functions(path: str, shown: str, required: bool = False) -> tuple[str, ...]:
        """The tvm-ffi functions of a library exporting no tensorplug function, else ()."""
        tvm, own = _tvm_ffi().exported_functions(path)
        if required and not (tvm and not own):
            raise ValueError(f"load_module() arguments 'signatures' and 'writes' are for libraries built for apache "
                             f"tvm-ffi (exporting __tvm_ffi_<name> functions); '{shown}' is not one")
        return tvm if not own else ()

    def _missing_attribute(self, name: str):
        raise AttributeError(self._missing(name))

    def __getitem__(self, name: str):
        if name not in self.functions:
            raise KeyError(self._missing(name))
        return self.__dict__[name]

    def __contains__(self, name: object) -> bool:
        return name in self.functions

    def __repr__(self) -> str:
        return f"<tensorplug.Module {self.path!r} functions={list(self.functions)}>"

    def _missing(self, name: str) -> str:
        return (f"kernel library '{self.path}' has no function '{name}'; "
                f"it exports: {', '.join(self.functions)}")


def load_module(path, *, release_gil: bool = True, signatures: dict[str, str] | None = None,
                writes: dict | None = None) -> Module:
    """Load the kernel library at ``path``.

    A library built for apache tvm-ffi (exporting ``__tvm_ffi_<name>`` functions and no
    tensorplug one; ``tvm_ffi.cpp.build``, FlashInfer's, TileLang's, ...) loads unchanged:
    each of its functions becomes a tensorplug Function (docs/migration.md, "No port
    needed"). Its signatures come from tvm-ffi's metadata, when it was built with
    ``-DTVM_FFI_DLL_EXPORT_INCLUDE_METADATA=1``, or from ``signatures`` (``{name: signature
    string}``, tensorplug's syntax, which wins); ``writes`` (``{name: [parameter names or
    0-based positions]}``) says which tensors a function writes (tvm-ffi does not record
    it): those are refused read-only memory. A function with neither is a ValueError naming
    it. Needs the ``apache-tvm-ffi`` package (``pip install "tensorplug[tvm-ffi]"``;
    ModuleNotFoundError saying so without it).

    ``path`` names a file: a relative path (a bare name such as ``"libk.so"`` too) is
    relative to the working directory, and is never searched for on ``LD_LIBRARY_PATH``.
    A process runs one build of a path: loading a path again after the file there changed
    (a rebuild) raises RuntimeError naming the library, since the dynamic loader would
    return the build loaded first (docs/decisions.md).

    Raises FileNotFoundError for a missing path and ValueError for a file that is not a
    shared library, was built for another tensorplug ABI (docs/shipping.md, "The ABI
    rule"), or exports no ``__tensorplug_<name>`` function (see :func:`load_library`). ``release_gil`` (default
    True, as apache-tvm-ffi does) releases the GIL around each call."""
    return Module(path, release_gil=release_gil, signatures=signatures, writes=writes)


# TPModuleLoadEx flags (c_api.h).
_LOAD_RUNTIME = 1
_LOAD_GLOBAL = 2


def load_library(path, *, global_symbols: bool = False, release_gil: bool = True) -> Module:
    """Load a runtime library: a library that registers global functions and state when it
    is loaded (``TENSORPLUG_REGISTER_GLOBAL``, ``TPGlobalFuncRegister`` in a static
    initializer), as a DSL's runtime does, and may export no kernel function. Its global
    functions are then found by name, from Python (:func:`get_global_func`) and from other
    libraries' C and C++ code (``TPGlobalFuncGet``, ``Function::GetGlobal``).

    Returns the library's :class:`Module` (``functions`` may be empty). Loading it again
    returns a new Module and does not run its static initializers again. With
    ``global_symbols`` its symbols also resolve undefined references of libraries loaded
    later (``RTLD_GLOBAL``; a library first loaded without it is promoted). Raises what
    :func:`load_module` raises, except for a library exporting no function."""
    flags = _LOAD_RUNTIME | (_LOAD_GLOBAL if global_symbols else 0)
    return Module(path, release_gil=release_gil, _load_flags=flags)


def load_module_from_package(package: str, filename: str, *, release_gil: bool = True) -> Module:
    """Load the kernel library ``filename`` shipped inside the installed Python package
    ``package``: ``load_module_from_package("mykernels", "libmykernels.so")``.

    ``filename`` is relative to the package directory (``"lib/libk.so"`` is fine) and may
    not leave it. The package itself is not imported (parent packages of a dotted name
    are), so its ``__init__`` may call this with ``__name__``. Raises ModuleNotFoundError
    when no such package is installed, FileNotFoundError when it has no such file, and
    what :func:`load_module` raises for the file."""
    import importlib.util
    from pathlib import Path, PurePosixPath

    where = "load_module_from_package()"
    if not isinstance(package, str) or not package:
        raise TypeError(f"{where} argument 'package': expected a package name (str), got {package!r}")
    if not isinstance(filename, str) or not filename:
        raise TypeError(f"{where} argument 'filename': expected a file name (str), got {filename!r}")
    relative = PurePosixPath(filename)
    if relative.is_absolute() or ".." in relative.parts or "\\" in filename:
        raise ValueError(f"{where} argument 'filename': expected a path inside the package, got {filename!r}")
    spec = importlib.util.find_spec(package)
    if spec is None:
        raise ModuleNotFoundError(f"{where}: no installed package named {package!r}", name=package)
    if not spec.submodule_search_locations:
        raise ValueError(f"{where} argument 'package': {package!r} is a module, not a package")
    for location in spec.submodule_search_locations:
        path = Path(location, *relative.parts)
        if path.is_file():
            return load_module(path, release_gil=release_gil)
    locations = ", ".join(map(str, spec.submodule_search_locations))
    raise FileNotFoundError(f"{where}: package {package!r} ({locations}) has no file {filename!r}")
