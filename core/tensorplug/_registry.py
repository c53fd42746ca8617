"""The adapter registry: pluggy plugins found through entry points.

pluggy is used for discovery and precedence only. The compiled core asks :func:`resolve`
once per exact Python type and caches the answer; registering or unregistering an adapter
clears that cache.
"""

from __future__ import annotations

import sys
import warnings
from _thread import RLock
from collections import namedtuple

from . import _core

ENTRY_POINT_GROUP = "tensorplug.adapters"


class AdapterInfo(namedtuple("AdapterInfo", ("name", "framework", "tensor_types", "capabilities", "fast_path",
                                             "framework_distribution", "stream_kinds", "op_namespaces"),
                             defaults=((), ("exchange", "stream", "allocator", "output"), True, None, (), ()))):
    """What an adapter says about itself (``tensorplug_adapter_info`` hook), made with
    keywords: ``AdapterInfo(name="torch", framework="torch", tensor_types=("torch.Tensor",))``.

    ``name`` the adapter's name; ``framework`` the import name of the framework module
    (``"torch"``); ``tensor_types`` the qualified names of the types it claims (default
    none); ``capabilities`` a subset of ``("exchange", "stream", "allocator", "output",
    "compiler")`` (default the first four); ``fast_path`` whether its tables are C tables
    (True, the default) or built from Python callables (False); ``framework_distribution``
    the name the framework is installed under (``"paddlepaddle"``; default None: its
    import name); ``stream_kinds`` the device types whose streams the adapter reports;
    ``op_namespaces`` the operator namespaces the framework's own operators live in
    (torch: ``aten``, ``prim``, ``prims``): :func:`tensorplug.op` refuses to declare an
    operator there, where the framework's operator of the same name would run instead.
    Immutable (a named tuple: ``import tensorplug`` pays for no dataclass machinery).
    """

    __slots__ = ()


class AdapterRecord(namedtuple("AdapterRecord", ("name", "distribution", "distribution_version", "framework",
                                                 "framework_installed", "framework_version", "tensor_types",
                                                 "capabilities", "fast_path", "error", "plugin"),
                               defaults=(None, None))):
    """One row of :func:`tensorplug.adapters`: the adapter's ``name``, the distribution
    (and its version) that registered it through the ``tensorplug.adapters`` entry point
    (None for :func:`tensorplug.register_adapter`), its framework (whether installed, and
    its version), the ``tensor_types``, ``capabilities`` and ``fast_path`` of its
    :class:`AdapterInfo`, ``error``: why the plugin failed to load (then the other fields
    are empty), and ``plugin``, the plugin object (not shown by ``repr``)."""

    __slots__ = ()

    def __repr__(self) -> str:
        fields = ", ".join(f"{name}={value!r}" for name, value in zip(self._fields[:-1], self[:-1]))
        return f"AdapterRecord({fields})"


class ExchangeTable:
    """One DLPack exchange table, as an adapter hands it to the core.

    Build one per tensor type, once, with :meth:`from_capsule` (a C table) or
    :meth:`from_python` (Python callables, wrapped by the core into a C table).

    ``read_only`` says whether kernels may write the adapter's tensors: ``False`` (they
    are mutable), ``True`` (immutable arrays, such as jax's: every tensor enters kernels
    flagged read-only) or, for C tables, a ``"tensorplug.read_only_probe"`` capsule whose
    C function the core asks per tensor (the numpy plugin's reads numpy's ``WRITEABLE``
    flag; ``tensorplug/python.h`` declares the capsules). Tables built from Python callables carry the
    read-only flag their ``__dlpack__`` export sets, and ``read_only=True`` on top.
    """

    __slots__ = ("adapter", "capsule", "read_only", "python", "lazy_views", "negative_strides", "write_hook",
                 "_c_table")

    def __init__(self, adapter: str, capsule, *, read_only=False, python: bool = False,
                 lazy_views=None, negative_strides: bool = True, write_hook=None):
        if not isinstance(read_only, bool) and not (not python and _is_capsule(read_only)):
            what = "True or False" if python else "True, False or a 'tensorplug.read_only_probe' capsule"
            raise TypeError(f"ExchangeTable argument 'read_only': expected {what}, got {read_only!r}")
        self.adapter = adapter
        self.capsule = capsule
        self.read_only = read_only
        self.python = python
        self.lazy_views = lazy_views
        self.negative_strides = negative_strides
        self.write_hook = write_hook
        self._c_table = _core.make_adapter_table(capsule, adapter, read_only, python, lazy_views,
                                                 negative_strides, write_hook)

    @classmethod
    def from_capsule(cls, capsule, adapter: str, *, read_only=False, lazy_views=None,
                     negative_strides: bool = True, write_hook=None) -> "ExchangeTable":
        """A table from a ``"dlpack_exchange_api"`` capsule, such as a framework's
        ``type(x).__dlpack_c_exchange_api__``. ``read_only``: see the class.
        ``lazy_views``, a ``"tensorplug.lazy_view_probe"`` capsule, is asked per tensor
        whether its memory holds its values; one that does not (torch's conjugate and
        negative views, whose bits DLPack cannot carry) is refused with a ValueError
        (the torch plugin's probe is one).
        ``negative_strides=False`` makes the core refuse, with a ValueError, to hand the
        framework a tensor with negative strides (torch aborts on those, paddle misreads them).
        ``write_hook``, a ``"tensorplug.write_hook"`` capsule or a callable taking the
        tensor, is told of each tensor a call will write (an ``mview`` argument or item), once
        accepted, before the call; it may refuse the call (a capsule by setting a Python error,
        a callable by raising). The torch plugin's hook bumps torch's autograd version
        counter, as torch's in-place ops do; the paddle adapter passes
        ``paddle.Tensor._bump_inplace_version``."""
        return cls(adapter, capsule, read_only=read_only, lazy_views=lazy_views,
                   negative_strides=negative_strides, write_hook=write_hook)

    @classmethod
    def from_python(cls, adapter: str, *, from_dlpack, to_dlpack=None, current_stream=None,
                    allocate=None, read_only: bool = False, importer=None,
                    negative_strides: bool = True, write_hook=None) -> "ExchangeTable":
        """A table from Python callables; the path any third party can write.

        - ``from_dlpack(t)``: make a framework tensor from a ``tensorplug.Tensor`` (zero copy),
          e.g. the framework's own ``from_dlpack``.
        - ``to_dlpack(x)``: return a DLPack capsule or an object with ``__dlpack__`` for
          ``x``; default: ``x`` itself (its ``__dlpack__``).
        - ``current_stream(device_type, device_id)``: the framework's current stream as an
          int, or None; default: no streams.
        - ``allocate(shape, dtype, device)``: a new framework tensor (``dtype`` a name like
          ``"float32"``, ``device`` a ``tensorplug.Device``), used by ``FromEnvAlloc``;
          default: the adapter cannot allocate (:func:`tensorplug.empty` allocates CPU
          tensors from tensorplug's own allocator).
        - ``read_only``: True for immutable arrays (see the class).
        - ``importer``: a ``"tensorplug.importer"`` capsule of C functions that read the
          framework's tensors directly, used instead of ``to_dlpack`` (the jax plugin's
          reads a jax array's buffer pointer, shape, dtype and device, skipping
          ``__dlpack__``).
        - ``write_hook``: as for :meth:`from_capsule`.
        """
        if importer is not None and not _is_capsule(importer):
            raise TypeError(f"ExchangeTable.from_python() argument 'importer': expected None or a "
                            f"'tensorplug.importer' capsule, got {importer!r}")
        capsule = _core.make_python_table(to_dlpack, from_dlpack, current_stream, allocate, importer)
        return cls(adapter, capsule, read_only=read_only, python=True, negative_strides=negative_strides,
                   write_hook=write_hook)

    def to_framework(self, tensor):
        """The framework tensor sharing the memory of the ``tensorplug.Tensor`` ``tensor``
        (zero copy), made by this table's import (``from_dlpack`` of a Python table)."""
        return _core.to_framework(tensor, self._c_table)

    def __repr__(self) -> str:
        kind = "python" if self.python else "C"
        return f"<ExchangeTable adapter={self.adapter!r} ({kind} table)>"


def _is_capsule(obj) -> bool:
    return type(obj).__name__ == "PyCapsule"


class _Registry:
    def __init__(self) -> None:
        self._lock = RLock()
        self._pm = None
        self.loaded = False
        self.sources: dict[int, tuple[str | None, str | None]] = {}  # id(plugin) -> (dist, version)
        self.errors: list[AdapterRecord] = []
        # Called with the plugin just registered (None after an unregistration); the ops
        # module forgets its per-type answers and tells a new adapter of every op.
        self.listeners: list = []

    @property
    def pm(self):
        """The pluggy PluginManager, made on first use: ``import tensorplug`` imports no
        pluggy (nor the inspect machinery it brings), only the first adapter lookup does."""
        if self._pm is None:
            with self._lock:
                if self._pm is None:
                    import pluggy

                    from . import hookspecs

                    pm = pluggy.PluginManager("tensorplug")
                    pm.add_hookspecs(hookspecs)
                    self._pm = pm
        return self._pm

    def ensure_loaded(self) -> None:
        if self.loaded:
            return
        with self._lock:
            if self.loaded:
                return
            from importlib.metadata import entry_points

            eps = list(entry_points(group=ENTRY_POINT_GROUP))
            # First-party adapters first: pluggy asks later registrations first, so any
            # third-party adapter takes precedence over a built-in one for the same type.
            eps.sort(key=lambda ep: (_dist_name(ep) != "tensorplug", ep.name))
            for ep in eps:
                dist = _dist_name(ep)
                version = ep.dist.version if ep.dist is not None else None
                try:
                    plugin = ep.load()
                    if self.pm.is_registered(plugin) or self.pm.get_plugin(ep.name) is not None:
                        continue
                    self.pm.register(plugin, name=ep.name)
                except Exception as exc:  # a broken plugin must not break the others
                    warnings.warn(
                        f"tensorplug: adapter plugin '{ep.name}' from distribution '{dist}' failed to "
                        f"load: {type(exc).__name__}: {exc}",
                        RuntimeWarning,
                        stacklevel=2,
                    )
                    self.errors.append(AdapterRecord(ep.name, dist, version, None, False, None, (), (), None,
                                                     f"{type(exc).__name__}: {exc}"))
                    continue
                self.sources[id(plugin)] = (dist, version)
            self.loaded = True
            _core.clear_adapter_cache()

    def scalar_kind(self, scalar_type: type) -> str | None:
        """What the adapters say ``scalar_type`` is (``tensorplug_scalar_kind``): ``"bool"`` or None."""
        self.ensure_loaded()
        kind = self.pm.hook.tensorplug_scalar_kind(scalar_type=scalar_type)
        if kind not in (None, "bool"):
            raise TypeError(f"tensorplug_scalar_kind must return 'bool' or None, got {kind!r}")
        return kind

    def resolve(self, tensor_type: type):
        """Called by the core on the first argument of a new type."""
        self.ensure_loaded()
        table = self.pm.hook.tensorplug_exchange_table(tensor_type=tensor_type)
        if table is None:
            return None
        if not isinstance(table, ExchangeTable):
            raise TypeError(f"tensorplug_exchange_table must return an ExchangeTable or None, got "
                            f"{type(table).__name__} for {tensor_type.__qualname__}")
        return table._c_table

    def register(self, plugin) -> str:
        self.ensure_loaded()
        info = getattr(plugin, "tensorplug_adapter_info", None)
        if info is None:
            raise TypeError(f"register_adapter: {plugin!r} has no tensorplug_adapter_info hook: an adapter "
                            "is named by the AdapterInfo it returns")
        name = info().name
        with self._lock:
            if self.pm.is_registered(plugin):
                raise ValueError(f"register_adapter: {plugin!r} is already registered")
            if self.pm.get_plugin(name) is not None:
                raise ValueError(f"register_adapter: an adapter named {name!r} is already registered; "
                                 "unregister it first")
            self.pm.register(plugin, name=name)
            self.sources.setdefault(id(plugin), (None, None))
            _core.clear_adapter_cache()
        self._notify(plugin)
        return name

    def unregister(self, plugin) -> None:
        self.ensure_loaded()
        with self._lock:
            if isinstance(plugin, str):
                found = self.pm.get_plugin(plugin)
                if found is None:
                    raise ValueError(f"unregister_adapter: no adapter named {plugin!r}")
                plugin = found
            if not self.pm.is_registered(plugin):
                raise ValueError(f"unregister_adapter: {plugin!r} is not registered")
            self.pm.unregister(plugin)
            self.sources.pop(id(plugin), None)
            _core.clear_adapter_cache()
        self._notify(None)

    def _notify(self, plugin) -> None:
        for listener in list(self.listeners):
            listener(plugin)

    def op_declared(self, op) -> None:
        self.ensure_loaded()
        self.pm.hook.tensorplug_op_declared(op=op)

    def op_impl(self, op, arg_type: type):
        # pluggy's firstresult order, in a plain loop: a tracer that executes Python
        # symbolically (paddle's SOT, dynamo) can follow it, not pluggy's hook caller.
        self.ensure_loaded()
        for impl in reversed(self.pm.hook.tensorplug_op_impl.get_hookimpls()):
            kwargs = {"op": op, "arg_type": arg_type}
            result = impl.function(**{name: kwargs[name] for name in impl.argnames})
            if result is not None:
                return result
        return None

    def output_table(self, framework: str, caller: str = "output_framework"):
        self.ensure_loaded()
        table = self.pm.hook.tensorplug_output_table(framework=framework)
        if table is None:
            known = sorted(r.name for r in self.records() if r.error is None)
            if framework in known:  # loaded, but it converts no results into its framework
                raise ValueError(f"{caller}: adapter {framework!r} has no output table: no "
                                 f"tensorplug_output_table(framework) hook answers {framework!r} (docs/adapters.md)")
            raise ValueError(f"{caller}: no adapter named {framework!r} (adapters: {', '.join(known)})")
        return table

    def stream_handle(self, stream):
        self.ensure_loaded()
        return self.pm.hook.tensorplug_stream_handle(stream=stream)

    def reserved_op_namespaces(self) -> dict[str, str]:
        """Each operator namespace a framework owns -> the adapter that says so."""
        self.ensure_loaded()
        reserved = {}
        for impl in self.pm.hook.tensorplug_adapter_info.get_hookimpls():
            info = impl.function()
            for namespace in getattr(info, "op_namespaces", ()):
                reserved.setdefault(namespace, info.name)
        return reserved

    def records(self) -> list[AdapterRecord]:
        self.ensure_loaded()
        from importlib.metadata import PackageNotFoundError, version
        from importlib.util import find_spec

        rows = []
        for impl in self.pm.hook.tensorplug_adapter_info.get_hookimpls():
            plugin = impl.plugin
            info = impl.function()
            dist, dist_version = self.sources.get(id(plugin), (None, None))
            installed = info.framework in sys.modules or find_spec(info.framework) is not None
            fw_version = None
            if installed:
                try:
                    fw_version = version(info.framework_distribution or info.framework)
                except PackageNotFoundError:
                    fw_version = None
            rows.append(AdapterRecord(info.name, dist, dist_version, info.framework, installed, fw_version,
                                      tuple(info.tensor_types), tuple(info.capabilities), info.fast_path,
                                      None, plugin))
        rows.sort(key=lambda r: (r.distribution != "tensorplug", r.name))  # built-ins first
        return rows + list(self.errors)


def _dist_name(ep) -> str | None:
    return ep.dist.name if getattr(ep, "dist", None) is not None else None


registry = _Registry()


def register_adapter(plugin) -> str:
    """Register an in-process adapter plugin (an object or module with hookimpls).

    The adapter is named by the ``name`` of the :class:`AdapterInfo` its
    ``tensorplug_adapter_info`` hook returns (a ValueError when that name is taken). It
    takes precedence over every adapter registered before it, and the core forgets
    every type it resolved before. Returns its name."""
    return registry.register(plugin)


def output_table(framework: str) -> ExchangeTable:
    """The :class:`ExchangeTable` adapter ``framework`` returns tensors with (its
    ``tensorplug_output_table`` hook); ValueError naming the known adapters when none."""
    return registry.output_table(framework, "output_table")


def unregister_adapter(plugin) -> None:
    """Unregister an adapter plugin (the object, or its name); ValueError when it is not
    registered."""
    registry.unregister(plugin)


def adapters() -> list[AdapterRecord]:
    """Every discovered adapter (built-ins first), and the plugins that failed to load."""
    return registry.records()
