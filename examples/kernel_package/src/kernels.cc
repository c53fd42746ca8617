// mykernels: the kernel library that examples/kernel_package ships as a wheel.
//
// It uses the C++ API of tensorplug and nothing of Python: the same libmykernels.so is
// called from every CPython version and every framework version (docs/shipping.md).
#include <tensorplug/tensorplug.h>

#include <cstdint>
#include <vector>

namespace tp = tensorplug;

namespace {

void CheckHost(const tp::TensorView& x, const char* arg) {
  TENSORPLUG_CHECK(x.device().device_type == kDLCPU, ValueError)
      << "axpy: '" << arg << "' must be a CPU tensor, got a tensor on " << x.device();
}

// alpha * x + y in a new tensor from the caller's allocator (so numpy in, numpy out; torch
// in, torch out). Any strides are read, including negative and zero ones.
tp::Tensor Axpy(double alpha, tp::TensorView x, tp::TensorView y) {
  CheckHost(x, "x");
  CheckHost(y, "y");
  TENSORPLUG_CHECK(x.shape() == y.shape(), ValueError)
      << "axpy: shape mismatch: 'x' has shape " << x.shape() << ", 'y' has shape " << y.shape();
  TENSORPLUG_CHECK(x.dtype() == y.dtype(), TypeError)
      << "axpy: dtype mismatch: 'x' is " << x.dtype() << ", 'y' is " << y.dtype();
  tp::Tensor out = tp::Tensor::FromEnvAlloc(x.shape(), x.dtype(), x.device());
  TENSORPLUG_DISPATCH_FLOATING_TYPES(x, "axpy", [&] {
    const scalar_t* px = x.data_ptr<scalar_t>();
    const scalar_t* py = y.data_ptr<scalar_t>();
    scalar_t* po = out.mutable_data_ptr<scalar_t>();
    std::vector<int64_t> y_offsets;
    y_offsets.reserve(static_cast<size_t>(y.numel()));
    tp::ForEachOffset(y, [&](int64_t o) { y_offsets.push_back(o); });
    int64_t i = 0;
    tp::ForEachOffset(x, [&](int64_t o) {
      po[i] = static_cast<scalar_t>(alpha * static_cast<double>(px[o]) + static_cast<double>(py[y_offsets[i]]));
      ++i;
    });
  });
  return out;
}

// The tensorplug ABI this binary was compiled for (what the loader checked).
int64_t BuiltForABI() { return TENSORPLUG_ABI_VERSION; }

}  // namespace

TENSORPLUG_EXPORT(axpy, Axpy, "alpha", "x", "y");
TENSORPLUG_EXPORT(built_for_abi, BuiltForABI);
