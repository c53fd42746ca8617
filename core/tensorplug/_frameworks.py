"""Making and reading tensors of each framework by adapter name (demo and test kit).

Each helper imports its framework only when asked for that framework by name.
"""

from __future__ import annotations

import importlib.util
import sys

FRAMEWORK_MODULES = {"numpy": "numpy", "torch": "torch", "jax": "jax", "paddle": "paddle", "cupy": "cupy"}


def is_installed(framework: str) -> bool:
    module = FRAMEWORK_MODULES.get(framework, framework)
    return module in sys.modules or importlib.util.find_spec(module) is not None


def type_name(obj) -> str:
    t = type(obj)
    return f"{t.__module__}.{t.__qualname__}"


def make(framework: str, array, device: str = "cpu"):
    """A ``framework`` tensor holding a copy of the numpy ``array`` on ``device``."""
    import numpy as np

    array = np.ascontiguousarray(array)
    if framework == "numpy":
        return array.copy()
    if framework == "torch":
        import torch

        return torch.from_numpy(array.copy()).to(device)
    if framework == "jax":
        import jax
        import jax.numpy as jnp

        platform = "gpu" if device.startswith("cuda") else "cpu"
        index = int(device.partition(":")[2] or 0)
        return jax.device_put(jnp.asarray(array), jax.devices(platform)[index])
    if framework == "paddle":
        import paddle

        place = "cpu" if device == "cpu" else device.replace("cuda", "gpu")
        return paddle.to_tensor(array.copy(), place=place)
    if framework == "cupy":
        import cupy

        with cupy.cuda.Device(int(device.partition(":")[2] or 0)):
            return cupy.asarray(array)
    if framework == "tensorplug":
        from . import from_dlpack

        return from_dlpack(array.copy())
    raise ValueError(f"make(): unknown framework {framework!r}")


def to_numpy(x):
    """A numpy copy of any framework tensor (through DLPack after a device move)."""
    import numpy as np

    module = type(x).__module__.split(".")[0]
    if module == "torch":
        return x.detach().cpu().resolve_conj().numpy().copy()
    if module == "cupy":
        return x.get()
    if module in ("jax", "jaxlib"):
        return np.asarray(x).copy()
    if module == "paddle":
        return x.cpu().numpy().copy()
    if module == "numpy":
        return np.array(x, copy=True)
    return np.from_dlpack(x).copy()
