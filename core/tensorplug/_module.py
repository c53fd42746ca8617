"""Loading kernel libraries."""

from __future__ import annotations

import os

from . import _core


class Module:
    """A loaded kernel library. Its exported functions are attributes (``m.scale``) and
    items (``m["scale"]``); ``m.functions`` lists them; ``"scale" in m`` tests for one."""

    def __init__(self, path, *, release_gil: bool = True):
        path = os.fspath(path)
        self._handle, names = _core.load_library(path)
        self.path = path
        self.functions: tuple[str, ...] = tuple(names)
        self._release_gil = release_gil

    def __getattr__(self, name: str):
        # Only reached for names not yet cached in the instance dict.
        if name.startswith("__") or name not in self.__dict__.get("functions", ()):
            raise AttributeError(self._missing(name))
        func = _core.get_function(self._handle, name, self._release_gil)
        self.__dict__[name] = func
        return func

    def __getitem__(self, name: str):
        if name not in self.functions:
            raise KeyError(self._missing(name))
        return getattr(self, name)

    def __contains__(self, name: object) -> bool:
        return name in self.functions

    def __dir__(self):
        return sorted(set(super().__dir__()) | set(self.functions))

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
