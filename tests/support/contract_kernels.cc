// Kernels for the contract tests of issue 40 (tests/ops/test_rule_engines_agree.py,
// tests/ops/test_grad_checks_contract.py): each allocates zero-filled results of a shape and
// dtype its arguments give, so a test controls exactly what a kernel returns. Host memory.
#include <tensorplug/tensorplug.h>

#include <cstring>
#include <tuple>
#include <vector>

namespace tp = tensorplug;

namespace {

tp::Tensor Zeros(const std::vector<int64_t>& shape, DLDataType dtype, DLDevice device) {
  TENSORPLUG_CHECK(device.device_type == kDLCPU, ValueError) << "contract kernels: CPU only";
  tp::Tensor out = tp::Tensor::FromEnvAlloc(shape, dtype, device);
  if (out.numel() > 0) std::memset(out.mutable_data_ptr(), 0, static_cast<size_t>(out.numel() * out.element_size()));
  return out;
}

// A 1-D tensor of n elements of x's dtype: its shape rule is an expression over x's
// dimensions, a and b that the test evaluates to n (the kernel never reads a or b).
tp::Tensor Sized(tp::TensorView x, int64_t a, int64_t b, int64_t n) {
  (void)a;
  (void)b;
  return Zeros({n}, x.dtype(), x.device());
}

// A forward of three tensors: zeros like a (the values do not matter to the gradient checks).
tp::Tensor Forward3(tp::TensorView a, tp::TensorView b, tp::TensorView c, std::vector<int64_t> s0, DLDataType d0,
                    std::vector<int64_t> s1, DLDataType d1) {
  (void)b, (void)c, (void)s0, (void)d0, (void)s1, (void)d1;
  return Zeros(std::vector<int64_t>(a.shape().begin(), a.shape().end()), a.dtype(), a.device());
}

// Backwards returning gradients of exactly the shapes and dtypes they are given.
tp::Tensor Grad1(tp::TensorView g, std::vector<int64_t> s0, DLDataType d0) { return Zeros(s0, d0, g.device()); }

std::tuple<tp::Tensor, tp::Tensor> Grad2(tp::TensorView g, std::vector<int64_t> s0, DLDataType d0,
                                         std::vector<int64_t> s1, DLDataType d1) {
  return {Zeros(s0, d0, g.device()), Zeros(s1, d1, g.device())};
}

}  // namespace

TENSORPLUG_EXPORT(sized, Sized, "x", "a", "b", "n");
TENSORPLUG_EXPORT(forward3, Forward3, "a", "b", "c", "s0", "d0", "s1", "d1");
TENSORPLUG_EXPORT(grad1, Grad1, "g", "s0", "d0");
TENSORPLUG_EXPORT(grad2, Grad2, "g", "s0", "d0", "s1", "d1");
