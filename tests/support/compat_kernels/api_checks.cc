// Exercises the compatibility layer's names one by one, for tests/tvm_ffi/test_compat_tvm_ffi.py.
// Written against the other project's API only; the test reads the results from Python.
#include <tvm/ffi/tvm_ffi.h>

#include <cstdint>
#include <vector>

namespace ffi = tvm::ffi;

// ---- shapes -----------------------------------------------------------------------
ffi::Shape StridesOf(ffi::TensorView x) { return ffi::Shape(x.strides()); }
ffi::Shape CompactStrides(ffi::TensorView x) { return ffi::Shape::StridesFromShape(x.shape()); }
int64_t ShapeProduct(ffi::TensorView x) {
  ffi::Shape shape = x.shape();
  ffi::Shape copy = shape;
  TVM_FFI_ICHECK(copy == shape && copy == x.shape());
  return shape.Product();
}
int64_t ShapeAt(ffi::TensorView x, int64_t i) { return ffi::Shape(x.shape()).at(static_cast<size_t>(i)); }

// ---- tensors ------------------------------------------------------------------------
int64_t DataSize(ffi::TensorView x) { return static_cast<int64_t>(ffi::GetDataSize(x)); }
int64_t DataSizeDL(ffi::TensorView x) { return static_cast<int64_t>(ffi::GetDataSize(*x.operator->())); }
bool Contiguous(ffi::TensorView x) { return x.IsContiguous() && x.is_contiguous() == x.IsContiguous(); }
int64_t Rank(ffi::TensorView x) { return x->ndim + 100 * x.GetDLTensorPtr()->ndim; }
ffi::Tensor CopyOwned(ffi::Tensor x) {
  ffi::Tensor y = ffi::Tensor::FromEnvAlloc(TVMFFIEnvTensorAlloc, x.shape(), x.dtype(), x.device());
  TVM_FFI_ICHECK(x.IsContiguous());
  std::copy(static_cast<const char*>(x.data_ptr()), static_cast<const char*>(x.data_ptr()) + ffi::GetDataSize(x),
            static_cast<char*>(y.data_ptr()));
  return y;
}

// An allocator with the env allocator's signature that always fails with MemoryError.
static int FailingAlloc(DLTensor*, TVMFFIObjectHandle*) {
  TPErrorSet("MemoryError", "workspace exhausted");
  return -1;
}
void AllocFails() { ffi::Tensor::FromEnvAlloc(FailingAlloc, {4}, DLDataType{kDLFloat, 32, 1}, DLDevice{kDLCPU, 0}); }
void AllocNegative() {
  ffi::Tensor::FromEnvAlloc(TVMFFIEnvTensorAlloc, {2, -1}, DLDataType{kDLFloat, 32, 1}, DLDevice{kDLCPU, 0});
}

// ---- dtypes -------------------------------------------------------------------------
ffi::String DTypeRoundTrip(ffi::String name) { return ffi::DLDataTypeToString(ffi::StringToDLDataType(name)); }

// ---- checks -------------------------------------------------------------------------
void CheckMessage(int64_t which) {
  uint8_t small = 7;
  int* null_pointer = nullptr;
  DLDataType f32{kDLFloat, 32, 1}, f16{kDLFloat, 16, 1};
  switch (which) {
    case 0: TVM_FFI_ICHECK_NE(which, 0) << "which must not be zero"; break;
    case 1: TVM_FFI_CHECK_LT(which, 0, ValueError); break;
    case 2: TVM_FFI_LOG_AND_THROW(NotImplementedError) << "logged first"; break;
    case 3: TVM_FFI_CHECK_NOTNULL(null_pointer, ValueError); break;
    case 4: TVM_FFI_CHECK_EQ(small, 8, ValueError) << "bytes print as numbers"; break;
    case 5: TVM_FFI_CHECK_EQ(f32, f16, TypeError) << "dtypes"; break;
    case 6: TVM_FFI_CHECK_GE(static_cast<size_t>(1), 2, IndexError); break;
    case 7: TVM_FFI_ICHECK(which < 0); break;
    default: break;
  }
}

// A check macro must not capture the caller's `else`.
int64_t DanglingElse(int64_t which) {
  int64_t branch = 0;
  if (which > 0)
    TVM_FFI_ICHECK_EQ(which, which);
  else
    branch = -1;
  if (which > 0)
    TVM_FFI_CHECK(which > 0, ValueError);
  else
    branch -= 10;
  return branch;
}

// Each operand of a binary check is evaluated exactly once.
int64_t EvaluatedOnce() {
  int64_t calls = 0;
  auto next = [&calls] { return ++calls; };
  TVM_FFI_ICHECK_EQ(next(), 1);
  return calls;
}

// ---- optional, string, array, tuple ------------------------------------------------
int64_t OptionalOr(ffi::Optional<int64_t> x) { return x.value_or(-1) + (x.has_value() ? 1000 : 0); }
int64_t OptionalValue(ffi::Optional<int64_t> x) { return x.value(); }
bool OptionalIsNone(ffi::Optional<ffi::TensorView> x) { return x == std::nullopt && !x; }
ffi::Optional<ffi::String> MaybeName(bool give) {
  if (give) return ffi::String("named");
  return std::nullopt;
}
ffi::Array<int64_t> Iota(int64_t n) {
  ffi::Array<int64_t> out;
  for (int64_t i = 0; i < n; ++i) out.push_back(i);
  return out;
}
int64_t ArrayAt(int64_t i) { return Iota(3)[static_cast<size_t>(i)]; }
ffi::Array<ffi::Tensor> TwoCopies(ffi::Tensor x) { return {CopyOwned(x), CopyOwned(x)}; }
ffi::Tuple<int64_t, ffi::String, double> Mixed() { return ffi::Tuple<int64_t, ffi::String, double>(1, "two", 3.5); }

// ---- functions and env --------------------------------------------------------------
int64_t CallGlobal(ffi::String name, int64_t value) {
  ffi::Optional<ffi::Function> f = ffi::Function::GetGlobal(name);
  if (!f.has_value()) return -1;
  return (*f)(value).cast<int64_t>();
}
int64_t CallTyped(int64_t value) {
  ffi::Function twice = ffi::Function::FromTyped([](int64_t v) { return 2 * v; });
  return twice(value).cast<int64_t>();
}
int64_t StreamRoundTrip(int64_t handle) {
  TVMFFIStreamHandle original = nullptr;
  TVMFFIEnvSetStream(kDLCUDA, 3, reinterpret_cast<void*>(handle), &original);
  const auto seen = reinterpret_cast<int64_t>(TVMFFIEnvGetStream(kDLCUDA, 3));
  TVMFFIEnvSetStream(kDLCUDA, 3, original, nullptr);
  return seen;
}

TVM_FFI_DLL_EXPORT_TYPED_FUNC(strides_of, StridesOf);
TVM_FFI_DLL_EXPORT_TYPED_FUNC(compact_strides, CompactStrides);
TVM_FFI_DLL_EXPORT_TYPED_FUNC(shape_product, ShapeProduct);
TVM_FFI_DLL_EXPORT_TYPED_FUNC(shape_at, ShapeAt);
TVM_FFI_DLL_EXPORT_TYPED_FUNC(data_size, DataSize);
TVM_FFI_DLL_EXPORT_TYPED_FUNC(data_size_dl, DataSizeDL);
TVM_FFI_DLL_EXPORT_TYPED_FUNC(contiguous, Contiguous);
TVM_FFI_DLL_EXPORT_TYPED_FUNC(rank, Rank);
TVM_FFI_DLL_EXPORT_TYPED_FUNC(copy_owned, CopyOwned);
TVM_FFI_DLL_EXPORT_TYPED_FUNC(alloc_fails, AllocFails);
TVM_FFI_DLL_EXPORT_TYPED_FUNC(alloc_negative, AllocNegative);
TVM_FFI_DLL_EXPORT_TYPED_FUNC(dtype_round_trip, DTypeRoundTrip);
TVM_FFI_DLL_EXPORT_TYPED_FUNC(check_message, CheckMessage);
TVM_FFI_DLL_EXPORT_TYPED_FUNC(dangling_else, DanglingElse);
TVM_FFI_DLL_EXPORT_TYPED_FUNC(evaluated_once, EvaluatedOnce);
TVM_FFI_DLL_EXPORT_TYPED_FUNC(optional_or, OptionalOr);
TVM_FFI_DLL_EXPORT_TYPED_FUNC(optional_value, OptionalValue);
TVM_FFI_DLL_EXPORT_TYPED_FUNC(optional_is_none, OptionalIsNone);
TVM_FFI_DLL_EXPORT_TYPED_FUNC(maybe_name, MaybeName);
TVM_FFI_DLL_EXPORT_TYPED_FUNC(iota, Iota);
TVM_FFI_DLL_EXPORT_TYPED_FUNC(array_at, ArrayAt);
TVM_FFI_DLL_EXPORT_TYPED_FUNC(two_copies, TwoCopies);
TVM_FFI_DLL_EXPORT_TYPED_FUNC(mixed, Mixed);
TVM_FFI_DLL_EXPORT_TYPED_FUNC(call_global, CallGlobal);
TVM_FFI_DLL_EXPORT_TYPED_FUNC(call_typed, CallTyped);
TVM_FFI_DLL_EXPORT_TYPED_FUNC(stream_round_trip, StreamRoundTrip);
