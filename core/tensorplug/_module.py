"""Loading kernel libraries."""

from __future__ import annotations

import os
import types

from . import _core


class Module(types.ModuleType):
    """A loaded kernel library. Its exported functions are attributes (``m.scale``) and
    items (``m["scale"]``); ``m.functions`` lists them; ``"scale" in m`` tests for one.

    A Module is a module object: attribute lookups take the interpreter's fast path for
    module attributes, which matters when a function is looked up on every call. A missing
    name raises AttributeError (KeyError for ``m[name]``) listing what the library exports.
    ``m.path`` is the library's path; made by :func:`load_module`.
    """

    def __init__(self, path, *, release_gil: bool = True):
        path = os.fspath(path)
        super().__init__(os.path.basename(path), f"tensorplug kernel library {path}")
        handle, names = _core.load_library(path)
        self.path = path
        self.functions: tuple[str, ...] = tuple(names)
        self._handle = handle
        for name in names:
            setattr(self, name, _core.get_function(handle, name, release_gil))
        # Looked up by the module type only when normal lookup fails.
        self.__getattr__ = self._missing_attribute

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


def load_module(path, *, release_gil: bool = True) -> Module:
    """Load the kernel library at ``path``.

    Raises FileNotFoundError for a missing path and ValueError for a file that is not a
    shared library or exports no ``__tensorplug_<name>`` function. ``release_gil`` (default
    True, as apache-tvm-ffi does) releases the GIL around each call."""
    return Module(path, release_gil=release_gil)
