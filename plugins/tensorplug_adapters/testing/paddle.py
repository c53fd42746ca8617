"""The conformance kit's Framework for the paddle adapter."""

from __future__ import annotations

import contextlib
import re

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

    def compile(self, fn):
        import paddle

        # to_static's default (SOT), where each op is a node of the static program; the AST
        # transform (full_graph=True) needs a function's source, which the kit's lambdas lack
        # (tests/paddle/test_op_paddle.py runs both).
        return paddle.jit.to_static(fn)

    def gradient(self, fn, *args):
        import paddle

        inputs = []
        for arg in args:
            leaf = arg.detach()
            leaf.stop_gradient = False
            inputs.append(leaf)
        try:
            return tuple(paddle.grad([fn(*inputs).sum()], inputs))
        except (RuntimeError, ValueError, TypeError) as error:
            text = paddle_error_text(str(error))
            if text == str(error):
                raise
            raise type(error)(text) from error

    def stream(self, device):
        import paddle

        @contextlib.contextmanager
        def using():
            s = paddle.device.Stream(device=f"gpu:{device_index(device)}")
            with paddle.device.stream_guard(s):
                yield s, s.stream_base.cuda_stream

        return using() if device.startswith("cuda") else None


# paddle raises an error of its C++ layer (an operator's kernel, its autodiff) as
# "(Kind) <text> (at <file>:<line>)", inside a program "In user code: ... KindError: <text>
# (at ...)": the text is the error tensorplug raised.
_PADDLE_ERROR = re.compile(r"(?:\((?:[A-Za-z]+)\) |[A-Za-z]+Error: )(?P<text>.*?) \(at [^()]*:\d+\)", re.S)


def paddle_error_text(message: str) -> str:
    """The text of the error tensorplug raised, from paddle's wrapping of it (``message``
    unchanged where paddle did not wrap it)."""
    found = _PADDLE_ERROR.search(message)
    return found.group("text") if found else message


@pytest.hookimpl(optionalhook=True)  # the kit's hook: absent under -p no:tensorplug
def pytest_tensorplug_framework(name):
    return PaddleFramework() if name == "paddle" else None
