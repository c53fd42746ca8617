"""Shared by the fused_kernels tests: the package (built for this CPU by
examples/fused_kernels/develop.py, cached in the session's TENSORPLUG_CACHE_DIR), and each
framework's conversions from and to numpy float32 arrays."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "fused_kernels"


def fused_kernels():
    if str(EXAMPLE) not in sys.path:
        sys.path.insert(0, str(EXAMPLE))
    import develop

    return develop.import_fused_kernels()


class Framework:
    """Conversions of one framework: ``array(a, dtype)`` from numpy, ``numpy(t)`` to float32 numpy."""

    def __init__(self, name: str):
        self.name = name
        if importlib.util.find_spec(name) is None:
            pytest.skip(f"{name} not installed")
        self.mod = __import__(name)
        if name == "jax":
            import jax.numpy as jnp

            self.jnp = jnp

    def array(self, a: np.ndarray, dtype: str = "float32"):
        if self.name == "numpy":
            assert dtype == "float32" or a.dtype != np.float32
            return np.array(a) if a.dtype != np.float32 else a.astype(np.float32)
        if self.name == "torch":
            t = self.mod.from_numpy(np.ascontiguousarray(a))
            return t.to(getattr(self.mod, dtype)) if a.dtype == np.float32 else t
        if self.name == "jax":
            t = self.jnp.asarray(a)
            return t.astype(dtype) if a.dtype == np.float32 else t
        t = self.mod.to_tensor(np.ascontiguousarray(a))
        return t.astype(dtype) if a.dtype == np.float32 else t

    def numpy(self, t) -> np.ndarray:
        if self.name == "numpy":
            return np.asarray(t)
        if self.name == "torch":
            t = t.detach()
            return (t.float() if t.is_floating_point() else t).numpy()
        if self.name == "jax":
            return np.asarray(t.astype("float32") if self.jnp.issubdtype(t.dtype, self.jnp.floating) else t)
        return (t.astype("float32") if t.dtype in (self.mod.bfloat16, self.mod.float16) else t).numpy()
