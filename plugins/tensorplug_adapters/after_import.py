"""Running code right after a module is imported, without importing it.

An adapter that must act when its framework, or a part of it, is imported asks
:func:`call_after_import`: ``torch.registration`` registers the ops declared before
``import torch``, the DTensor strategies waiting for ``torch.distributed.tensor``
(whose import costs seconds that no declaration should pay). One ``sys.meta_path`` finder
serves every watched name: it answers for those names only, finds nothing itself (it wraps
the loader the other finders return, so that the callbacks run once the module has been
executed), and leaves ``sys.meta_path`` once no name is watched.
"""

from __future__ import annotations

import sys
import threading
from importlib.abc import MetaPathFinder

_lock = threading.Lock()
_callbacks: dict[str, list] = {}  # module name -> the callbacks waiting for its import
_finder: _AfterImportFinder | None = None


def call_after_import(name: str, callback) -> None:
    """Call ``callback(module)`` once, right after the next ``import name`` completes, in
    the importing thread. A callback already waiting for ``name`` is not added twice. The
    caller checks ``sys.modules`` first: a module imported already is not imported again."""
    global _finder
    with _lock:
        waiting = _callbacks.setdefault(name, [])
        if callback not in waiting:
            waiting.append(callback)
        if _finder is None:
            _finder = _AfterImportFinder()
            sys.meta_path.insert(0, _finder)


def watched() -> tuple[str, ...]:
    """The module names callbacks wait for (empty when the finder has left ``sys.meta_path``)."""
    with _lock:
        return tuple(_callbacks)


class _AfterImportFinder(MetaPathFinder):
    def find_spec(self, fullname, path=None, target=None):
        if fullname not in _callbacks:
            return None
        for finder in sys.meta_path:
            if finder is self or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(fullname, path, target)
            if spec is not None:
                if spec.loader is not None and hasattr(spec.loader, "exec_module"):
                    spec.loader = _ThenCall(spec.loader, fullname)
                return spec
        return None


class _ThenCall:
    """A loader running ``loader`` and then the callbacks waiting for the module."""

    def __init__(self, loader, name: str):
        self.loader = loader
        self.name = name

    def create_module(self, spec):
        return self.loader.create_module(spec)

    def exec_module(self, module):
        self.loader.exec_module(module)
        # The module is fully imported. Restore the real loader for anything that reads it.
        module.__loader__ = self.loader
        if module.__spec__ is not None:
            module.__spec__.loader = self.loader
        global _finder
        with _lock:
            callbacks = _callbacks.pop(self.name, [])
            if not _callbacks and _finder is not None:
                try:
                    sys.meta_path.remove(_finder)
                except ValueError:
                    pass
                _finder = None
        for callback in callbacks:
            callback(module)

    def __getattr__(self, name):
        return getattr(self.loader, name)
