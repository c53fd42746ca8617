// Example kernel library: the functions behind `tensorplug demo` and the test suite.
//
// The kernels run on host memory (CPU tensors, plus CUDA pinned/managed memory). Each
// checks its input and throws a tensorplug::Error whose kind becomes the Python exception.
#include <tensorplug/tensorplug.h>

#include <cstdint>
#include <cstdlib>
#include <new>
#include <sstream>
#include <string>
#include <tuple>
#include <vector>

namespace tp = tensorplug;

namespace {

// Host-accessible memory only; a GPU tensor would crash the process if dereferenced here.
void CheckHost(tp::TensorView x, const char* fn, const char* arg) {
  const DLDeviceType type = x.device().device_type;
  TENSORPLUG_CHECK(type == kDLCPU || type == kDLCUDAHost || type == kDLCUDAManaged ||
                       type == kDLROCMHost,
                   ValueError)
      << fn << ": '" << arg << "' must be in host memory, got a tensor on " << x.device();
}

void CheckContiguous(tp::TensorView x, const char* fn, const char* arg) {
  TENSORPLUG_CHECK(x.is_contiguous(), ValueError)
      << fn << ": '" << arg << "' must be contiguous (strides " << x.strides() << " for shape "
      << x.shape() << ")";
}

// `out` must match `x` in shape and dtype.
void CheckSameLayout(tp::TensorView x, tp::TensorView out, const char* fn, const char* x_name,
                     const char* out_name) {
  TENSORPLUG_CHECK(x.shape() == out.shape(), ValueError)
      << fn << ": shape mismatch: '" << x_name << "' has shape " << x.shape() << ", '" << out_name
      << "' has shape " << out.shape();
  TENSORPLUG_CHECK(x.dtype() == out.dtype(), TypeError)
      << fn << ": dtype mismatch: '" << x_name << "' is " << x.dtype() << ", '" << out_name
      << "' is " << out.dtype();
}

// out = x + 1
void AddOne(tp::TensorView x, tp::MutableView out) {
  CheckHost(x, "add_one", "x");
  CheckHost(out, "add_one", "out");
  CheckSameLayout(x, out, "add_one", "x", "out");
  CheckContiguous(x, "add_one", "x");
  CheckContiguous(out, "add_one", "out");
  TENSORPLUG_DISPATCH_NUMERIC_TYPES(x, "add_one", [&] {
    const scalar_t* in = x.data_ptr<scalar_t>();
    scalar_t* result = out.mutable_data_ptr<scalar_t>();
    for (int64_t i = 0, n = x.numel(); i < n; ++i) result[i] = static_cast<scalar_t>(in[i] + 1);
  });
}

// y = alpha * x
void Scale(tp::TensorView x, tp::MutableView y, double alpha) {
  CheckHost(x, "scale", "x");
  CheckHost(y, "scale", "y");
  CheckSameLayout(x, y, "scale", "x", "y");
  CheckContiguous(x, "scale", "x");
  CheckContiguous(y, "scale", "y");
  TENSORPLUG_DISPATCH_FLOATING_TYPES_AND_HALF(x, "scale", [&] {
    const scalar_t* in = x.data_ptr<scalar_t>();
    scalar_t* result = y.mutable_data_ptr<scalar_t>();
    for (int64_t i = 0, n = x.numel(); i < n; ++i) {
      result[i] = static_cast<scalar_t>(alpha * static_cast<double>(in[i]));
    }
  });
}

// a + b in a new tensor from the caller's allocator (the caller's framework and device).
tp::Tensor Add(tp::TensorView a, tp::TensorView b) {
  CheckHost(a, "add", "a");
  CheckHost(b, "add", "b");
  CheckSameLayout(a, b, "add", "a", "b");
  CheckContiguous(a, "add", "a");
  CheckContiguous(b, "add", "b");
  tp::Tensor out = tp::Tensor::FromEnvAlloc(a.shape(), a.dtype(), a.device());
  TENSORPLUG_DISPATCH_NUMERIC_TYPES(a, "add", [&] {
    const scalar_t* x = a.data_ptr<scalar_t>();
    const scalar_t* y = b.data_ptr<scalar_t>();
    scalar_t* result = out.mutable_data_ptr<scalar_t>();
    for (int64_t i = 0, n = a.numel(); i < n; ++i) result[i] = static_cast<scalar_t>(x[i] + y[i]);
  });
  return out;
}

// x[...] = value, in place; any strides.
void Fill(tp::MutableView x, double value) {
  CheckHost(x, "fill", "x");
  TENSORPLUG_DISPATCH_ALL_TYPES_AND_HALF(x, "fill", [&] {
    scalar_t* data = x.mutable_data_ptr<scalar_t>();
    const scalar_t v = static_cast<scalar_t>(value);
    tp::ForEachOffset(x, [&](int64_t offset) { data[offset] = v; });
  });
}

double Sum(tp::TensorView x) {
  CheckHost(x, "sum", "x");
  CheckContiguous(x, "sum", "x");
  return TENSORPLUG_DISPATCH_ALL_TYPES_AND_HALF(x, "sum", [&] {
    const scalar_t* data = x.data_ptr<scalar_t>();
    double total = 0;
    for (int64_t i = 0, n = x.numel(); i < n; ++i) total += static_cast<double>(data[i]);
    return total;
  });
}

// Like sum, for any strides (transposed, sliced, negative-stride views).
double StridedSum(tp::TensorView x) {
  CheckHost(x, "strided_sum", "x");
  return TENSORPLUG_DISPATCH_ALL_TYPES_AND_HALF(x, "strided_sum", [&] {
    const scalar_t* data = x.data_ptr<scalar_t>();
    double total = 0;
    tp::ForEachOffset(x, [&](int64_t offset) { total += static_cast<double>(data[offset]); });
    return total;
  });
}

// Returns its argument: an owning tensor goes back to the caller unchanged.
tp::Tensor Identity(tp::Tensor x) { return x; }

int64_t Numel(tp::TensorView x) { return x.numel(); }

// "float32[2,3] cpu:0"
std::string Describe(tp::TensorView x) {
  std::ostringstream os;
  os << x.dtype() << '[';
  for (size_t i = 0; i < x.shape().size(); ++i) os << (i == 0 ? "" : ",") << x.shape()[i];
  os << "] " << x.device();
  return os.str();
}

// The calling thread's current stream of `device`, as an integer (0: default stream).
int64_t StreamOf(DLDevice device) {
  return static_cast<int64_t>(reinterpret_cast<intptr_t>(tp::GetCurrentStream(device)));
}

void Noop() {}

void Fails(const std::string& message) { TENSORPLUG_THROW(ValueError) << message; }

// (x + 0, x * 2), both allocated by the caller's allocator.
std::tuple<tp::Tensor, tp::Tensor> Split(tp::TensorView x) {
  CheckHost(x, "split", "x");
  CheckContiguous(x, "split", "x");
  TENSORPLUG_CHECK(x.dtype() == tp::kFloat32, TypeError)
      << "split: expected a float32 tensor, got " << x.dtype();
  tp::Tensor copy = tp::Tensor::FromEnvAlloc(x.shape(), x.dtype(), x.device());
  tp::Tensor twice = tp::Tensor::FromEnvAlloc(x.shape(), x.dtype(), x.device());
  const float* in = x.data_ptr<float>();
  float* a = copy.mutable_data_ptr<float>();
  float* b = twice.mutable_data_ptr<float>();
  for (int64_t i = 0, n = x.numel(); i < n; ++i) {
    a[i] = in[i];
    b[i] = in[i] * 2;
  }
  return {copy, twice};
}

// f(x), for a Python or C++ callable returning an int.
int64_t Apply(tp::Function f, int64_t x) { return f(x).cast<int64_t>(); }

// A tensor whose memory comes from a FromNDAlloc allocator object (malloc/free).
struct MallocAllocator {
  void AllocData(DLTensor* tensor) {
    int64_t bytes = tp::DataTypeBytes(tensor->dtype);
    for (int32_t i = 0; i < tensor->ndim; ++i) bytes *= tensor->shape[i];
    tensor->data = std::malloc(bytes > 0 ? static_cast<size_t>(bytes) : 1);
    if (tensor->data == nullptr) throw std::bad_alloc();
  }
  void FreeData(DLTensor* tensor) { std::free(tensor->data); }
};

// float32 [0, 1, ..., n-1] on the CPU.
tp::Tensor NDAlloc(int64_t n) {
  TENSORPLUG_CHECK(n >= 0, ValueError) << "nd_alloc: n must be >= 0, got " << n;
  tp::Tensor out = tp::Tensor::FromNDAlloc(MallocAllocator(), {n}, tp::kFloat32, tp::kCPU);
  float* data = out.mutable_data_ptr<float>();
  for (int64_t i = 0; i < n; ++i) data[i] = static_cast<float>(i);
  return out;
}

}  // namespace

TENSORPLUG_EXPORT(add_one, AddOne, "x", "out");
TENSORPLUG_EXPORT(scale, Scale, "x", "y", "alpha");
TENSORPLUG_EXPORT(add, Add, "a", "b");
TENSORPLUG_EXPORT(fill, Fill, "x", "value");
TENSORPLUG_EXPORT(sum, Sum, "x");
TENSORPLUG_EXPORT(strided_sum, StridedSum, "x");
TENSORPLUG_EXPORT(identity, Identity, "x");
TENSORPLUG_EXPORT(numel, Numel, "x");
TENSORPLUG_EXPORT(describe, Describe, "x");
TENSORPLUG_EXPORT(stream_of, StreamOf, "device");
TENSORPLUG_EXPORT(noop, Noop);
TENSORPLUG_EXPORT(fails, Fails, "msg");
TENSORPLUG_EXPORT(split, Split, "x");
TENSORPLUG_EXPORT(apply, Apply, "f", "x");
TENSORPLUG_EXPORT(nd_alloc, NDAlloc, "n");

TENSORPLUG_REGISTER_GLOBAL("examples.add_ints", [](int64_t a, int64_t b) { return a + b; }, "a", "b");
