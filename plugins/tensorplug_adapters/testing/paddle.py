"""The conformance kit's Framework for the paddle adapter."""

from __future__ import annotations

import contextlib

import pytest

from tensorplug.testing.framework import NEGATIVE_STRIDES, Framework, Refusal, device_index


class PaddleFramework(Framework):
    name = module = "paddle"

    def import_framework(self):
        from tensorplug_adapters.paddle import import_paddle

        import_paddle()

    def unsupported_dtype(self, dtype):
        return None

    def refusals(self):
        # paddle takes negative-stride views in but misreads them on import: the adapter refuses.
        refusal = Refusal(ValueError, r"^paddle cannot import a tensor with negative strides \(stride -\d+ of dim \d\)")
        return dict.fromkeys(NEGATIVE_STRIDES, refusal)

    def cuda_devices(self):
        import paddle

        if not paddle.device.is_compiled_with_cuda():
            return []
        return [f"cuda:{i}" for i in range(paddle.device.cuda.device_count())]

    def from_numpy(self, array, device=None, dtype=None):
        import paddle

        device = device or self.device
        place = paddle.CPUPlace() if device.startswith("cpu") else paddle.CUDAPlace(device_index(device))
        t = paddle.to_tensor(array.copy(), place=place)
        return t.astype("bfloat16") if dtype == "bfloat16" else t

    def as_strided(self, base, shape, strides, offset):
        import paddle

        return paddle.as_strided(base, list(shape), list(strides), offset * base.element_size())

    def to_numpy(self, x):
        import numpy as np
        import paddle

        if x.dtype == paddle.bfloat16:
            x = x.astype("float32")
        return np.array(x.cpu().numpy(), copy=True)

    def data_ptr(self, x):
        return x.data_ptr()

    def current_stream(self, device):
        import paddle

        if not device.startswith("cuda"):
            return None
        return paddle.device.current_stream(f"gpu:{device_index(device)}").stream_base.cuda_stream or None

    def stream(self, device):
        import paddle

        @contextlib.contextmanager
        def using():
            s = paddle.device.Stream(device=f"gpu:{device_index(device)}")
            with paddle.device.stream_guard(s):
                yield s, s.stream_base.cuda_stream

        return using() if device.startswith("cuda") else None


@pytest.hookimpl(optionalhook=True)  # the kit's hook: absent under -p no:tensorplug
def pytest_tensorplug_framework(name):
    return PaddleFramework() if name == "paddle" else None
