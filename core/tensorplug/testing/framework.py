"""How the conformance kit makes and reads an adapter's tensors: :class:`Framework`.

Each adapter's Framework reaches the kit through the pytest hook
``pytest_tensorplug_framework(name)``: tensorplug's first-party adapters implement it in
``tensorplug_adapters.testing.<name>`` (pytest plugins registered through ``pytest11``
entry points), a third party in its conftest or its own pytest plugin. An adapter with no
Framework of its own is tested through :class:`AdapterFramework`, which reads what the
adapter declares.

Nothing here imports a framework (or numpy) until a tensor of it is asked for.
"""

from __future__ import annotations

import importlib.util
import sys
from dataclasses import dataclass

import tensorplug

# The dtypes the conformance kit round-trips, by their tensorplug names.
DTYPES = ("bool", "int8", "int16", "int32", "int64", "uint8", "float16", "bfloat16", "float32", "float64",
          "complex64", "complex128")


# The kit's layouts (tensorplug.testing.conformance.LAYOUTS) an adapter may refuse, and the
# two it never may: every framework must take and give contiguous and 0-d tensors.
REFUSABLE_LAYOUTS = ("zero-size", "transposed", "sliced", "negative", "reversed", "broadcast")
NEVER_REFUSED = ("contiguous", "0-d")
NEGATIVE_STRIDES = ("negative", "reversed")  # the layouts with a negative stride


class Unsupported(Exception):
    """A framework cannot make the tensor asked for (a dtype, a layout, a device); the
    conformance kit skips with this message, unless the framework declares the refusal
    (:meth:`Framework.refusals`)."""


@dataclass(frozen=True)
class Refusal:
    """How an adapter refuses something: with an exception of type ``error`` (or a
    subclass) whose message matches the regular expression ``match`` (``re.search``)."""

    error: type
    match: str


def refusable() -> tuple[str, ...]:
    """What :meth:`Framework.refusals` may name: a refusable layout, a dtype of
    ``DTYPES``, or ``"read-only"`` (the adapter refuses read-only memory)."""
    return (*REFUSABLE_LAYOUTS, *DTYPES, "read-only")


def is_installed(module: str) -> bool:
    """Whether the module can be imported (without importing it)."""
    return module in sys.modules or importlib.util.find_spec(module) is not None


def device_index(device: str) -> int:
    """The index of a device string: ``"cuda:1"`` -> 1, ``"cpu"`` -> 0."""
    return int(str(device).partition(":")[2] or 0)


def _np():
    import numpy

    return numpy


def numpy_view(base, shape, strides, offset: int):
    """The numpy view of the 1-D array ``base`` with ``shape``, ``strides`` and ``offset``
    in elements (negative and zero strides included); no bounds checks."""
    step = base.itemsize
    return _np().lib.stride_tricks.as_strided(base[offset:], tuple(shape), tuple(s * step for s in strides))


class Framework:
    """How the conformance kit makes and reads the tensors of one adapter.

    A subclass implements at least :meth:`from_numpy` and :meth:`to_numpy`; the other
    methods have defaults that say "not supported", which the kit turns into skips that
    name the reason. ``name`` is the adapter's name (the test id), ``module`` the import
    name of the framework (missing: the kit skips with "<name> not installed"),
    ``device`` where the kit makes tensors, ``read_only`` whether every tensor of the
    framework enters kernels read-only (immutable arrays, such as jax's), ``fork_safe``
    whether its tensors work in a forked child process (where the kit runs the checks that
    could abort the process); False for frameworks whose thread pools deadlock there.
    """

    name = ""
    module: str | None = None
    device = "cpu"
    read_only = False
    fork_safe = True
    #: True for a framework that copies every tensor it imports (its DLPack import makes new
    #: memory, as MLX's does): a kernel's result then comes back as a copy, and the exchange
    #: check asserts that ``identity(x)`` has x's values in memory of its own, instead of
    #: failing because it does not share x's.
    copies_on_import = False

    def missing(self) -> str | None:
        """Why the framework cannot be tested here, or None."""
        if self.module is not None and not is_installed(self.module):
            return f"{self.name} not installed"
        return None

    def import_framework(self) -> None:
        """Import the framework (``module``) before the checks run: once, in the test
        process. Override to import it as the adapter does (paddle's silences a build
        warning that is not the adapter's)."""
        if self.module:
            importlib.import_module(self.module)

    def refusals(self) -> dict[str, Refusal]:
        """What the adapter refuses, by name (see :func:`refusable`), and how.

        The kit expects exactly these refusals: a layout named here must be refused when a
        view of it is converted into the framework (``output_framework``), and may be
        refused (with this error) when it enters a kernel; a dtype named here likewise;
        ``"read-only"``: converting read-only memory into the framework is refused. Any
        other refusal (an error instead of a result) fails the check; contiguous and 0-d
        tensors can never be refused. Default: nothing."""
        return {}

    def cuda_devices(self) -> list[str]:
        """The CUDA devices this framework can make tensors on (``["cuda:0"]``)."""
        return []

    def unsupported_dtype(self, dtype: str) -> str | None:
        """Why the framework has no tensors of ``dtype``, or None."""
        if dtype == "bfloat16" and not is_installed("ml_dtypes"):
            return "numpy, which the kit reads tensors back with, has no bfloat16 without ml_dtypes"
        return None

    def from_numpy(self, array, device: str | None = None, dtype: str | None = None):
        """A new tensor holding a copy of the C-contiguous numpy ``array`` on ``device``
        (None: ``self.device``). ``dtype`` is given for dtypes numpy cannot hold
        (``"bfloat16"``, whose values come as float32)."""
        raise NotImplementedError(f"{type(self).__name__}.from_numpy")

    def as_strided(self, base, shape, strides, offset: int):
        """A view of the 1-D tensor ``base`` (made by :meth:`from_numpy`) with ``shape``,
        ``strides`` and ``offset`` in elements. Raise :class:`Unsupported` for views the
        framework cannot have."""
        raise Unsupported(f"{self.name} tensors have no strides")

    def to_numpy(self, x):
        """A numpy copy of the tensor ``x`` (bfloat16 as float32)."""
        raise NotImplementedError(f"{type(self).__name__}.to_numpy")

    def data_ptr(self, x) -> int | None:
        """The address of element 0 of ``x``, or None when it cannot be told. Default:
        through ``x.__dlpack__`` for CPU tensors."""
        if x.__dlpack_device__()[0] != 1:
            return None
        return _np().from_dlpack(x).__array_interface__["data"][0]

    def output_type(self) -> type:
        """The type kernel results come back as."""
        return type(self.from_numpy(_np().zeros(1, _np().float32), self.device))

    def read_only_tensor(self, array):
        """A read-only tensor holding a copy of ``array`` (kernels must not write it), or
        None when the framework has no read-only tensors."""
        return self.from_numpy(array) if self.read_only else None

    def shape_of(self, x):
        """The framework's own object for the shape of ``x`` (``torch.Size``, numpy's and
        jax's tuple, paddle's list), which the kit passes to an int-array parameter; None
        when its tensors have none. Default: ``x.shape`` where there is one."""
        return getattr(x, "shape", None)

    def allocation_counter(self, device: str):
        """A context manager giving a callable that returns the bytes the framework's
        allocator handed out for ``device`` since entering, or None when the framework does
        not count them."""
        return None

    def current_stream(self, device: str) -> int | None:
        """The framework's current stream of ``device`` as an int (None: default stream)."""
        return None

    def stream(self, device: str):
        """A context manager that makes a new, non-default stream of ``device`` current in
        the framework and gives ``(stream object, raw handle)``; None without streams."""
        return None

    def compile(self, fn):
        """``fn`` compiled by the framework's graph compiler (``torch.compile``,
        ``jax.jit``), to be called with this framework's tensors, or None (the default):
        the framework has none, and the kit's "compiler" checks report "not provided"."""
        return None

    def gradient(self, fn, *args):
        """The gradients of ``sum(fn(*args))`` with respect to each of ``args`` (tensors of
        this framework), as a tuple, by the framework's own autodiff (``torch.autograd.grad``,
        ``jax.grad``); or None (the default): the framework has none, and the kit's
        "gradients" checks report "not provided"."""
        return None

    def require_cpu(self, device) -> None:
        """Raise :class:`Unsupported` unless ``device`` is the CPU (None counts as CPU)."""
        if device not in (None, "cpu", "cpu:0"):
            raise Unsupported(f"{self.name} tensors live on the cpu, not {device}")

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.name!r}>"


class NumpyBackedFramework(Framework):
    """A CPU framework whose tensors the kit builds around numpy memory (the kit needs
    numpy): a subclass implements :meth:`wrap`, turning a numpy array into a tensor that
    shares its memory; tensors are read back through their ``__dlpack__``. ``module``, the
    framework's import name, is checked besides numpy."""

    module = "numpy"

    def missing(self):
        return "numpy not installed" if not is_installed("numpy") else super().missing()

    def wrap(self, array):
        """A tensor of the framework sharing the memory of the numpy ``array`` (whose
        dtype may be ml_dtypes' bfloat16: :func:`as_dlpack` exports it)."""
        raise NotImplementedError(f"{type(self).__name__}.wrap")

    def from_numpy(self, array, device=None, dtype=None):
        self.require_cpu(device)
        if dtype == "bfloat16":
            reason = self.unsupported_dtype(dtype)
            if reason:
                raise Unsupported(reason)
            import ml_dtypes

            return self.wrap(array.astype(ml_dtypes.bfloat16))
        return self.wrap(array.copy())

    def as_strided(self, base, shape, strides, offset):
        return self.wrap(numpy_view(host_numpy(base), shape, strides, offset))

    def to_numpy(self, x):
        a = host_numpy(x).copy()
        return a.astype("float32") if a.dtype.name == "bfloat16" else a

    def read_only_tensor(self, array):
        array = array.copy()
        array.flags.writeable = False
        return self.wrap(array)


class TensorplugFramework(NumpyBackedFramework):
    """``tensorplug.Tensor`` itself (a pseudo-adapter: the core's own table)."""

    name = "tensorplug"

    def wrap(self, array):
        return as_dlpack(array)

    def output_type(self):
        return tensorplug.Tensor


class AdapterFramework(NumpyBackedFramework):
    """Any adapter with no Framework of its own (a third party's): its tensors are made by
    the adapter's own output conversion (:meth:`tensorplug.ExchangeTable.to_framework`)
    from a ``tensorplug.Tensor`` viewing numpy memory, and read back through their
    ``__dlpack__``. Strided views come out of the same conversion, so the adapter must
    keep strides when it imports.

    What the adapter declares is what it is certified against: an output table built with
    ``read_only=True`` (immutable arrays) makes every tensor read-only; otherwise a
    read-only tensor is made from a read-only numpy array, and the adapter must carry the
    flag through: one that imports read-only memory as writable fails the ``read-only``
    capability, one whose import refuses read-only memory skips it.
    """

    def __init__(self, record):
        self.name = record.name
        self.module = record.framework
        self._installed = record.framework_installed
        self._table = None
        self._dtype_reasons: dict[str, str | None] = {}

    def unsupported_dtype(self, dtype):
        """The adapter declares no dtypes: one its conversion cannot make (a framework
        without bfloat16) is skipped with the adapter's error, and the capability reads
        "partial"."""
        reason = super().unsupported_dtype(dtype)
        if reason is not None:
            return reason
        if dtype not in self._dtype_reasons:
            array = sample((1,), dtype)
            try:
                if dtype == "bfloat16":
                    import ml_dtypes

                    array = array.astype(ml_dtypes.bfloat16)
                self.wrap(array)
                self._dtype_reasons[dtype] = None
            except Exception as exc:  # noqa: BLE001  (whatever the adapter raises is the reason)
                first = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
                self._dtype_reasons[dtype] = f"{self.name} cannot make {dtype} tensors ({type(exc).__name__}: {first})"
        return self._dtype_reasons[dtype]

    def missing(self):
        if not self._installed:
            return f"{self.name} not installed"
        return None if is_installed("numpy") else "numpy not installed"

    @property
    def table(self) -> tensorplug.ExchangeTable:
        """The adapter's output table (asked for once)."""
        if self._table is None:
            self._table = tensorplug.output_table(self.name)
        return self._table

    @property
    def read_only(self) -> bool:  # the declaration, not a guess
        return self.table.read_only is True

    def wrap(self, array):
        return self.table.to_framework(as_dlpack(array))

    def read_only_tensor(self, array):
        if self.read_only:
            return self.from_numpy(array)
        try:
            return super().read_only_tensor(array)
        except Exception:  # noqa: BLE001  (the framework refuses read-only memory: it has none)
            return None


def as_dlpack(array) -> tensorplug.Tensor:
    """A ``tensorplug.Tensor`` sharing the memory of the numpy ``array``: a DLPack producer
    for any dtype, ml_dtypes' bfloat16 included (numpy's own ``__dlpack__`` refuses it;
    tensorplug's numpy adapter reads the array struct)."""
    return tensorplug.from_dlpack(array)


def host_numpy(x):
    """A numpy array sharing the memory of the CPU tensor ``x`` (any DLPack producer),
    bfloat16 as ml_dtypes' bfloat16 (numpy's ``from_dlpack`` refuses it; tensorplug's numpy
    adapter makes the array)."""
    return tensorplug.output_table("numpy").to_framework(tensorplug.from_dlpack(x))


def contiguous_strides(shape) -> tuple[int, ...]:
    """Row-major strides in elements of ``shape`` (extent-0 and -1 dimensions count as 1)."""
    strides, step = [], 1
    for extent in reversed(tuple(shape)):
        strides.append(step)
        step *= max(extent, 1)
    return tuple(reversed(strides))


def sample(shape, dtype: str):
    """The kit's reference values of ``dtype`` and ``shape`` as a numpy array: small,
    exactly representable values with both signs (bfloat16 values as float32)."""
    np = _np()
    n = 1
    for extent in shape:
        n *= extent
    i = np.arange(n)
    if dtype == "bool":
        values = i % 3 == 0
    elif dtype.startswith("uint"):
        values = (i * 3) % 250
    elif dtype.startswith("int"):
        values = (i * 3) % 100 * np.where(i % 2, -1, 1)
    elif dtype.startswith("complex"):
        values = (i * 0.5 - 1.25) + 0.25j * (i % 3)
    else:
        values = i * 0.5 - 1.25
    return values.astype("float32" if dtype == "bfloat16" else dtype).reshape(tuple(shape))


def make_tensor(framework: Framework, shape=(2, 3), dtype: str = "float32", strides=None, device=None):
    """``(tensor, expected)``: a ``framework`` tensor of ``dtype`` and ``shape`` holding the
    kit's :func:`sample` values, and those values as numpy (bfloat16 as float32).

    With ``strides`` (in elements; negative and zero allowed) the tensor is a view with
    exactly those strides into a larger buffer of the framework. Raises
    :class:`Unsupported` when the framework cannot have such a tensor.
    """
    np = _np()
    shape = tuple(shape)
    reason = framework.unsupported_dtype(dtype)
    if reason:
        raise Unsupported(reason)
    device = device or framework.device
    expected = sample(shape, dtype)
    if strides is None or tuple(strides) == contiguous_strides(shape) or expected.size == 0:
        return framework.from_numpy(expected, device, dtype), expected
    strides = tuple(strides)
    if len(strides) != len(shape):
        raise ValueError(f"make_tensor: {len(strides)} strides for shape {shape}")
    # The smallest buffer holding the view; element 0 of the view sits at `offset`.
    offset = sum(-s * (e - 1) for e, s in zip(shape, strides) if s < 0)
    size = offset + sum(s * (e - 1) for e, s in zip(shape, strides) if s > 0) + 1
    base = np.zeros(size, expected.dtype)
    view = numpy_view(base, shape, strides, offset)
    view[...] = expected
    expected = view.copy()  # aliased elements (zero strides) hold the last value written
    base_tensor = framework.from_numpy(base, device, dtype)
    return framework.as_strided(base_tensor, shape, strides, offset), expected
