// The plan/run round trip of attention-style libraries: plan() computes a work split on the
// host and returns it as Array<int64_t>; run() takes it back and does the work. Here the
// work is a chunked inclusive prefix sum of a 1-D float32 tensor (each chunk restarts at 0).
#include <tvm/ffi/container/array.h>
#include <tvm/ffi/container/tensor.h>
#include <tvm/ffi/error.h>
#include <tvm/ffi/function.h>

#include <algorithm>

namespace ffi = tvm::ffi;

// Plan layout: [n, num_chunks, start_0, end_0, start_1, end_1, ...].
ffi::Array<int64_t> Plan(int64_t n, int64_t chunk_size) {
  TVM_FFI_CHECK_GT(chunk_size, 0, ValueError) << "plan: chunk_size must be positive";
  TVM_FFI_CHECK_GE(n, 0, ValueError) << "plan: n must not be negative";
  ffi::Array<int64_t> plan;
  const int64_t chunks = (n + chunk_size - 1) / chunk_size;
  plan.push_back(n);
  plan.push_back(chunks);
  for (int64_t c = 0; c < chunks; ++c) {
    plan.push_back(c * chunk_size);
    plan.push_back(std::min(n, (c + 1) * chunk_size));
  }
  return plan;
}

void Run(ffi::TensorView x, ffi::TensorView out, ffi::Array<int64_t> plan) {
  TVM_FFI_CHECK_GE(plan.size(), 2, ValueError) << "run: plan is too short";
  TVM_FFI_CHECK_EQ(plan.size(), 2 + 2 * static_cast<size_t>(plan[1]), ValueError) << "run: plan is malformed";
  TVM_FFI_CHECK_EQ(x.size(0), plan[0], ValueError) << "run: x does not match the plan";
  TVM_FFI_CHECK_EQ(out.size(0), plan[0], ValueError) << "run: out does not match the plan";
  const float* src = static_cast<const float*>(x.data_ptr());
  float* dst = static_cast<float*>(out.data_ptr());
  for (int64_t c = 0; c < plan[1]; ++c) {
    float acc = 0;
    for (int64_t i = plan[2 + 2 * c]; i < plan[3 + 2 * c]; ++i) {
      acc += src[i * x.stride(0)];
      dst[i * out.stride(0)] = acc;
    }
  }
}

TVM_FFI_DLL_EXPORT_TYPED_FUNC(plan, Plan);
TVM_FFI_DLL_EXPORT_TYPED_FUNC(run, Run);
