"""Helpers the conformance kit's capability modules share: making a framework's tensors
(skipping with the reason when it cannot), reading what a kernel sees, comparing values,
and the skips for missing devices. Imports no framework (numpy only when values are read).
"""

from __future__ import annotations

from typing import NamedTuple

import pytest

import tensorplug
from tensorplug import _core
from tensorplug._types import as_device
from tensorplug.testing.framework import Unsupported, make_tensor

__all__ = ["Seen", "assert_values", "call_state", "device_name", "make", "needs_cuda", "needs_host", "parse_seen",
           "plus_one", "read_only_flag", "same_strides", "seen"]


class Seen(NamedTuple):
    """A tensor as a kernel sees it (the ``describe`` kernel)."""

    dtype: str
    shape: tuple[int, ...]
    strides: tuple[int, ...]
    device: str
    read_only: bool


def seen(kernels, x) -> Seen:
    return parse_seen(kernels.describe(x))


def read_only_flag(kernels) -> bool:
    """Whether the kit's kernel library ``kernels`` tells read-only tensors (describe()'s last
    field); tvm-ffi's cannot (tensorplug.testing.tvm_ffi_kernels.KernelLibrary)."""
    return getattr(type(kernels), "read_only_flag", True)


def parse_seen(text: str) -> Seen:
    """A ``describe`` kernel's answer, "dtype|shape|strides|device|read_only"."""
    dtype, shape, strides, device, read_only = text.split("|")
    ints = lambda text: tuple(int(v) for v in text.split(",")) if text else ()  # noqa: E731
    return Seen(dtype, ints(shape), ints(strides), device, read_only == "1")


def device_name(device: str) -> str:
    return str(as_device(device))


def make(framework, shape=(2, 3), dtype="float32", strides=None, device=None):
    """make_tensor, skipping with the reason when the framework cannot make the tensor."""
    try:
        return make_tensor(framework, shape, dtype, strides, device)
    except Unsupported as exc:
        pytest.skip(str(exc))


def needs_host(framework, device=None):
    device = device or framework.device
    if not device.startswith("cpu"):
        pytest.skip(f"{framework.name} tensors live on {device}; the kit's element kernels read host memory")


def needs_ops(framework) -> None:
    """Skips with "not provided" unless the adapter has ops (the ``tensorplug_op_impl`` hook)."""
    import tensorplug
    from tensorplug.testing.report import NOT_PROVIDED

    record = next((r for r in tensorplug.adapters() if r.name == framework.name), None)
    if record is None or not hasattr(record.plugin, "tensorplug_op_impl"):
        pytest.skip(NOT_PROVIDED)


def needs_cuda(framework) -> str:
    devices = framework.cuda_devices()
    if not devices:
        pytest.skip("no CUDA device")
    return devices[0]


def assert_values(framework, x, expected, what="tensor"):
    import numpy as np

    got = framework.to_numpy(x)
    assert got.shape == expected.shape, f"{what}: shape {got.shape}, expected {expected.shape}"
    assert got.dtype == expected.dtype, f"{what}: dtype {got.dtype}, expected {expected.dtype}"
    np.testing.assert_array_equal(got, expected, err_msg=f"{what}: wrong values")


def plus_one(expected):
    import numpy as np

    return ~expected if expected.dtype == np.bool_ else expected + expected.dtype.type(1)


def same_strides(got, strides, shape) -> bool:
    """Strides agree where they matter: dimensions of extent > 1 of a non-empty tensor."""
    if 0 in shape:
        return True
    return all(g == s for g, s, e in zip(got, strides, shape) if e > 1)


def call_state(*devices):
    """What every call must leave as it found: the bound allocator and the current streams."""
    return (_core.bound_allocator(), *(tensorplug.get_raw_stream(d) for d in devices))
