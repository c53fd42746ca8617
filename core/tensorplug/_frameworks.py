"""Making and reading tensors of each adapter's framework: the demo, the benchmark and the
conformance kit (:mod:`tensorplug.testing`) build on the :class:`Framework` objects here.

Nothing here imports a framework (or numpy) until a tensor of it is asked for.
"""

from __future__ import annotations

import contextlib
import importlib.util
import sys

# The dtypes the conformance kit round-trips, by their tensorplug names.
DTYPES = ("bool", "int8", "int16", "int32", "int64", "uint8", "float16", "bfloat16", "float32", "float64",
          "complex64", "complex128")


class Unsupported(Exception):
    """A framework cannot make the tensor asked for (a dtype, a layout, a device); the
    conformance kit skips with this message."""


def is_installed(module: str) -> bool:
    """Whether the module can be imported (without importing it)."""
    return module in sys.modules or importlib.util.find_spec(module) is not None


def type_name(obj) -> str:
    t = type(obj)
    return f"{t.__module__}.{t.__qualname__}"


def _np():
    import numpy

    return numpy


def _device_index(device: str) -> int:
    return int(str(device).partition(":")[2] or 0)


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

    def missing(self) -> str | None:
        """Why the framework cannot be tested here, or None."""
        if self.module is not None and not is_installed(self.module):
            return f"{self.name} not installed"
        return None

    def cuda_devices(self) -> list[str]:
        """The CUDA devices this framework can make tensors on (``["cuda:0"]``)."""
        return []

    def unsupported_dtype(self, dtype: str) -> str | None:
        """Why the framework has no tensors of ``dtype``, or None."""
        return "numpy's DLPack import, which reads tensors back, has no bfloat16" if dtype == "bfloat16" else None

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

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.name!r}>"


def _tracemalloc_counter():
    """numpy reports its data allocations to tracemalloc."""
    import tracemalloc

    @contextlib.contextmanager
    def counting():
        tracing = tracemalloc.is_tracing()
        if not tracing:
            tracemalloc.start()
        start = tracemalloc.get_traced_memory()[0]
        try:
            yield lambda: tracemalloc.get_traced_memory()[0] - start
        finally:
            if not tracing:
                tracemalloc.stop()

    return counting()


def _check_cpu(framework: Framework, device) -> None:
    if device not in (None, "cpu", "cpu:0"):
        raise Unsupported(f"{framework.name} tensors live on the cpu, not {device}")


class NumpyFramework(Framework):
    name = module = "numpy"

    def unsupported_dtype(self, dtype):
        if dtype == "bfloat16" and not is_installed("ml_dtypes"):
            return "numpy has no bfloat16 without ml_dtypes"
        return None

    def from_numpy(self, array, device=None, dtype=None):
        _check_cpu(self, device)
        if dtype == "bfloat16":
            import ml_dtypes

            return array.astype(ml_dtypes.bfloat16)
        return array.copy()

    def as_strided(self, base, shape, strides, offset):
        return numpy_view(base, shape, strides, offset)

    def to_numpy(self, x):
        np = _np()
        return x.astype(np.float32) if x.dtype.name == "bfloat16" else np.array(x, copy=True)

    def read_only_tensor(self, array):
        x = array.copy()
        x.flags.writeable = False
        return x

    def allocation_counter(self, device):
        return _tracemalloc_counter() if device in ("cpu", "cpu:0") else None


class TorchFramework(Framework):
    name = module = "torch"

    def unsupported_dtype(self, dtype):
        return None

    def cuda_devices(self):
        import torch

        return [f"cuda:{i}" for i in range(torch.cuda.device_count())] if torch.cuda.is_available() else []

    def from_numpy(self, array, device=None, dtype=None):
        import torch

        t = torch.from_numpy(array.copy())
        if dtype == "bfloat16":
            t = t.to(torch.bfloat16)
        return t.to(device or self.device)

    def as_strided(self, base, shape, strides, offset):
        import torch

        if any(s < 0 for s in strides):
            raise Unsupported("torch tensors cannot have negative strides")
        return torch.as_strided(base, tuple(shape), tuple(strides), offset)

    def to_numpy(self, x):
        import torch

        x = x.detach().cpu().resolve_conj().resolve_neg()
        if x.dtype == torch.bfloat16:
            x = x.float()
        return x.numpy().copy()

    def data_ptr(self, x):
        return x.data_ptr()

    def allocation_counter(self, device):
        import torch

        if not device.startswith("cuda"):
            return None  # torch counts no cpu memory

        @contextlib.contextmanager
        def counting():
            start = torch.cuda.memory_allocated(device)
            yield lambda: torch.cuda.memory_allocated(device) - start

        return counting()

    def current_stream(self, device):
        import torch

        if not device.startswith("cuda"):
            return None
        return torch.cuda.current_stream(device).cuda_stream or None

    def stream(self, device):
        import torch

        @contextlib.contextmanager
        def using():
            s = torch.cuda.Stream(device)
            with torch.cuda.stream(s):
                yield s, s.cuda_stream

        return using() if device.startswith("cuda") else None


class JaxFramework(Framework):
    name = module = "jax"
    read_only = True
    fork_safe = False  # jax's thread pools are gone in a forked child: imports can hang there

    def unsupported_dtype(self, dtype):
        import jax

        if dtype in ("int64", "float64", "complex128") and not jax.config.jax_enable_x64:
            return f"jax has no {dtype} unless jax_enable_x64 is set"
        return None

    def cuda_devices(self):
        import jax

        try:
            return [f"cuda:{i}" for i in range(len(jax.devices("gpu")))]
        except RuntimeError:  # no GPU backend
            return []

    def from_numpy(self, array, device=None, dtype=None):
        import jax
        import jax.numpy as jnp

        device = device or self.device
        platform = "gpu" if device.startswith("cuda") else "cpu"
        x = jnp.asarray(array.copy(), dtype=jnp.bfloat16 if dtype == "bfloat16" else None)
        return jax.device_put(x, jax.devices(platform)[_device_index(device)])

    def as_strided(self, base, shape, strides, offset):
        raise Unsupported("jax arrays have no strides")

    def to_numpy(self, x):
        np = _np()
        a = np.array(x, copy=True)
        return a.astype(np.float32) if a.dtype.name == "bfloat16" else a

    def data_ptr(self, x):
        return x.unsafe_buffer_pointer()


class PaddleFramework(Framework):
    name = module = "paddle"

    def unsupported_dtype(self, dtype):
        return None

    def cuda_devices(self):
        import paddle

        if not paddle.device.is_compiled_with_cuda():
            return []
        return [f"cuda:{i}" for i in range(paddle.device.cuda.device_count())]

    def from_numpy(self, array, device=None, dtype=None):
        import paddle

        device = device or self.device
        place = paddle.CPUPlace() if device.startswith("cpu") else paddle.CUDAPlace(_device_index(device))
        t = paddle.to_tensor(array.copy(), place=place)
        return t.astype("bfloat16") if dtype == "bfloat16" else t

    def as_strided(self, base, shape, strides, offset):
        import paddle

        return paddle.as_strided(base, list(shape), list(strides), offset * base.element_size())

    def to_numpy(self, x):
        import paddle

        if x.dtype == paddle.bfloat16:
            x = x.astype("float32")
        return _np().array(x.cpu().numpy(), copy=True)

    def data_ptr(self, x):
        return x.data_ptr()

    def current_stream(self, device):
        import paddle

        if not device.startswith("cuda"):
            return None
        return paddle.device.current_stream(f"gpu:{_device_index(device)}").stream_base.cuda_stream or None

    def stream(self, device):
        import paddle

        @contextlib.contextmanager
        def using():
            s = paddle.device.Stream(device=f"gpu:{_device_index(device)}")
            with paddle.device.stream_guard(s):
                yield s, s.stream_base.cuda_stream

        return using() if device.startswith("cuda") else None


class CupyFramework(Framework):
    name = module = "cupy"
    device = "cuda:0"

    def missing(self):
        return super().missing() or (None if self.cuda_devices() else "no CUDA device")

    def unsupported_dtype(self, dtype):
        return "cupy has no bfloat16" if dtype == "bfloat16" else None

    def cuda_devices(self):
        import cupy

        try:
            return [f"cuda:{i}" for i in range(cupy.cuda.runtime.getDeviceCount())]
        except cupy.cuda.runtime.CUDARuntimeError:
            return []

    def from_numpy(self, array, device=None, dtype=None):
        import cupy

        device = device or self.device
        if not device.startswith("cuda"):
            raise Unsupported(f"cupy arrays live on CUDA devices, not {device}")
        with cupy.cuda.Device(_device_index(device)):
            return cupy.asarray(array)

    def as_strided(self, base, shape, strides, offset):
        import cupy

        step = base.itemsize
        return cupy.lib.stride_tricks.as_strided(base[offset:], tuple(shape), tuple(s * step for s in strides))

    def to_numpy(self, x):
        return x.get()

    def data_ptr(self, x):
        return x.data.ptr

    def allocation_counter(self, device):
        import cupy

        pool = cupy.get_default_memory_pool()

        @contextlib.contextmanager
        def counting():
            start = pool.used_bytes()
            yield lambda: pool.used_bytes() - start

        return counting()

    def current_stream(self, device):
        import cupy

        with cupy.cuda.Device(_device_index(device)):
            return cupy.cuda.get_current_stream().ptr or None

    def stream(self, device):
        import cupy

        @contextlib.contextmanager
        def using():
            with cupy.cuda.Device(_device_index(device)):
                s = cupy.cuda.Stream(non_blocking=True)
                with s:
                    yield s, s.ptr

        return using()


class _NumpyBacked(Framework):
    """Frameworks whose tensors the kit builds around numpy memory (the kit needs numpy)."""

    module = "numpy"

    def missing(self):
        return "numpy not installed" if not is_installed("numpy") else None

    def wrap(self, array):
        raise NotImplementedError

    def from_numpy(self, array, device=None, dtype=None):
        _check_cpu(self, device)
        if dtype == "bfloat16":
            raise Unsupported(self.unsupported_dtype(dtype))
        return self.wrap(array.copy())

    def as_strided(self, base, shape, strides, offset):
        return self.wrap(numpy_view(_np().from_dlpack(base), shape, strides, offset))

    def to_numpy(self, x):
        return _np().from_dlpack(x).copy()

    def read_only_tensor(self, array):
        array = array.copy()
        array.flags.writeable = False
        return self.wrap(array)


class TensorplugFramework(_NumpyBacked):
    """``tensorplug.Tensor`` itself (a pseudo-adapter: the core's own table)."""

    name = "tensorplug"

    def wrap(self, array):
        from . import from_dlpack

        return from_dlpack(array)

    def output_type(self):
        from . import Tensor

        return Tensor


class DLPackArray:
    """An array type no adapter claims: it only speaks DLPack (for the ``dlpack`` fallback)."""

    __slots__ = ("array",)

    def __init__(self, array):
        self.array = array

    def __dlpack__(self, **kwargs):
        return self.array.__dlpack__(**kwargs)

    def __dlpack_device__(self):
        return self.array.__dlpack_device__()


class DLPackFramework(_NumpyBacked):
    """The generic fallback adapter: any object with ``__dlpack__``; results come back as
    ``tensorplug.Tensor``."""

    name = "dlpack"

    def wrap(self, array):
        return DLPackArray(array)

    def output_type(self):
        from . import Tensor

        return Tensor


class AdapterFramework(_NumpyBacked):
    """Any other adapter (a third party's), with no Framework of its own: its tensors are
    made by the adapter's own output conversion, from a ``tensorplug.Tensor`` viewing numpy
    memory, and read back through their ``__dlpack__``. Strided views come out of the same
    conversion, so the adapter must keep strides when it imports."""

    def __init__(self, record):
        self.name = record.name
        self.module = record.framework
        self._installed = record.framework_installed
        self._table = None

    def missing(self):
        if not self._installed:
            return f"{self.name} not installed"
        return None if is_installed("numpy") else "numpy not installed"

    def wrap(self, array):
        from . import _core, from_dlpack
        from ._registry import registry

        if self._table is None:
            self._table = registry.output_table(self.name)._c_table
        return _core.to_framework(from_dlpack(array), self._table)

    # Whether a third party's tensors can be read-only is not known: not claimed.
    read_only_tensor = Framework.read_only_tensor


BUILTIN = {f.name: f for f in (NumpyFramework, TorchFramework, JaxFramework, PaddleFramework, CupyFramework,
                               TensorplugFramework, DLPackFramework)}


def get_framework(name: str) -> Framework | None:
    """The Framework of adapter ``name``: a built-in one, or an :class:`AdapterFramework`
    for any other registered adapter; None when no adapter has that name."""
    if name in BUILTIN:
        return BUILTIN[name]()
    from ._registry import registry

    for record in registry.records():
        if record.name == name and record.error is None:
            return AdapterFramework(record)
    return None


def contiguous_strides(shape) -> tuple[int, ...]:
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


# ------------------------------------------------------------ the bench's helper ----
def make(framework: str, array, device: str = "cpu"):
    """A ``framework`` tensor holding a copy of the numpy ``array`` on ``device``."""
    found = get_framework(framework)
    if found is None:
        raise ValueError(f"make(): unknown framework {framework!r}")
    return found.from_numpy(_np().ascontiguousarray(array), device)
