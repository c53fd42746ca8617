// Call-overhead kernels for apache-tvm-ffi: the same kernels as kernels_tensorplug.cc.
// Compiled by benchmarks/bench_overhead.py with tvm_ffi.cpp.load_inline(functions=[...]).
#include <tvm/ffi/container/array.h>
#include <tvm/ffi/container/tensor.h>
#include <tvm/ffi/extra/c_env_api.h>

namespace ffi = tvm::ffi;

void noop() {}

void one_tensor(ffi::TensorView a) {}

void three_tensors(ffi::TensorView a, ffi::TensorView b, ffi::TensorView c) {}

void three_tensors_two_scalars(ffi::TensorView a, ffi::TensorView b, ffi::TensorView c, int64_t n,
                               double alpha) {}

// A new tensor like `x`, allocated by the caller's framework (the env allocator).
ffi::Tensor alloc_like(ffi::TensorView x) {
  return ffi::Tensor::FromEnvAlloc(TVMFFIEnvTensorAlloc, x.shape(), x.dtype(), x.device());
}

void eight_tensors(ffi::TensorView a, ffi::TensorView b, ffi::TensorView c, ffi::TensorView d,
                   ffi::TensorView e, ffi::TensorView f, ffi::TensorView g, ffi::TensorView h) {}

// The same eight tensors as one list argument: tvm-ffi converts the Python list into an
// ffi::Array of its Tensor objects (Array holds objects; TensorView is not one).
void eight_tensor_list(ffi::Array<ffi::Tensor> xs) {}
