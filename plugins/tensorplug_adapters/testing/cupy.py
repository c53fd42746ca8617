"""The conformance kit's Framework for the cupy adapter."""

from __future__ import annotations

import contextlib

import pytest

from tensorplug.testing.framework import NEGATIVE_STRIDES, Framework, Refusal, Unsupported, device_index


class CupyFramework(Framework):
    name = module = "cupy"
    device = "cuda:0"

    def missing(self):
        return super().missing() or (None if self.cuda_devices() else "no CUDA device")

    def unsupported_dtype(self, dtype):
        return "cupy has no bfloat16" if dtype == "bfloat16" else None

    def refusals(self):
        # The adapter refuses negative strides both ways (cupy's DLPack export garbles them).
        refusal = Refusal(ValueError,
                          r"cupy cannot (import|export) a tensor with negative strides \(stride -\d+ of dim \d\)")
        return dict.fromkeys(NEGATIVE_STRIDES, refusal)

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
        with cupy.cuda.Device(device_index(device)):
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

        with cupy.cuda.Device(device_index(device)):
            return cupy.cuda.get_current_stream().ptr or None

    def stream(self, device):
        import cupy

        @contextlib.contextmanager
        def using():
            with cupy.cuda.Device(device_index(device)):
                s = cupy.cuda.Stream(non_blocking=True)
                with s:
                    yield s, s.ptr

        return using()


@pytest.hookimpl(optionalhook=True)  # the kit's hook: absent under -p no:tensorplug
def pytest_tensorplug_framework(name):
    return CupyFramework() if name == "cupy" else None
