"""The conformance kit's Framework for the torch adapter."""

from __future__ import annotations

import contextlib

import pytest

from tensorplug.testing.framework import NEGATIVE_STRIDES, Framework, Refusal, Unsupported


class TorchFramework(Framework):
    name = module = "torch"

    def unsupported_dtype(self, dtype):
        return None

    def refusals(self):
        # torch has no negative strides; the adapter refuses to hand it such a tensor
        # (torch 2.13 aborts the process importing one).
        refusal = Refusal(ValueError, r"^torch cannot import a tensor with negative strides \(stride -\d+ of dim \d\)")
        return dict.fromkeys(NEGATIVE_STRIDES, refusal)

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

    def compile(self, fn):
        import torch

        # aot_eager: dynamo's graph capture and aot_autograd's functionalization, without
        # inductor's C++ compile (tests/torch/test_op_torch.py runs inductor).
        return torch.compile(fn, backend="aot_eager", fullgraph=True)

    def gradient(self, fn, *args):
        import torch

        leaves = [a.detach().requires_grad_() for a in args]
        return tuple(torch.autograd.grad(fn(*leaves).sum(), leaves))

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


@pytest.hookimpl(optionalhook=True)  # the kit's hook: absent under -p no:tensorplug
def pytest_tensorplug_framework(name):
    return TorchFramework() if name == "torch" else None
