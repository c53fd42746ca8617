// The conformance kit's kernel library in apache tvm-ffi's source form: the functions of
// kernels.cc that tvm-ffi can express, written against tvm-ffi's headers only (no tensorplug
// header), built by tvm-ffi's own `tvm_ffi.cpp.build_inline` with its metadata and loaded
// unchanged by tensorplug.load_module (tensorplug.testing.tvm_ffi_kernels; the kit option
// --tensorplug-kernels=tvm-ffi). The kit's checks then call a binary of tvm-ffi's ABI through
// every adapter: views in, written views (declared with load_module's `writes=`), allocations
// through the caller's allocator (TVMFFIEnvTensorAlloc), scalars, strings, tuples, and errors
// that keep their kind and message.
//
// What tvm-ffi cannot express is left out (tensorplug.testing.tvm_ffi_kernels.LACKS says why):
// a read-only flag (is_read_only; describe() reports 0) and a CPU stream (stream_of). Lists
// have one form here (ffi::Array), so the kit's two list forms are one function twice.
//
// Kernels that read or write elements run on host memory only and honour any strides; the
// others never touch the data.
// Over 500 lines: one idea, kernels.cc's library in the other ABI's form, kept one file as
// kernels.cc is, so that the two read side by side (and tvm-ffi builds one source).
#include <tvm/ffi/container/array.h>
#include <tvm/ffi/container/tensor.h>
#include <tvm/ffi/container/tuple.h>
#include <tvm/ffi/error.h>
#include <tvm/ffi/optional.h>
#include <tvm/ffi/extra/c_env_api.h>
#include <tvm/ffi/function.h>
#include <tvm/ffi/string.h>

#include <cmath>
#include <complex>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <sstream>
#include <string>
#include <type_traits>
#include <vector>

namespace ffi = tvm::ffi;

namespace {

// ---------------------------------------------------------- 16-bit floats ----
// tvm-ffi has no half types of its own: the bits, converted by hand (round to nearest even).
struct Half {
  uint16_t bits;
};
struct BFloat16 {
  uint16_t bits;
};

float BitsToFloat(uint32_t bits) {
  float f;
  std::memcpy(&f, &bits, sizeof f);
  return f;
}

uint32_t FloatToBits(float f) {
  uint32_t bits;
  std::memcpy(&bits, &f, sizeof bits);
  return bits;
}

float ToFloat(Half h) {
  const uint32_t sign = uint32_t(h.bits & 0x8000u) << 16;
  uint32_t exponent = (h.bits >> 10) & 0x1fu, mantissa = h.bits & 0x3ffu;
  if (exponent == 0) {
    if (mantissa == 0) return BitsToFloat(sign);
    exponent = 127 - 15 + 1;  // a subnormal: normalise it
    while ((mantissa & 0x400u) == 0) {
      mantissa <<= 1;
      --exponent;
    }
    return BitsToFloat(sign | exponent << 23 | (mantissa & 0x3ffu) << 13);
  }
  if (exponent == 31) return BitsToFloat(sign | 0x7f800000u | mantissa << 13);
  return BitsToFloat(sign | (exponent + 127 - 15) << 23 | mantissa << 13);
}

Half MakeHalf(float f) {
  const uint32_t bits = FloatToBits(f);
  const uint16_t sign = uint16_t((bits >> 16) & 0x8000u);
  const uint32_t magnitude = bits & 0x7fffffffu;
  if (magnitude >= 0x7f800000u) return {uint16_t(sign | 0x7c00u | (magnitude > 0x7f800000u ? 0x200u : 0u))};
  if (magnitude >= 0x477ff000u) return {uint16_t(sign | 0x7c00u)};  // 65520 and up: infinity
  if (magnitude < 0x38800000u) {                                       // below 2**-14: subnormal
    return {uint16_t(sign | uint32_t(std::nearbyint(BitsToFloat(magnitude) * 16777216.0f)))};
  }
  uint32_t half = (((magnitude >> 23) - 127 + 15) << 10) | ((magnitude & 0x7fffffu) >> 13);
  const uint32_t rest = magnitude & 0x1fffu;
  if (rest > 0x1000u || (rest == 0x1000u && (half & 1u))) ++half;
  return {uint16_t(sign | half)};
}

float ToFloat(BFloat16 b) { return BitsToFloat(uint32_t(b.bits) << 16); }

BFloat16 MakeBFloat16(float f) {
  const uint32_t bits = FloatToBits(f);
  if ((bits & 0x7fffffffu) > 0x7f800000u) return {uint16_t((bits >> 16) | 0x40u)};
  return {uint16_t((bits + 0x7fffu + ((bits >> 16) & 1u)) >> 16)};
}

template <class T>
struct IsComplex : std::false_type {};
template <class T>
struct IsComplex<std::complex<T>> : std::true_type {};
template <class T>
constexpr bool kIs16 = std::is_same_v<T, Half> || std::is_same_v<T, BFloat16>;

template <class T>
T Make(float f) {
  if constexpr (std::is_same_v<T, Half>) {
    return MakeHalf(f);
  } else {
    return MakeBFloat16(f);
  }
}

// The real part as a double.
template <class T>
double Real(T v) {
  if constexpr (IsComplex<T>::value) {
    return static_cast<double>(v.real());
  } else if constexpr (kIs16<T>) {
    return ToFloat(v);
  } else {
    return static_cast<double>(v);
  }
}

template <class T>
T FromDouble(double v) {
  if constexpr (kIs16<T>) {
    return Make<T>(static_cast<float>(v));
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
  } else if constexpr (kIs16<T>) {
    return Make<T>(ToFloat(v) + 1.0f);
  } else if constexpr (IsComplex<T>::value) {
    return v + T(1);
  } else {
    return static_cast<T>(v + 1);
  }
}

// x + y (bool: x or y).
template <class T>
T Sum(T x, T y) {
  if constexpr (std::is_same_v<T, bool>) {
    return x || y;
  } else if constexpr (kIs16<T>) {
    return Make<T>(ToFloat(x) + ToFloat(y));
  } else {
    return static_cast<T>(x + y);
  }
}

// ------------------------------------------------------------------ helpers ----
const char* DTypeName(DLDataType dtype) {
  if (dtype.lanes != 1) return nullptr;
  switch (dtype.code << 8 | dtype.bits) {
    case kDLBool << 8 | 8: return "bool";
    case kDLInt << 8 | 8: return "int8";
    case kDLInt << 8 | 16: return "int16";
    case kDLInt << 8 | 32: return "int32";
    case kDLInt << 8 | 64: return "int64";
    case kDLUInt << 8 | 8: return "uint8";
    case kDLUInt << 8 | 16: return "uint16";
    case kDLUInt << 8 | 32: return "uint32";
    case kDLUInt << 8 | 64: return "uint64";
    case kDLFloat << 8 | 16: return "float16";
    case kDLBfloat << 8 | 16: return "bfloat16";
    case kDLFloat << 8 | 32: return "float32";
    case kDLFloat << 8 | 64: return "float64";
    case kDLComplex << 8 | 64: return "complex64";
    case kDLComplex << 8 | 128: return "complex128";
  }
  return nullptr;
}

std::string DeviceName(DLDevice device) {
  const char* type = device.device_type == kDLCPU ? "cpu" : device.device_type == kDLCUDA ? "cuda" : nullptr;
  std::ostringstream os;
  if (type != nullptr) {
    os << type;
  } else {
    os << "device" << int(device.device_type);
  }
  os << ':' << device.device_id;
  return os.str();
}

void CheckHost(const ffi::TensorView& x, const char* fn) {
  const DLDeviceType type = x.device().device_type;
  TVM_FFI_CHECK(type == kDLCPU || type == kDLCUDAHost || type == kDLCUDAManaged || type == kDLROCMHost, ValueError)
      << fn << ": the test kernels read host memory only, got a tensor on " << DeviceName(x.device());
}

// Calls f(T{}) with T the C++ element type of x's dtype.
template <class F>
auto Dispatch(const ffi::TensorView& x, const char* fn, F&& f) {
  const DLDataType dtype = x.dtype();
  TVM_FFI_CHECK(dtype.lanes == 1, TypeError) << fn << ": vector dtype";
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
    case kDLFloat << 8 | 16: return f(Half{});
    case kDLBfloat << 8 | 16: return f(BFloat16{});
    case kDLFloat << 8 | 32: return f(float{});
    case kDLFloat << 8 | 64: return f(double{});
    case kDLComplex << 8 | 64: return f(std::complex<float>{});
    case kDLComplex << 8 | 128: return f(std::complex<double>{});
  }
  std::ostringstream os;
  os << fn << ": unsupported dtype (code " << int(dtype.code) << ", " << int(dtype.bits) << " bits)";
  throw ffi::Error("TypeError", os.str(), "");
}

// Element offsets of x in row-major order of its index, any strides.
std::vector<int64_t> Offsets(const ffi::TensorView& x) {
  const int32_t ndim = x.ndim();
  std::vector<int64_t> out;
  const int64_t n = x.numel();
  if (n == 0) return out;
  out.reserve(size_t(n));
  std::vector<int64_t> index(size_t(ndim), 0);
  int64_t offset = 0;
  for (int64_t i = 0; i < n; ++i) {
    out.push_back(offset);
    for (int32_t d = ndim - 1; d >= 0; --d) {
      if (++index[size_t(d)] < x.size(d)) {
        offset += x.stride(d);
        break;
      }
      offset -= x.stride(d) * (x.size(d) - 1);
      index[size_t(d)] = 0;
    }
  }
  return out;
}

bool SameShape(const ffi::TensorView& a, const ffi::TensorView& b) {
  if (a.ndim() != b.ndim()) return false;
  for (int32_t i = 0; i < a.ndim(); ++i) {
    if (a.size(i) != b.size(i)) return false;
  }
  return true;
}

template <class T>
T* Data(const ffi::TensorView& x) {
  return reinterpret_cast<T*>(static_cast<char*>(x.data_ptr()) + x.byte_offset());
}

std::string Join(const int64_t* values, int64_t n) {
  std::ostringstream os;
  for (int64_t i = 0; i < n; ++i) os << (i == 0 ? "" : ",") << values[i];
  return os.str();
}

ffi::Tensor Empty(ffi::ShapeView shape, DLDataType dtype, DLDevice device) {
  return ffi::Tensor::FromEnvAlloc(TVMFFIEnvTensorAlloc, shape, dtype, device);
}

// ------------------------------------------------------------------- kernels ----

// The owning tensor back to the caller, unchanged.
ffi::Tensor Identity(ffi::Tensor x) { return x; }

// "dtype|shape|strides|device|read_only", as kernels.cc's describe; tvm-ffi has no read-only
// flag, so the last field is always 0.
ffi::String Describe(ffi::TensorView x) {
  const char* dtype = DTypeName(x.dtype());
  TVM_FFI_CHECK(dtype != nullptr, TypeError) << "describe: unsupported dtype";
  std::vector<int64_t> shape, strides;
  for (int32_t i = 0; i < x.ndim(); ++i) {
    shape.push_back(x.size(i));
    strides.push_back(x.stride(i));
  }
  std::ostringstream os;
  os << dtype << '|' << Join(shape.data(), x.ndim()) << '|' << Join(strides.data(), x.ndim()) << '|'
     << DeviceName(x.device()) << "|0";
  return ffi::String(os.str());
}

// Address of element 0, as the kernel sees it.
int64_t DataPtr(ffi::TensorView x) { return static_cast<int64_t>(reinterpret_cast<intptr_t>(Data<char>(x))); }

// x[...] = value in place; x is written: loaded with writes={"fill": [0]}, so that a read-only
// tensor is refused before the call.
void Fill(ffi::TensorView x, double value) {
  CheckHost(x, "fill");
  Dispatch(x, "fill", [&](auto tag) {
    using T = decltype(tag);
    T* data = Data<T>(x);
    const T v = FromDouble<T>(value);
    for (int64_t offset : Offsets(x)) data[offset] = v;
  });
}

// The sum of the real parts, any strides.
double StridedSum(ffi::TensorView x) {
  CheckHost(x, "strided_sum");
  return Dispatch(x, "strided_sum", [&](auto tag) {
    using T = decltype(tag);
    const T* data = Data<T>(x);
    double total = 0;
    for (int64_t offset : Offsets(x)) total += Real(data[offset]);
    return total;
  });
}

// x + 1 in a new contiguous tensor from the caller's allocator (any strides in).
ffi::Tensor AddOne(ffi::TensorView x) {
  CheckHost(x, "add_one");
  ffi::Tensor out = Empty(x.shape(), x.dtype(), x.device());
  Dispatch(x, "add_one", [&](auto tag) {
    using T = decltype(tag);
    const T* in = Data<T>(x);
    T* result = static_cast<T*>(out.data_ptr());
    int64_t i = 0;
    for (int64_t offset : Offsets(x)) result[i++] = PlusOne(in[offset]);
  });
  return out;
}

// a + b (same shape and dtype, any strides) in a new tensor from the caller's allocator.
ffi::Tensor Add(ffi::TensorView a, ffi::TensorView b) {
  CheckHost(a, "add");
  CheckHost(b, "add");
  TVM_FFI_CHECK(SameShape(a, b), ValueError) << "add: shape mismatch";
  TVM_FFI_CHECK(a.dtype() == b.dtype(), TypeError) << "add: dtype mismatch";
  ffi::Tensor out = Empty(a.shape(), a.dtype(), a.device());
  const std::vector<int64_t> offsets_a = Offsets(a), offsets_b = Offsets(b);
  Dispatch(a, "add", [&](auto tag) {
    using T = decltype(tag);
    const T* pa = Data<T>(a);
    const T* pb = Data<T>(b);
    T* result = static_cast<T*>(out.data_ptr());
    for (size_t i = 0; i < offsets_a.size(); ++i) result[i] = Sum(pa[offsets_a[i]], pb[offsets_b[i]]);
  });
  return out;
}

// A new tensor like x from the caller's allocator, on x's device; data left as allocated.
ffi::Tensor AllocLike(ffi::TensorView x) { return Empty(x.shape(), x.dtype(), x.device()); }

// float32 [0, 1, ..., n-1] on the cpu from the caller's allocator (no tensor argument).
ffi::Tensor Arange(int64_t n) {
  TVM_FFI_CHECK(n >= 0, ValueError) << "arange: n must be >= 0, got " << n;
  ffi::Tensor out = Empty({n}, DLDataType{kDLFloat, 32, 1}, DLDevice{kDLCPU, 0});
  float* data = static_cast<float*>(out.data_ptr());
  for (int64_t i = 0; i < n; ++i) data[i] = static_cast<float>(i);
  return out;
}

// 4 PiB of float32 on x's device: the allocator must fail (MemoryError).
ffi::Tensor AllocHuge(ffi::TensorView x) {
  return Empty({int64_t(1) << 20, int64_t(1) << 20, int64_t(1) << 10}, DLDataType{kDLFloat, 32, 1}, x.device());
}

// (x + 1, x + 1) as two tensors from the caller's allocator: a tuple result.
ffi::Tuple<ffi::Tensor, ffi::Tensor> Pair(ffi::TensorView x) { return ffi::Tuple<ffi::Tensor, ffi::Tensor>(AddOne(x), AddOne(x)); }

// a * b (float32 or float64, one shape, any strides) in a new tensor.
ffi::Tensor Mul(ffi::TensorView a, ffi::TensorView b) {
  CheckHost(a, "mul");
  CheckHost(b, "mul");
  TVM_FFI_CHECK(SameShape(a, b) && a.dtype() == b.dtype(), ValueError) << "mul: a and b must be alike";
  const DLDataType dtype = a.dtype();
  TVM_FFI_CHECK(dtype.code == kDLFloat && (dtype.bits == 32 || dtype.bits == 64), TypeError)
      << "mul: float32 or float64 only";
  ffi::Tensor out = Empty(a.shape(), a.dtype(), a.device());
  const std::vector<int64_t> offsets_a = Offsets(a), offsets_b = Offsets(b);
  auto run = [&](auto tag) {
    using T = decltype(tag);
    const T* pa = Data<T>(a);
    const T* pb = Data<T>(b);
    T* result = static_cast<T*>(out.data_ptr());
    for (size_t i = 0; i < offsets_a.size(); ++i) result[i] = pa[offsets_a[i]] * pb[offsets_b[i]];
  };
  if (dtype.bits == 32) {
    run(float{});
  } else {
    run(double{});
  }
  return out;
}

// The backward of mul: (grad * b, grad * a).
ffi::Tuple<ffi::Tensor, ffi::Tensor> MulBackward(ffi::TensorView grad, ffi::TensorView a, ffi::TensorView b) {
  return ffi::Tuple<ffi::Tensor, ffi::Tensor>(Mul(grad, b), Mul(grad, a));
}

// tvm-ffi's current stream of x's device, as an integer (0: none set).
int64_t StreamOf(ffi::TensorView x) {
  return static_cast<int64_t>(
      reinterpret_cast<intptr_t>(TVMFFIEnvGetStream(x.device().device_type, x.device().device_id)));
}

// (a new tensor like `like` from the caller's allocator, the stream of like's device).
ffi::Tuple<ffi::Tensor, int64_t> AllocOn(ffi::TensorView first, ffi::TensorView like) {
  (void)first;
  return ffi::Tuple<ffi::Tensor, int64_t>(AllocLike(like), StreamOf(like));
}

// Throws an error of kind `kind` with `message`; x only makes the call have a primary tensor.
void Raise(ffi::TensorView x, ffi::String kind, ffi::String message) {
  (void)x;
  throw ffi::Error(std::string(kind.data(), kind.size()), std::string(message.data(), message.size()), "");
}

// Allocates through the caller's allocator, then throws ValueError(message).
void RaiseAfterAlloc(ffi::TensorView x, ffi::String message) {
  ffi::Tensor scratch = AllocLike(x);
  throw ffi::Error("ValueError", std::string(message.data(), message.size()), "");
}

// ------------------------------------------------------------ list kernels ----
// tvm-ffi has one list form, ffi::Array<ffi::Tensor>: vector_count is list_count again.

// describe() of every item, joined by ';' ("" for an empty list).
ffi::String ListDescribe(ffi::Array<ffi::Tensor> xs) {
  std::string out;
  for (size_t i = 0; i < xs.size(); ++i) out += (i == 0 ? "" : ";") + std::string(Describe(xs[i]));
  return ffi::String(out);
}

// The sum of the real parts of every item (any strides).
double ListSum(ffi::Array<ffi::Tensor> xs) {
  double total = 0;
  for (const ffi::Tensor& x : xs) total += StridedSum(x);
  return total;
}

// item + 1 for every item, each a new tensor from the caller's allocator: a list result.
ffi::Array<ffi::Tensor> ListAddOne(ffi::Array<ffi::Tensor> xs) {
  std::vector<ffi::Tensor> out;
  for (const ffi::Tensor& x : xs) out.push_back(AddOne(x));
  return ffi::Array<ffi::Tensor>(out.begin(), out.end());
}

// Every item filled with `value`, in place (loaded with writes={"list_fill": [0]}).
void ListFill(ffi::Array<ffi::Tensor> xs, double value) {
  for (const ffi::Tensor& x : xs) CheckHost(x, "list_fill");
  for (const ffi::Tensor& x : xs) Fill(x, value);
}

// x + every item of xs (same shape and dtype): the primary argument may sit in the list.
ffi::Tensor AddList(ffi::Array<ffi::Tensor> xs, ffi::TensorView x) {
  if (xs.empty()) return AddOne(x);
  ffi::Tensor out = Add(x, xs[0]);
  for (size_t i = 1; i < xs.size(); ++i) out = Add(out, xs[i]);
  return out;
}

// (a new tensor like the last item from the caller's allocator, the stream of its device).
ffi::Tuple<ffi::Tensor, int64_t> ListAllocLast(ffi::Array<ffi::Tensor> xs) {
  TVM_FFI_CHECK(!xs.empty(), ValueError) << "list_alloc_last: empty list";
  ffi::TensorView last = xs[xs.size() - 1];
  return ffi::Tuple<ffi::Tensor, int64_t>(AllocLike(last), StreamOf(last));
}

// Host memory from malloc, not from any framework.
struct MallocAlloc {
  void AllocData(DLTensor* t) {
    size_t bytes = (t->dtype.bits * t->dtype.lanes + 7) / 8;
    for (int32_t i = 0; i < t->ndim; ++i) bytes *= size_t(t->shape[i]);
    t->data = bytes ? std::malloc(bytes) : nullptr;
  }
  void FreeData(DLTensor* t) { std::free(t->data); }
};

// float32 [0, 1, ..., n-1] for every n of `lengths`, in malloc'd memory: a list result.
ffi::Array<ffi::Tensor> ListArange(ffi::Array<int64_t> lengths) {
  std::vector<ffi::Tensor> out;
  for (int64_t n : lengths) {
    TVM_FFI_CHECK(n >= 0, ValueError) << "list_arange: lengths must be >= 0, got " << n;
    ffi::Tensor t = ffi::Tensor::FromNDAlloc(MallocAlloc{}, {n}, DLDataType{kDLFloat, 32, 1}, DLDevice{kDLCPU, 0});
    float* data = static_cast<float*>(t.data_ptr());
    for (int64_t i = 0; i < n; ++i) data[i] = static_cast<float>(i);
    out.push_back(t);
  }
  return ffi::Array<ffi::Tensor>(out.begin(), out.end());
}

// The number of items, -1 for None.
int64_t ListCount(ffi::Optional<ffi::Array<ffi::Tensor>> xs) {
  return xs.has_value() ? int64_t(xs.value().size()) : -1;
}

// ------------------------------------------------------- int-array kernels ----

// The ints back as a list of ints.
ffi::Array<int64_t> EchoInts(ffi::Array<int64_t> values) { return values; }

// "1,2,3" ("" for an empty array, "none" for None).
ffi::String JoinInts(ffi::Optional<ffi::Array<int64_t>> values) {
  if (!values.has_value()) return ffi::String("none");
  std::vector<int64_t> items(values.value().begin(), values.value().end());
  return ffi::String(Join(items.data(), int64_t(items.size())));
}

}  // namespace

TVM_FFI_DLL_EXPORT_TYPED_FUNC(identity, Identity);
TVM_FFI_DLL_EXPORT_TYPED_FUNC(describe, Describe);
TVM_FFI_DLL_EXPORT_TYPED_FUNC(data_ptr, DataPtr);
TVM_FFI_DLL_EXPORT_TYPED_FUNC(fill, Fill);
TVM_FFI_DLL_EXPORT_TYPED_FUNC(strided_sum, StridedSum);
TVM_FFI_DLL_EXPORT_TYPED_FUNC(add_one, AddOne);
TVM_FFI_DLL_EXPORT_TYPED_FUNC(add, Add);
TVM_FFI_DLL_EXPORT_TYPED_FUNC(alloc_like, AllocLike);
TVM_FFI_DLL_EXPORT_TYPED_FUNC(arange, Arange);
TVM_FFI_DLL_EXPORT_TYPED_FUNC(alloc_huge, AllocHuge);
TVM_FFI_DLL_EXPORT_TYPED_FUNC(pair, Pair);
TVM_FFI_DLL_EXPORT_TYPED_FUNC(mul, Mul);
TVM_FFI_DLL_EXPORT_TYPED_FUNC(mul_backward, MulBackward);
TVM_FFI_DLL_EXPORT_TYPED_FUNC(stream_of, StreamOf);
TVM_FFI_DLL_EXPORT_TYPED_FUNC(alloc_on, AllocOn);
TVM_FFI_DLL_EXPORT_TYPED_FUNC(raise_error, Raise);
TVM_FFI_DLL_EXPORT_TYPED_FUNC(raise_after_alloc, RaiseAfterAlloc);
TVM_FFI_DLL_EXPORT_TYPED_FUNC(list_describe, ListDescribe);
TVM_FFI_DLL_EXPORT_TYPED_FUNC(list_sum, ListSum);
TVM_FFI_DLL_EXPORT_TYPED_FUNC(list_add_one, ListAddOne);
TVM_FFI_DLL_EXPORT_TYPED_FUNC(list_fill, ListFill);
TVM_FFI_DLL_EXPORT_TYPED_FUNC(add_list, AddList);
TVM_FFI_DLL_EXPORT_TYPED_FUNC(list_alloc_last, ListAllocLast);
TVM_FFI_DLL_EXPORT_TYPED_FUNC(list_arange, ListArange);
TVM_FFI_DLL_EXPORT_TYPED_FUNC(list_count, ListCount);
TVM_FFI_DLL_EXPORT_TYPED_FUNC(vector_count, ListCount);
TVM_FFI_DLL_EXPORT_TYPED_FUNC(echo_ints, EchoInts);
TVM_FFI_DLL_EXPORT_TYPED_FUNC(join_ints, JoinInts);
TVM_FFI_DLL_EXPORT_TYPED_FUNC(join_vector, JoinInts);
