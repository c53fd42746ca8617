"""Root pytest configuration: shared, session-scoped compiled kernels.

Kernels are compiled once per session into a cache directory private to the run (so the
suite also proves that a cold build works), unless TENSORPLUG_CACHE_DIR is already set; the
same for inductor's cache (TORCHINDUCTOR_CACHE_DIR).
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import pytest

ROOT = Path(__file__).parent

if "TENSORPLUG_CACHE_DIR" not in os.environ:
    os.environ["TENSORPLUG_CACHE_DIR"] = tempfile.mkdtemp(prefix="tensorplug-test-cache-")

# inductor's caches likewise: a graph cached by an earlier run (another tensorplug, whose
# ops had other overloads) must not stand in for what this tree compiles.
if "TORCHINDUCTOR_CACHE_DIR" not in os.environ:
    os.environ["TORCHINDUCTOR_CACHE_DIR"] = tempfile.mkdtemp(prefix="tensorplug-test-inductor-")

# jax puts new arrays on a GPU where it has one, and most of the suite's kernels read host
# memory: jax arrays default to the CPU here (subprocesses inherit it), and the GPU tests ask
# for jax.devices("gpu") by name (docs/gpu.md). jax reads this when it is first imported.
os.environ.setdefault("JAX_DEFAULT_DEVICE", "cpu")


@pytest.fixture(scope="session")
def kernels():
    """The example kernel library (examples/kernels/kernels.cc), compiled once."""
    import tensorplug
    from tensorplug import cpp

    return tensorplug.load_module(cpp.build("example_kernels", [ROOT / "examples" / "kernels" / "kernels.cc"]))


@pytest.fixture(scope="session")
def c_kernel():
    """The plain-C11 kernel (examples/c_kernel/add_one.c), compiled with cc -std=c11."""
    import tensorplug
    from tensorplug import cpp

    return tensorplug.load_module(cpp.build("c_add_one", [ROOT / "examples" / "c_kernel" / "add_one.c"]))
