"""The test kernels of tests/support/op_kernels.cc, declared once per process as ops in the
namespace ``tptest`` (op names are process-wide), for tests/*/test_op*.py (through the ``ops``
fixture of tests/conftest.py) and subprocesses (``import op_kernels; op_kernels.ops()``):

- ``axpy(x, y, out, alpha)``: destination passing, writes ``out``;
- ``scale(x, alpha, bias)``: allocating, ``like("x")``; ``bias`` an optional tensor;
- ``row_sum(x)``: allocating, ``Output(shape=("x.shape[0]",), dtype="x")``;
- ``pad(x, before, after, value)``: allocating, a shape function;
- ``arange(n, dtype, device)``: allocating, no tensor argument, dtype and device arguments;
- ``plus_and_twice(x)``: two results, ``(like("x"), like("x"))``.
"""

from __future__ import annotations

import functools
from pathlib import Path
from types import SimpleNamespace

import tensorplug
from tensorplug import Output, TensorSpec, cpp, like

SOURCE = Path(__file__).with_name("op_kernels.cc")


def _pad_shape(x, before, after, value):
    return TensorSpec((before + x.shape[0] + after,), x.dtype)


@functools.cache
def ops() -> SimpleNamespace:
    """The library (``.module``) and its ops, by kernel name."""
    mod = tensorplug.load_module(cpp.build("op_kernels", [SOURCE]))
    return SimpleNamespace(
        module=mod,
        axpy=tensorplug.op("tptest::axpy", mod.axpy),
        scale=tensorplug.op("tptest::scale", mod.scale, returns=like("x")),
        row_sum=tensorplug.op("tptest::row_sum", mod.row_sum, returns=Output(shape=("x.shape[0]",), dtype="x")),
        pad=tensorplug.op("tptest::pad", mod.pad, returns=_pad_shape),
        arange=tensorplug.op("tptest::arange", mod.arange,
                             returns=Output(shape=("n",), dtype="dtype", device="device")),
        plus_and_twice=tensorplug.op("tptest::plus_and_twice", mod.plus_and_twice, returns=(like("x"), like("x"))),
    )


# A CUDA kernel without nvcc: cuMemsetD32Async from the driver (libcuda.so.1, loaded at
# run time) on the stream the kernel is handed, so CUDA graph capture records it.
GPU_SOURCE = r"""
#include <tensorplug/tensorplug.h>

#include <dlfcn.h>

#include <atomic>
#include <cstdint>
#include <cstring>

namespace tp = tensorplug;

namespace {

std::atomic<int64_t> g_last_stream{0};
using MemsetD32Async = int (*)(uint64_t dst, unsigned int value, size_t count, void* stream);

MemsetD32Async Memset() {
  static const MemsetD32Async fn = [] {
    void* lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_GLOBAL);
    return lib != nullptr ? reinterpret_cast<MemsetD32Async>(dlsym(lib, "cuMemsetD32Async")) : nullptr;
  }();
  return fn;
}

// out[...] = value on the current stream of out's device (recorded for last_stream()).
void Fill(tp::MutableView out, double value) {
  TENSORPLUG_CHECK(out.device().device_type == kDLCUDA && out.dtype() == tp::kFloat32 && out.is_contiguous(),
                   ValueError) << "fill: expected a contiguous float32 CUDA tensor";
  const MemsetD32Async memset = Memset();
  TENSORPLUG_CHECK(memset != nullptr, RuntimeError) << "fill: cannot load cuMemsetD32Async from libcuda.so.1";
  void* stream = tp::GetCurrentStream(out.device());
  g_last_stream = static_cast<int64_t>(reinterpret_cast<intptr_t>(stream));
  const float v = static_cast<float>(value);
  uint32_t bits;
  std::memcpy(&bits, &v, sizeof bits);
  const int rc = memset(static_cast<uint64_t>(reinterpret_cast<uintptr_t>(out.mutable_data_ptr())), bits,
                        static_cast<size_t>(out.numel()), stream);
  TENSORPLUG_CHECK(rc == 0, RuntimeError) << "fill: cuMemsetD32Async failed with CUresult " << rc;
}

int64_t LastStream() { return g_last_stream; }

}  // namespace

TENSORPLUG_EXPORT(fill, Fill, "out", "value");
TENSORPLUG_EXPORT(last_stream, LastStream);
"""


@functools.cache
def gpu_ops() -> SimpleNamespace:
    """``fill(out, value)`` (destination passing, on the current stream) as the op
    ``tptest_gpu::fill``; ``module.last_stream()`` the stream its last call saw."""
    mod = cpp.load_inline("op_kernels_gpu", GPU_SOURCE, extra_ldflags=["-ldl"])
    return SimpleNamespace(module=mod, fill=tensorplug.op("tptest_gpu::fill", mod.fill))
