"""Adversarial inputs: random Python objects, broken ``__dlpack__`` producers, and tensors of
every installed framework with extreme shapes, strides, dtypes and devices.

Every generator takes a ``random.Random`` and returns ``(value, description)``; the
description is what the case log records, so a crash names the input that caused it.
"""

from __future__ import annotations

import datetime
import enum
import math
import sys

import tensorplug

# ------------------------------------------------------------------ plain objects ----


class _StrRaises:
    def __str__(self):
        raise RuntimeError("__str__ raises")


class _StrNotStr:
    def __str__(self):
        return 42


class _Index:
    def __index__(self):
        return 7

    def __int__(self):
        return 7

    def __float__(self):
        return 7.0


class _Color(enum.IntEnum):
    RED = 1


class _BigInt(int):
    pass


class _Str(str):
    pass


SCALARS = [
    None, True, False, 0, 1, -1, 127, 128, -129, 255, 256, 2**31 - 1, 2**31, -2**31 - 1, 2**32, 2**63 - 1,
    2**63, -2**63, -2**63 - 1, 2**64, 10**100, -10**100, _Color.RED, _BigInt(5), 0.0, -0.0, 1.5,
    math.nan, math.inf, -math.inf, 1e308, 5e-324, 3.4e38, 3.5e38,
]
STRINGS = [
    "", "cpu", "cpu:0", "cpu:1", "cuda", "cuda:0", "cuda:1", "cuda:-1", "cuda:99999999999", "cuda:2147483648",
    "cuda:-2147483649", "cuda:1e3", "cuda:0x10", "cuda: 1", "cuda:", ":", ":0", "cpu:x", "meta", "mps:0",
    "rocm:0", "cuda_host", "opencl:3", "\x00", "cpu\x00:1", "é", "\U0001F600", "\ud800", "a" * 100_000,
    "float32", "float16", "bfloat16", "int8", "uint64", "bool", "complex64", "complex128", "float8_e4m3fn",
    "float8_e5m2", "float128", "int3", "int0", "float32x4", "float33", "uint1", "int4", "x" * 300, _Str("int32"),
]
OTHER = [
    b"bytes", bytearray(b"ba"), [], [1, 2], (), (1,), (1, 2), (1, 0), (2, 0), (2, 99999999999), (-1, -1),
    (2**31, 0), (1, 2**31), ("cuda", 0), (1.5, 0), (None, None), (1, 2, 3), {}, set(), object(), _StrRaises(),
    _StrNotStr(), _Index(), int, float, str, sys, Ellipsis, NotImplemented, slice(1), range(3), complex(1, 2),
    memoryview(b"xy"), datetime.datetime_CAPI,
]


def _devices():
    out = [tensorplug.Device("cpu", 0)]
    for args in (("cuda", 0), ("cuda", 3)):
        try:
            out.append(tensorplug.Device(*args))
        except Exception:
            pass
    return out


# ----------------------------------------------------------------- callbacks ----
KEPT: list = []  # values callbacks kept past their call (views the docs say not to keep)


def _cb_return(value):
    def cb(*args):
        return value
    cb.__qualname__ = f"returns {value!r:.40}"
    return cb


def _cb_raises(*args):
    raise ValueError("callback raised")


def _cb_base_exception(*args):
    raise KeyError("callback key error")


def _cb_keeps(*args):
    KEPT.extend(args)
    del KEPT[:-8]
    return len(args)


def _cb_reads(*args):
    out = []
    for a in args:
        if isinstance(a, tensorplug.Tensor):
            out.append((a.shape, a.strides, str(a.dtype), str(a.device)))
    return len(out)


def _cb_recursive(*args):
    for a in args:
        if isinstance(a, tensorplug.Function):
            return a(1)
    return 0


CALLBACKS = [_cb_return(None), _cb_return(1), _cb_return(2**70), _cb_return("s"), _cb_return(object()),
             _cb_return([1]), _cb_return((1, "a", None)), _cb_raises, _cb_base_exception, _cb_keeps,
             _cb_reads, _cb_recursive, lambda: 0, lambda a, b, c, d, e: 0]


# ------------------------------------------------------------------ tensors ----


def _numpy_arrays(np, rng):
    dtypes = ["bool", "int8", "uint8", "int16", "int32", "int64", "uint64", "float16", "float32", "float64",
              "complex64", "complex128"]
    dt = rng.choice(dtypes)
    choice = rng.randrange(14)
    if choice == 0:
        return np.zeros((0,), dtype=dt), f"numpy {dt}[0]"
    if choice == 1:
        return np.array(3, dtype=dt), f"numpy {dt} scalar"
    if choice == 2:
        return np.ones((3, 4), dtype=dt).T, f"numpy {dt}[3,4].T"
    if choice == 3:
        return np.arange(10).astype(dt)[::-2], f"numpy {dt}[::-2]"
    if choice == 4:
        a = np.ones(4, dtype=dt)
        a.flags.writeable = False
        return a, f"numpy {dt} read-only"
    if choice == 5:
        return np.broadcast_to(np.ones(1, dtype=dt), (5, 3)), f"numpy {dt} broadcast stride 0"
    if choice == 6:
        return np.frombuffer(bytearray(17), dtype=np.uint8)[1:].view(np.float32), "numpy float32 misaligned"
    if choice == 7:
        nd = rng.choice([32, 63, 64])
        return np.ones((1,) * nd, dtype=dt), f"numpy {dt} ndim={nd}"
    if choice == 8:
        return np.empty((0, 2**40), dtype=dt), f"numpy {dt}[0, 2**40]"
    if choice == 9:
        return np.lib.stride_tricks.as_strided(np.zeros(1, dtype=dt), (2**20, 2**20), (0, 0),
                                               writeable=False), f"numpy {dt} huge stride-0"
    if choice == 10:
        return np.zeros((2, 3, 4), dtype=dt)[:, ::-1, 1:3], f"numpy {dt} sliced 3d"
    if choice == 11:
        return np.array(["a"]), "numpy <U1"
    if choice == 12:
        return np.array([object()]), "numpy object"
    return np.zeros(3, dtype=[("a", "i4"), ("b", "f4")]), "numpy structured"


def _torch_tensors(torch, rng):
    dtypes = [torch.bool, torch.int8, torch.uint8, torch.int16, torch.int32, torch.int64, torch.float16,
              torch.bfloat16, torch.float32, torch.float64, torch.complex64, torch.uint16, torch.uint32,
              torch.float8_e4m3fn, torch.float8_e5m2]
    dt = rng.choice(dtypes)
    name = str(dt).replace("torch.", "")
    choice = rng.randrange(12)
    if choice == 0:
        return torch.zeros(0, dtype=dt), f"torch {name}[0]"
    if choice == 1:
        return torch.ones(3, 4, dtype=dt).t(), f"torch {name}[3,4].t()"
    if choice == 2:
        return torch.zeros(2, 3, dtype=torch.float32).flip(0), "torch float32 flip (negative stride)"
    if choice == 3:
        return torch.zeros(3, requires_grad=True), "torch requires_grad"
    if choice == 4:
        return torch.ones(2, dtype=torch.complex64).conj(), "torch conj view"
    if choice == 5:
        return torch.empty(2, 3, device="meta"), "torch meta"
    if choice == 6:
        return torch.zeros(3, 3).to_sparse(), "torch sparse"
    if choice == 7:
        return torch.zeros(1).expand(4, 5), "torch expand stride 0"
    if choice == 8:
        nd = rng.choice([25, 64])
        return torch.zeros((1,) * nd, dtype=dt), f"torch {name} ndim={nd}"
    if choice == 9:
        return torch.zeros(4)[1:].view(torch.uint8)[1:], "torch uint8 offset view"
    if choice == 10:
        return torch.zeros(2, dtype=torch.float32).neg(), "torch neg"
    return torch.tensor(5, dtype=dt), f"torch {name} scalar"


def _jax_arrays(jnp, rng):
    choice = rng.randrange(6)
    if choice == 0:
        return jnp.zeros((0, 3)), "jax float32[0,3]"
    if choice == 1:
        return jnp.arange(6, dtype=jnp.int32).reshape(2, 3).T, "jax int32 transposed"
    if choice == 2:
        return jnp.array(True), "jax bool scalar"
    if choice == 3:
        return jnp.zeros(3, dtype=jnp.bfloat16), "jax bfloat16"
    if choice == 4:
        nd = rng.choice([65, 300])
        return jnp.zeros((1,) * nd), f"jax ndim={nd}"
    return jnp.ones((2, 2), dtype=jnp.complex64), "jax complex64"


def _paddle_tensors(paddle, rng):
    choice = rng.randrange(5)
    if choice == 0:
        return paddle.zeros([0]), "paddle float32[0]"
    if choice == 1:
        return paddle.ones([3, 4]).t(), "paddle [3,4].t()"
    if choice == 2:
        return paddle.to_tensor([1, 2], dtype="int8"), "paddle int8"
    if choice == 3:
        return paddle.zeros([2, 2], dtype="bfloat16"), "paddle bfloat16"
    return paddle.to_tensor(True), "paddle bool scalar"


class Frameworks:
    """The frameworks this run uses (a name that cannot be imported is left out)."""

    def __init__(self, names):
        self.modules = {}
        for name in names:
            try:
                if name == "numpy":
                    import numpy as m
                elif name == "torch":
                    import torch as m
                elif name == "jax":
                    import jax
                    import jax.numpy as m
                    jax.config.update("jax_platforms", "cpu")
                elif name == "paddle":
                    import paddle as m
                else:
                    continue
            except Exception:
                continue
            self.modules[name] = m

    def tensor(self, rng):
        if not self.modules:
            return None, "no framework"
        name = rng.choice(sorted(self.modules))
        make = {"numpy": _numpy_arrays, "torch": _torch_tensors, "jax": _jax_arrays,
                "paddle": _paddle_tensors}[name]
        return make(self.modules[name], rng)

    def plain(self, rng):
        """A small float32 CPU tensor of some framework (a value kernels accept)."""
        if "numpy" in self.modules:
            return self.modules["numpy"].ones(3, dtype="float32"), "numpy float32[3]"
        return tensorplug.from_dlpack(self.tensor(rng)[0]), "tensorplug.Tensor"


# --------------------------------------------------------- broken producers ----


class Producer:
    """An object with ``__dlpack__``/``__dlpack_device__`` doing what it is told."""

    def __init__(self, dlpack, device, old_style=False):
        self._dlpack = dlpack
        self._device = device
        if old_style:  # no keyword arguments: an old producer
            self.__dlpack__ = lambda: self._dlpack()

    def __dlpack__(self, stream=None, max_version=None, dl_device=None, copy=None):
        return self._dlpack()

    def __dlpack_device__(self):
        return self._device()

    shape = (999999,)  # lies: the capsule decides


def _raise(exc):
    def f():
        raise exc
    return f


def producer(fw, rng, kernels):
    """A ``__dlpack__`` producer that raises, returns junk, a consumed capsule, a capsule of a
    hand-made odd tensor, or one that changes between calls."""
    base, base_desc = fw.plain(rng)
    good_device = (lambda: (1, 0))
    kind = rng.randrange(13)
    if kind == 0:
        return Producer(_raise(ValueError("no")), good_device), "producer: __dlpack__ raises"
    if kind == 1:
        junk = rng.choice([None, 42, "capsule", datetime.datetime_CAPI, (1, 2), base])
        return Producer(lambda: junk, good_device), f"producer: __dlpack__ returns {type(junk).__name__}"
    if kind == 2:
        cap = base.__dlpack__()
        tensorplug.from_dlpack(cap)  # consumes it
        return Producer(lambda: cap, good_device), "producer: consumed capsule"
    if kind == 3:
        dev = rng.choice([None, (1,), ("a", 0), (2, 0), (1, 2**40), (2**40, 0), (-1, 0), [1, 0], 1])
        return Producer(base.__dlpack__, lambda: dev), f"producer: __dlpack_device__ returns {dev!r}"
    if kind == 4:
        return Producer(base.__dlpack__, _raise(RuntimeError("dev"))), "producer: __dlpack_device__ raises"
    if kind == 5:
        return Producer(lambda: base.__dlpack__(), good_device, old_style=True), "producer: old-style __dlpack__"
    if kind == 6:
        layout, ndim = rng.randrange(9), rng.choice([0, 1, 2, 65, 2049])
        odd = kernels.raw(layout, ndim, "float32", "cpu")
        return Producer(odd.__dlpack__, good_device), f"producer: raw layout={layout} ndim={ndim}"
    if kind == 7:
        calls = [0]

        def changing():
            calls[0] += 1
            t = fw.tensor(rng)[0]
            return t.__dlpack__() if calls[0] % 2 else base.__dlpack__()
        return Producer(changing, good_device), "producer: a different capsule each call"
    if kind == 8:
        return Producer(_raise(MemoryError()), good_device), "producer: __dlpack__ raises MemoryError"
    if kind == 9:
        return Producer(lambda: base.__dlpack__(), lambda: (2, 0)), "producer: claims cuda, gives cpu"
    if kind == 10:
        cap = base.__dlpack__()
        return cap, "raw DLPack capsule"
    if kind == 11:
        try:
            return base.__dlpack__(max_version=(1, 0)), "versioned DLPack capsule"
        except TypeError:
            return base.__dlpack__(), "DLPack capsule"
    return Producer(lambda: base.__dlpack__(), lambda: (1, 0)), f"producer: honest ({base_desc})"
