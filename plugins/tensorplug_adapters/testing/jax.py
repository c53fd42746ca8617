"""The conformance kit's Framework for the jax adapter."""

from __future__ import annotations

import pytest

from tensorplug.testing.framework import Framework, Refusal, Unsupported, device_index


class JaxFramework(Framework):
    name = module = "jax"
    read_only = True
    fork_safe = False  # jax's thread pools are gone in a forked child: imports can hang there

    def unsupported_dtype(self, dtype):
        import jax

        if dtype in ("int64", "float64", "complex128") and not jax.config.jax_enable_x64:
            return f"jax has no {dtype} unless jax_enable_x64 is set"
        return None

    def refusals(self):
        import jax

        # jax imports only compact layouts (transposed ones it reorders); it refuses the rest.
        refusal = Refusal(jax.errors.JaxRuntimeError, r"Only DLPack tensors with trivial \(compact\) striding")
        return dict.fromkeys(("sliced", "negative", "reversed", "broadcast"), refusal)

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
        return jax.device_put(x, jax.devices(platform)[device_index(device)])

    def as_strided(self, base, shape, strides, offset):
        raise Unsupported("jax arrays have no strides")

    def to_numpy(self, x):
        import numpy as np

        a = np.array(x, copy=True)
        return a.astype(np.float32) if a.dtype.name == "bfloat16" else a

    def data_ptr(self, x):
        return x.unsafe_buffer_pointer()

    def compile(self, fn):
        import jax

        return jax.jit(fn)

    def gradient(self, fn, *args):
        import jax

        # The cotangents jax makes live on its default device (a GPU where there is one):
        # keep them with the arguments, where the kernels under test read them.
        (device,) = args[0].devices()
        with jax.default_device(device):
            return tuple(jax.grad(lambda *a: fn(*a).sum(), argnums=tuple(range(len(args))))(*args))


@pytest.hookimpl(optionalhook=True)  # the kit's hook: absent under -p no:tensorplug
def pytest_tensorplug_framework(name):
    return JaxFramework() if name == "jax" else None
