"""What the real frameworks refuse or need configured, checked on the frameworks themselves
(no mock tables): torch and paddle refuse negative-stride results with a clear error, and
jax's 64-bit dtypes work once ``jax_enable_x64`` is set (in a child process: the flag is
process-wide and must be set before jax makes its first array)."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

import tensorplug

np = pytest.importorskip("numpy", reason="numpy not installed")

pytest_plugins = ["pytester"]


@pytest.mark.parametrize("framework", ["torch", "paddle"])
def test_negative_stride_results_are_refused_by_the_real_framework(framework, tensorplug_kernels):
    module = pytest.importorskip(framework, reason=f"{framework} not installed")
    flipped = np.arange(12, dtype=np.float32).reshape(3, 4)[::-1]
    with tensorplug.output_framework(framework), pytest.raises(ValueError) as info:
        tensorplug_kernels.identity(flipped)
    assert str(info.value) == (f"{framework} cannot import a tensor with negative strides (stride -4 of dim 0); "
                               "return a contiguous tensor or use output_framework() with another framework")
    # Positive strides of the same data convert; the refusal is about the sign only.
    with tensorplug.output_framework(framework):
        y = tensorplug_kernels.identity(flipped.T.copy().T)
    assert isinstance(y, module.Tensor) and np.asarray(y).tolist() == flipped.tolist()


def test_paddle_negative_stride_views_enter_kernels(tensorplug_kernels):
    paddle = pytest.importorskip("paddle", reason="paddle not installed")
    base = paddle.arange(12, dtype="float32")
    view = paddle.as_strided(base, [3, 4], [-4, 1], 8 * 4)  # rows 2, 1, 0
    assert tensorplug_kernels.describe(view) == "float32|3,4|-4,1|cpu:0|0"
    assert tensorplug_kernels.strided_sum(view) == 66.0


X64_CHECK = textwrap.dedent("""
    import jax
    jax.config.update("jax_enable_x64", True)
    import jax.numpy as jnp
    import numpy as np
    import tensorplug
    from tensorplug import cpp
    from tensorplug.testing import KERNELS_SOURCE

    k = tensorplug.load_module(cpp.build("tensorplug_conformance_kernels", [KERNELS_SOURCE]))
    big = jnp.array([2**40 + 1, -(2**40) - 3], dtype=jnp.int64)
    y = k.add_one(big)
    assert isinstance(y, jax.Array) and y.dtype == jnp.int64, (type(y), y.dtype)
    assert np.asarray(y).tolist() == [2**40 + 2, -(2**40) - 2]
    z = k.identity(jnp.array([1 + 2j, 1e300], dtype=jnp.complex128))
    assert z.dtype == jnp.complex128 and np.asarray(z).tolist() == [1 + 2j, 1e300 + 0j]
    assert k.describe(jnp.ones(2, jnp.float64)) == "float64|2|1|cpu:0|1"
    print("x64 ok")
""")


def test_jax_64_bit_values_round_trip_with_x64():
    pytest.importorskip("jax", reason="jax not installed")
    out = subprocess.run([sys.executable, "-c", X64_CHECK], capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stdout + out.stderr
    assert out.stdout.strip().splitlines()[-1] == "x64 ok"


def test_the_kit_certifies_jax_64_bit_dtypes_with_x64(pytester, monkeypatch):
    pytest.importorskip("jax", reason="jax not installed")
    monkeypatch.setenv("JAX_ENABLE_X64", "1")  # the child pytest's jax starts with x64 on
    result = pytester.runpytest_subprocess("--pyargs", "tensorplug.testing.conformance", "-p", "no:cacheprovider",
                                           "--tensorplug-adapter=jax", "-k", "TestDtypes", "-rs")
    result.assert_outcomes(passed=24)  # every dtype, int64, float64 and complex128 included: no skip
    result.stdout.fnmatch_lines(["jax", "  dtypes     passed   24 passed"])
