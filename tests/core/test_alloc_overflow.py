"""Allocation sizes that do not fit in 64 bits (issue 21, item 1).

A kernel asks ``Tensor::FromEnvAlloc`` for a shape whose element count or byte count wraps
around 64 bits (2^32 x 2^32 wraps to 0 elements). TPEnvAllocTensor refuses it with
MemoryError naming the shape before any allocator runs, whichever framework's allocator is
bound for the call (the caller's tensor picks it). Each framework runs in its own
interpreter: before the fix a wrapped shape gave a tensor claiming 2^64 elements over a
0-byte buffer, which may crash the process that converts it.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

SOURCE = r"""
namespace tp = tensorplug;

namespace {
// A tensor of `shape` and dtype (code, bits, lanes) on x's device, through the allocator
// of x's framework; returns its element count (never reached for a refused shape).
int64_t AllocLike(tp::TensorView x, std::vector<int64_t> shape, int64_t code, int64_t bits, int64_t lanes) {
  DLDataType dtype{uint8_t(code), uint8_t(bits), uint16_t(lanes)};
  return tp::Tensor::FromEnvAlloc(shape, dtype, x.device()).numel();
}
}  // namespace

TENSORPLUG_EXPORT(alloc_like, AllocLike, "x", "shape", "code", "bits", "lanes");
"""

KDL_INT, KDL_FLOAT = 0, 2

ELEMENTS = "no tensor can index them (element counts and strides are int64)"

# (shape, (code, bits, lanes), the error line)
CASES = [
    ([2**32, 2**32], (KDL_FLOAT, 32, 1),
     f"MemoryError: cannot allocate more than 2^63 - 1 elements (shape [4294967296,4294967296]) on cpu:0: {ELEMENTS}"),
    ([2**62, 4], (KDL_INT, 8, 1),
     f"MemoryError: cannot allocate more than 2^63 - 1 elements (shape [4611686018427387904,4]) on cpu:0: {ELEMENTS}"),
    ([2**33, 2**31], (KDL_FLOAT, 32, 1),
     f"MemoryError: cannot allocate more than 2^63 - 1 elements (shape [8589934592,2147483648]) on cpu:0: {ELEMENTS}"),
    # wraps to 0 after the zero-free extents: 2^64 x 3 elements
    ([2**16, 2**48, 3], (KDL_FLOAT, 16, 1),
     f"MemoryError: cannot allocate more than 2^63 - 1 elements (shape [65536,281474976710656,3]) on cpu:0: {ELEMENTS}"),
    # sub-byte dtype: 2^63 int4 elements are 2^62 bytes, but numel() cannot hold 2^63
    ([2**31, 2**32], (KDL_INT, 4, 1),
     f"MemoryError: cannot allocate more than 2^63 - 1 elements (shape [2147483648,4294967296]) on cpu:0: {ELEMENTS}"),
    # vector lanes: 2^60 float32x4 elements are 2^64 bytes
    ([2**60], (KDL_FLOAT, 32, 4),
     "MemoryError: cannot allocate more than 2^64 bytes (shape [1152921504606846976]) on cpu:0: more than 2^63 - 1 "
     "bytes, which no allocator can address"),
    # a dtype of no lanes would be 0 bytes for 6 elements
    ([2, 3], (KDL_FLOAT, 32, 0), "ValueError: cannot allocate a tensor: the dtype has 0 bits or 0 lanes"),
    # a zero extent makes an empty tensor: not refused here (frameworks refuse some huge
    # empty shapes themselves: torch [2^40, 2^40, 0], numpy [0, 2^62])
    ([0, 2**20], (KDL_FLOAT, 32, 1), "ok: 0"),
    ([2, 3], (KDL_FLOAT, 32, 1), "ok: 6"),
]

MAKE = {
    "numpy": "import numpy as np; x = np.zeros(1, dtype=np.float32)",
    "torch": "import torch; x = torch.zeros(1)",
    "jax": "import jax.numpy as jnp; x = jnp.zeros(1)",
    "paddle": "import paddle; x = paddle.zeros([1])",
}


@pytest.fixture(scope="module")
def overflow_lib():
    from tensorplug import cpp

    return cpp.load_inline("alloc_overflow", SOURCE).path


@pytest.mark.parametrize("framework", sorted(MAKE))
def test_overflowing_shapes_are_refused_before_any_allocator(overflow_lib, framework):
    pytest.importorskip(framework)
    checks = "\n".join(f"check(lambda: m.alloc_like(x, {shape!r}, {c}, {b}, {lanes}))"
                       for shape, (c, b, lanes), _ in CASES)
    code = textwrap.dedent(f"""
        import tensorplug
        m = tensorplug.load_module({str(overflow_lib)!r})
        {MAKE[framework]}
        def check(thunk):
            try:
                print("ok:", thunk())
            except Exception as e:
                print(f"{{type(e).__name__}}: {{e}}")
    """) + checks + "\n"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=180)
    assert out.returncode == 0, f"child exited with {out.returncode}\nstdout:\n{out.stdout}\nstderr:\n{out.stderr}"
    assert out.stdout.splitlines() == [expected for _, _, expected in CASES]
