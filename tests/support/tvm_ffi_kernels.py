"""A kernel library built for apache tvm-ffi by its own ``tvm_ffi.cpp.build_inline``, for the
tests of its functions as tensorplug ops (tests/tvm_ffi/test_tvm_ffi_ops.py and its jax worker,
tests/support/tvm_ffi_sharding_worker.py): a forward and its backward, both tvm-ffi functions, with
tvm-ffi's metadata.
"""

from __future__ import annotations

SOURCE = r"""
#include <tvm/ffi/container/tensor.h>
#include <tvm/ffi/error.h>
#include <tvm/ffi/extra/c_env_api.h>
#include <tvm/ffi/function.h>

namespace ffi = tvm::ffi;

static ffi::Tensor Like(ffi::TensorView x) {
  return ffi::Tensor::FromEnvAlloc(TVMFFIEnvTensorAlloc, x.shape(), x.dtype(), x.device());
}

// x * x, a new tensor (float32, contiguous).
ffi::Tensor Square(ffi::TensorView x) {
  TVM_FFI_CHECK(x.IsContiguous(), ValueError) << "square: x must be contiguous";
  TVM_FFI_CHECK(x.dtype() == DLDataType({kDLFloat, 32, 1}), TypeError) << "square: float32 only";
  ffi::Tensor y = Like(x);
  const float* a = static_cast<const float*>(x.data_ptr());
  float* b = static_cast<float*>(y.data_ptr());
  for (int64_t i = 0; i < x.numel(); ++i) b[i] = a[i] * a[i];
  return y;
}

// The backward of Square: 2 * x * grad.
ffi::Tensor SquareBackward(ffi::TensorView x, ffi::TensorView grad) {
  TVM_FFI_CHECK(x.numel() == grad.numel(), ValueError) << "square_backward: x and grad differ in size";
  ffi::Tensor dx = Like(x);
  const float* a = static_cast<const float*>(x.data_ptr());
  const float* g = static_cast<const float*>(grad.data_ptr());
  float* d = static_cast<float*>(dx.data_ptr());
  for (int64_t i = 0; i < x.numel(); ++i) d[i] = 2 * a[i] * g[i];
  return dx;
}

// out = alpha * x (destination passing: out is written).
void ScaleInto(ffi::TensorView x, ffi::TensorView out, double alpha) {
  TVM_FFI_CHECK(x.numel() == out.numel(), ValueError) << "scale_into: x and out differ in size";
  const float* a = static_cast<const float*>(x.data_ptr());
  float* o = static_cast<float*>(out.data_ptr());
  for (int64_t i = 0; i < x.numel(); ++i) o[i] = static_cast<float>(alpha) * a[i];
}

TVM_FFI_DLL_EXPORT_TYPED_FUNC(square, Square);
TVM_FFI_DLL_EXPORT_TYPED_FUNC(square_backward, SquareBackward);
TVM_FFI_DLL_EXPORT_TYPED_FUNC(scale_into, ScaleInto);
"""


def build(directory=None) -> str:
    """The library's path (tvm-ffi's build cache: the same sources build once)."""
    import tvm_ffi.cpp

    return tvm_ffi.cpp.build_inline("tp_tvm_ffi_op_kernels", cpp_sources=SOURCE,
                                    extra_cflags=["-O1", "-DTVM_FFI_DLL_EXPORT_INCLUDE_METADATA=1"],
                                    build_directory=None if directory is None else str(directory))


def declare(path: str, namespace: str = "tvmffi") -> dict:
    """The ops of the library at ``path``: square (with its tvm-ffi backward, elementwise
    sharding) and scale_into (writes its second argument)."""
    import tensorplug

    mod = tensorplug.load_module(path, writes={"scale_into": ["arg1"]})
    # tvm-ffi records no parameter names: its metadata's are arg0, arg1, ...; the backward
    # receives the saved input as arg0 and the incoming gradient as arg1, both read as compact
    # arrays by the kernel (torch: the gradient of a sum is an expanded tensor). The backward
    # is an op of its own, so that it has a sharding rule too (jax splits it as the forward).
    backward_op = tensorplug.op(f"{namespace}::square_backward", mod.square_backward, returns=tensorplug.like("arg0"),
                                sharding="elementwise", contiguous=("arg0", "arg1"))
    backward = tensorplug.backward(backward_op, saves=("arg0",), grads=("arg1",), differentiable=("arg0",))
    return {"mod": mod,
            "square": tensorplug.op(f"{namespace}::square", mod.square, returns=tensorplug.like("arg0"),
                                    backward=backward, sharding="elementwise"),
            "scale_into": tensorplug.op(f"{namespace}::scale_into", mod.scale_into)}
