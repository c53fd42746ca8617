// Call-overhead kernels for tensorplug: empty bodies, so a call measures only the binding.
// The same kernels for apache-tvm-ffi are in kernels_tvm_ffi.cc; keep the two in step.
// Compiled by benchmarks/bench_overhead.py with tensorplug.cpp.load_inline(functions=[...]).
namespace tp = tensorplug;

void noop() {}

void one_tensor(tp::TensorView a) {}

void three_tensors(tp::TensorView a, tp::TensorView b, tp::TensorView c) {}

void three_tensors_two_scalars(tp::TensorView a, tp::TensorView b, tp::TensorView c, int64_t n,
                               double alpha) {}

// A new tensor like `x`, allocated by the caller's framework (the env allocator).
tp::Tensor alloc_like(tp::TensorView x) {
  return tp::Tensor::FromEnvAlloc(x.shape(), x.dtype(), x.device());
}

void eight_tensors(tp::TensorView a, tp::TensorView b, tp::TensorView c, tp::TensorView d,
                   tp::TensorView e, tp::TensorView f, tp::TensorView g, tp::TensorView h) {}

// The same eight tensors as one list argument (kind "views": a view per item, no allocation).
void eight_tensor_list(tp::TensorViewList xs) {}
