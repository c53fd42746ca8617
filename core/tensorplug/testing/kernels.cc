// The conformance kit's kernel library: compiled once per test session by
// tensorplug.testing (fixture `tensorplug_kernels`).
//
// Kernels that read or write elements run on host memory only and honour any strides
// (transposed, sliced, negative, zero). The others (identity, describe, data_ptr,
// is_read_only, stream_of, alloc_like, the error kernels, list_describe, list_alloc_last and
// the int-array kernels) never touch the data, so they work on every device.
//
// Lists of tensors come both ways a kernel may take them (TensorViewList and
// std::vector<TensorView>), optionals of both list kinds too.
#include <tensorplug/tensorplug.h>

#include <complex>
#include <cstdlib>
#include <optional>
#include <cstdint>
#include <sstream>
#include <string>
#include <tuple>
#include <vector>

namespace tp = tensorplug;

namespace {

void CheckHost(const tp::TensorView& x, const char* fn) {
  const DLDeviceType type = x.device().device_type;
  TENSORPLUG_CHECK(type == kDLCPU || type == kDLCUDAHost || type == kDLCUDAManaged || type == kDLROCMHost,
                   ValueError)
      << fn << ": the test kernels read host memory only, got a tensor on " << x.device();
}

// Calls f(T{}) with T the C++ element type of x's dtype (every dtype the kit tests); errors
// name x's argument ("argument 'x': fill: unsupported dtype ...").
template <class F>
auto Dispatch(const tp::TensorView& x, const char* fn, F&& f) {
  const DLDataType dtype = x.dtype();
  TENSORPLUG_CHECK(dtype.lanes == 1, TypeError) << x.arg() << fn << ": vector dtype " << dtype;
  switch (dtype.code << 8 | dtype.bits) {
    case kDLBool << 8 | 8: return f(bool{});
    case kDLInt << 8 | 8: return f(int8_t{});
    case kDLInt << 8 | 16: return f(int16_t{});
    case kDLInt << 8 | 32: return f(int32_t{});
    case kDLInt << 8 | 64: return f(int64_t{});
    case kDLUInt << 8 | 8: return f(uint8_t{});
    case kDLUInt << 8 | 16: return f(uint16_t{});
    case kDLUInt << 8 | 32: return f(uint32_t{});
    case kDLUInt << 8 | 64: return f(uint64_t{});
    case kDLFloat << 8 | 16: return f(tp::Half{});
    case kDLBfloat << 8 | 16: return f(tp::BFloat16{});
    case kDLFloat << 8 | 32: return f(float{});
    case kDLFloat << 8 | 64: return f(double{});
    case kDLComplex << 8 | 64: return f(std::complex<float>{});
    case kDLComplex << 8 | 128: return f(std::complex<double>{});
  }
  TENSORPLUG_THROW(TypeError) << x.arg() << fn << ": unsupported dtype " << dtype;
}

template <class T>
struct IsComplex : std::false_type {};
template <class T>
struct IsComplex<std::complex<T>> : std::true_type {};

// The real part as a double.
template <class T>
double Real(T v) {
  if constexpr (IsComplex<T>::value) {
    return static_cast<double>(v.real());
  } else if constexpr (std::is_same_v<T, tp::Half> || std::is_same_v<T, tp::BFloat16>) {
    return static_cast<float>(v);
  } else {
    return static_cast<double>(v);
  }
}

template <class T>
T FromDouble(double v) {
  if constexpr (std::is_same_v<T, tp::Half> || std::is_same_v<T, tp::BFloat16>) {
    return T(static_cast<float>(v));
  } else if constexpr (IsComplex<T>::value) {
    return T(static_cast<typename T::value_type>(v), 0);
  } else if constexpr (std::is_same_v<T, bool>) {
    return v != 0;
  } else {
    return static_cast<T>(v);
  }
}

// x + 1 (bool: not x; complex: real part + 1).
template <class T>
T PlusOne(T v) {
  if constexpr (std::is_same_v<T, bool>) {
    return !v;
  } else if constexpr (std::is_same_v<T, tp::Half> || std::is_same_v<T, tp::BFloat16>) {
    return T(static_cast<float>(v) + 1.0f);
  } else if constexpr (IsComplex<T>::value) {
    return v + T(1);
  } else {
    return static_cast<T>(v + 1);
  }
}

std::string Join(tp::IntArrayView values) {
  std::ostringstream os;
  for (size_t i = 0; i < values.size(); ++i) os << (i == 0 ? "" : ",") << values[i];
  return os.str();
}

// ------------------------------------------------------------------- kernels ----

// The owning tensor back to the caller, unchanged.
tp::Tensor Identity(tp::Tensor x) { return x; }

// "dtype|shape|strides|device|read_only", e.g. "float32|2,3|3,1|cpu:0|0".
std::string Describe(tp::TensorView x) {
  std::vector<int64_t> strides;
  for (int32_t i = 0; i < x.dim(); ++i) strides.push_back(x.stride(i));
  std::ostringstream os;
  os << x.dtype() << '|' << Join(x.shape()) << '|' << Join(strides) << '|' << x.device() << '|'
     << (x.is_read_only() ? 1 : 0);
  return os.str();
}

// Address of element 0, as the kernel sees it.
int64_t DataPtr(tp::TensorView x) { return static_cast<int64_t>(reinterpret_cast<intptr_t>(x.data_ptr())); }

bool IsReadOnly(tp::TensorView x) { return x.is_read_only(); }

// x[...] = value in place (complex: value + 0j); x is written (MutableView): a read-only
// tensor is refused before the call.
void Fill(tp::MutableView x, double value) {
  CheckHost(x, "fill");
  Dispatch(x, "fill", [&](auto tag) {
    using T = decltype(tag);
    T* data = static_cast<T*>(x.mutable_data_ptr());
    const T v = FromDouble<T>(value);
    tp::ForEachOffset(x, [&](int64_t offset) { data[offset] = v; });
  });
}

// The sum of the real parts, any strides.
double StridedSum(tp::TensorView x) {
  CheckHost(x, "strided_sum");
  return Dispatch(x, "strided_sum", [&](auto tag) {
    using T = decltype(tag);
    const T* data = static_cast<const T*>(x.data_ptr());
    double total = 0;
    tp::ForEachOffset(x, [&](int64_t offset) { total += Real(data[offset]); });
    return total;
  });
}

// x + 1 in a new contiguous tensor from the caller's allocator (any strides in).
tp::Tensor AddOne(tp::TensorView x) {
  CheckHost(x, "add_one");
  tp::Tensor out = tp::Tensor::FromEnvAlloc(x.shape(), x.dtype(), x.device());
  Dispatch(x, "add_one", [&](auto tag) {
    using T = decltype(tag);
    const T* in = static_cast<const T*>(x.data_ptr());
    T* result = static_cast<T*>(out.mutable_data_ptr());
    int64_t i = 0;
    tp::ForEachOffset(x, [&](int64_t offset) { result[i++] = PlusOne(in[offset]); });
  });
  return out;
}

// a + b (same shape and dtype, any strides) in a new tensor from the caller's allocator.
tp::Tensor Add(tp::TensorView a, tp::TensorView b) {
  CheckHost(a, "add");
  CheckHost(b, "add");
  TENSORPLUG_CHECK(a.shape() == b.shape(), ValueError)
      << "add: shape mismatch " << a.shape() << " vs " << b.shape();
  TENSORPLUG_CHECK(a.dtype() == b.dtype(), TypeError) << "add: dtype mismatch " << a.dtype() << " vs " << b.dtype();
  tp::Tensor out = tp::Tensor::FromEnvAlloc(a.shape(), a.dtype(), a.device());
  std::vector<int64_t> offsets_a, offsets_b;
  tp::ForEachOffset(a, [&](int64_t offset) { offsets_a.push_back(offset); });
  tp::ForEachOffset(b, [&](int64_t offset) { offsets_b.push_back(offset); });
  Dispatch(a, "add", [&](auto tag) {
    using T = decltype(tag);
    const T* pa = static_cast<const T*>(a.data_ptr());
    const T* pb = static_cast<const T*>(b.data_ptr());
    T* result = static_cast<T*>(out.mutable_data_ptr());
    for (size_t i = 0; i < offsets_a.size(); ++i) {
      const T x = pa[offsets_a[i]], y = pb[offsets_b[i]];
      if constexpr (std::is_same_v<T, bool>) {
        result[i] = x || y;
      } else if constexpr (std::is_same_v<T, tp::Half> || std::is_same_v<T, tp::BFloat16>) {
        result[i] = T(static_cast<float>(x) + static_cast<float>(y));
      } else {
        result[i] = static_cast<T>(x + y);
      }
    }
  });
  return out;
}

// A new tensor like x from the caller's allocator, on x's device; data left as allocated.
tp::Tensor AllocLike(tp::TensorView x) { return tp::Tensor::FromEnvAlloc(x.shape(), x.dtype(), x.device()); }

// float32 [0, 1, ..., n-1] on the cpu from the caller's allocator (no tensor argument:
// output_framework decides the framework).
tp::Tensor Arange(int64_t n) {
  TENSORPLUG_CHECK(n >= 0, ValueError) << "arange: n must be >= 0, got " << n;
  tp::Tensor out = tp::Tensor::FromEnvAlloc({n}, tp::kFloat32, tp::kCPU);
  float* data = out.mutable_data_ptr<float>();
  for (int64_t i = 0; i < n; ++i) data[i] = static_cast<float>(i);
  return out;
}

// 4 PiB of x's dtype on x's device: the allocator must fail (MemoryError).
tp::Tensor AllocHuge(tp::TensorView x) {
  return tp::Tensor::FromEnvAlloc({int64_t(1) << 20, int64_t(1) << 20, int64_t(1) << 10}, tp::kFloat32, x.device());
}

// (x + 1, x + 1) as two tensors from the caller's allocator: a tuple result.
std::tuple<tp::Tensor, tp::Tensor> Pair(tp::TensorView x) { return {AddOne(x), AddOne(x)}; }

// a * b (float32 or float64, one shape, any strides) in a new tensor: the "gradients" capability's op.
tp::Tensor Mul(tp::TensorView a, tp::TensorView b) {
  CheckHost(a, "mul");
  CheckHost(b, "mul");
  TENSORPLUG_CHECK(a.shape() == b.shape() && a.dtype() == b.dtype(), ValueError) << "mul: a and b must be alike";
  tp::Tensor out = tp::Tensor::FromEnvAlloc(a.shape(), a.dtype(), a.device());
  std::vector<int64_t> offsets_a, offsets_b;
  tp::ForEachOffset(a, [&](int64_t offset) { offsets_a.push_back(offset); });
  tp::ForEachOffset(b, [&](int64_t offset) { offsets_b.push_back(offset); });
  TENSORPLUG_DISPATCH_FLOATING_TYPES(a, "mul", [&] {
    const scalar_t* pa = a.data_ptr<scalar_t>();
    const scalar_t* pb = b.data_ptr<scalar_t>();
    scalar_t* result = out.mutable_data_ptr<scalar_t>();
    for (size_t i = 0; i < offsets_a.size(); ++i) result[i] = pa[offsets_a[i]] * pb[offsets_b[i]];
  });
  return out;
}

// The backward of mul: (grad * b, grad * a).
std::tuple<tp::Tensor, tp::Tensor> MulBackward(tp::TensorView grad, tp::TensorView a, tp::TensorView b) {
  return {Mul(grad, b), Mul(grad, a)};
}

// The calling thread's current stream of x's device, as an integer (0: the default stream).
int64_t StreamOf(tp::TensorView x) {
  return static_cast<int64_t>(reinterpret_cast<intptr_t>(tp::GetCurrentStream(x.device())));
}

// (a new tensor like `like` from the caller's allocator, the stream of like's device).
std::tuple<tp::Tensor, int64_t> AllocOn(tp::TensorView first, tp::TensorView like) {
  (void)first;
  return {AllocLike(like), StreamOf(like)};
}

// Throws an error of kind `kind` with `message`; x only makes the call have a primary tensor.
void Raise(tp::TensorView x, const std::string& kind, const std::string& message) {
  (void)x;
  throw tp::Error(kind, message);
}

// Allocates through the caller's allocator, then throws ValueError(message).
void RaiseAfterAlloc(tp::TensorView x, const std::string& message) {
  tp::Tensor scratch = AllocLike(x);
  TENSORPLUG_THROW(ValueError) << message;
}


// ------------------------------------------------------------ list kernels ----

// describe() of every item, joined by ';' ("" for an empty list).
std::string ListDescribe(tp::TensorViewList xs) {
  std::string out;
  for (int64_t i = 0; i < xs.size(); ++i) out += (i == 0 ? "" : ";") + Describe(xs[i]);
  return out;
}

// The sum of the real parts of every item (any strides).
double ListSum(tp::TensorViewList xs) {
  double total = 0;
  for (tp::TensorView x : xs) total += StridedSum(x);
  return total;
}

// item + 1 for every item, each a new tensor from the caller's allocator: a list result.
std::vector<tp::Tensor> ListAddOne(tp::TensorViewList xs) {
  std::vector<tp::Tensor> out;
  out.reserve(size_t(xs.size()));
  for (tp::TensorView x : xs) out.push_back(AddOne(x));
  return out;
}

// Every item filled with `value`, in place. The items are written (MutableView): the core
// refuses a read-only item before the call, so a refused call leaves every item unchanged.
void ListFill(std::vector<tp::MutableView> xs, double value) {
  for (const tp::MutableView& x : xs) CheckHost(x, "list_fill");
  for (const tp::MutableView& x : xs) Fill(x, value);
}

// x + every item of xs (same shape and dtype): the primary argument may sit in the list.
tp::Tensor AddList(tp::TensorViewList xs, tp::TensorView x) {
  if (xs.empty()) return AddOne(x);  // x + 1 when there is nothing to add: still a new tensor
  tp::Tensor out = Add(x, xs[0]);
  for (int64_t i = 1; i < xs.size(); ++i) out = Add(out, xs[i]);
  return out;
}

// (a new tensor like the last item from the caller's allocator, the stream of its device).
std::tuple<tp::Tensor, int64_t> ListAllocLast(tp::TensorViewList xs) {
  TENSORPLUG_CHECK(!xs.empty(), ValueError) << "list_alloc_last: empty list";
  tp::TensorView last = xs[xs.size() - 1];
  return {AllocLike(last), StreamOf(last)};
}

// Host memory from malloc, not from any framework: results made with it are converted into
// the caller's framework by its output conversion.
struct MallocAlloc {
  void AllocData(DLTensor* t) {
    const size_t bytes = size_t(tp::GetDataSize(*t));
    t->data = bytes ? std::malloc(bytes) : nullptr;
  }
  void FreeData(DLTensor* t) { std::free(t->data); }
};

// float32 [0, 1, ..., n-1] for every n of `lengths`, in malloc'd memory: a list result that
// the output conversion turns into the caller's framework (no tensor argument:
// output_framework decides which).
std::vector<tp::Tensor> ListArange(tp::IntArrayView lengths) {
  std::vector<tp::Tensor> out;
  for (int64_t n : lengths) {
    TENSORPLUG_CHECK(n >= 0, ValueError) << "list_arange: lengths must be >= 0, got " << n;
    tp::Tensor t = tp::Tensor::FromNDAlloc(MallocAlloc{}, {n}, tp::kFloat32, tp::kCPU);
    float* data = t.mutable_data_ptr<float>();
    for (int64_t i = 0; i < n; ++i) data[i] = static_cast<float>(i);
    out.push_back(std::move(t));
  }
  return out;
}

// The number of items, -1 for None (both optional list forms).
int64_t ListCount(std::optional<tp::TensorViewList> xs) { return xs ? xs->size() : -1; }
int64_t VectorCount(std::optional<std::vector<tp::TensorView>> xs) { return xs ? int64_t(xs->size()) : -1; }

// ------------------------------------------------------- int-array kernels ----

// The ints back as a Python list of ints.
std::vector<int64_t> EchoInts(std::vector<int64_t> values) { return values; }

// "1,2,3" ("" for an empty array, "none" for None; both optional int-array forms).
std::string JoinInts(std::optional<tp::IntArrayView> values) { return values ? Join(*values) : "none"; }
std::string JoinVector(std::optional<std::vector<int64_t>> values) { return values ? Join(*values) : "none"; }

}  // namespace

TENSORPLUG_EXPORT(identity, Identity, "x");
TENSORPLUG_EXPORT(describe, Describe, "x");
TENSORPLUG_EXPORT(data_ptr, DataPtr, "x");
TENSORPLUG_EXPORT(is_read_only, IsReadOnly, "x");
TENSORPLUG_EXPORT(fill, Fill, "x", "value");
TENSORPLUG_EXPORT(strided_sum, StridedSum, "x");
TENSORPLUG_EXPORT(add_one, AddOne, "x");
TENSORPLUG_EXPORT(add, Add, "a", "b");
TENSORPLUG_EXPORT(alloc_like, AllocLike, "x");
TENSORPLUG_EXPORT(arange, Arange, "n");
TENSORPLUG_EXPORT(alloc_huge, AllocHuge, "x");
TENSORPLUG_EXPORT(pair, Pair, "x");
TENSORPLUG_EXPORT(mul, Mul, "a", "b");
TENSORPLUG_EXPORT(mul_backward, MulBackward, "grad", "a", "b");
TENSORPLUG_EXPORT(stream_of, StreamOf, "x");
TENSORPLUG_EXPORT(alloc_on, AllocOn, "first", "like");
TENSORPLUG_EXPORT(raise_error, Raise, "x", "kind", "message");
TENSORPLUG_EXPORT(raise_after_alloc, RaiseAfterAlloc, "x", "message");
TENSORPLUG_EXPORT(list_describe, ListDescribe, "xs");
TENSORPLUG_EXPORT(list_sum, ListSum, "xs");
TENSORPLUG_EXPORT(list_add_one, ListAddOne, "xs");
TENSORPLUG_EXPORT(list_fill, ListFill, "xs", "value");
TENSORPLUG_EXPORT(add_list, AddList, "xs", "x");
TENSORPLUG_EXPORT(list_alloc_last, ListAllocLast, "xs");
TENSORPLUG_EXPORT(list_arange, ListArange, "lengths");
TENSORPLUG_EXPORT(list_count, ListCount, "xs");
TENSORPLUG_EXPORT(vector_count, VectorCount, "xs");
TENSORPLUG_EXPORT(echo_ints, EchoInts, "values");
TENSORPLUG_EXPORT(join_ints, JoinInts, "values");
TENSORPLUG_EXPORT(join_vector, JoinVector, "values");
