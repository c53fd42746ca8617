"""The conformance kit's Framework for the numpy adapter."""

from __future__ import annotations

import contextlib

import pytest

from tensorplug.testing.framework import Framework, is_installed, numpy_view


class NumpyFramework(Framework):
    name = module = "numpy"

    def unsupported_dtype(self, dtype):
        if dtype == "bfloat16" and not is_installed("ml_dtypes"):
            return "numpy has no bfloat16 without ml_dtypes"
        return None

    def from_numpy(self, array, device=None, dtype=None):
        self.require_cpu(device)
        if dtype == "bfloat16":
            import ml_dtypes

            return array.astype(ml_dtypes.bfloat16)
        return array.copy()

    def as_strided(self, base, shape, strides, offset):
        return numpy_view(base, shape, strides, offset)

    def to_numpy(self, x):
        import numpy as np

        return x.astype(np.float32) if x.dtype.name == "bfloat16" else np.array(x, copy=True)

    def read_only_tensor(self, array):
        x = array.copy()
        x.flags.writeable = False
        return x

    def allocation_counter(self, device):
        return _tracemalloc_counter() if device in ("cpu", "cpu:0") else None


@contextlib.contextmanager
def _tracemalloc_counter():
    """numpy reports its data allocations to tracemalloc."""
    import tracemalloc

    tracing = tracemalloc.is_tracing()
    if not tracing:
        tracemalloc.start()
    start = tracemalloc.get_traced_memory()[0]
    try:
        yield lambda: tracemalloc.get_traced_memory()[0] - start
    finally:
        if not tracing:
            tracemalloc.stop()


@pytest.hookimpl(optionalhook=True)  # the kit's hook: absent under -p no:tensorplug
def pytest_tensorplug_framework(name):
    return NumpyFramework() if name == "numpy" else None
