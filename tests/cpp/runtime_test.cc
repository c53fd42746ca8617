// A standalone C++ program (no Python) exercising libtensorplug through tensorplug.h:
// global functions, error propagation, streams, storage, allocation and tensor ownership.
//
//   c++ -std=c++17 -I<includedir> runtime_test.cc -L<libdir> -ltensorplug -pthread -o runtime_test
//
// Prints "runtime_test: N checks passed" and exits 0, or names the first failed check and
// exits 1. Over 500 lines: one program, the C ABI without Python, checked in one run.
#include <tensorplug/tensorplug.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

namespace tp = tensorplug;

namespace {

int g_checks = 0;

#define EXPECT(cond)                                                                    \
  do {                                                                                  \
    ++g_checks;                                                                         \
    if (!(cond)) {                                                                      \
      std::fprintf(stderr, "runtime_test: FAILED at %s:%d: %s\n", __FILE__, __LINE__, #cond); \
      std::exit(1);                                                                     \
    }                                                                                   \
  } while (false)

struct Caught {
  bool thrown = false;
  std::string kind;
  std::string message;
};

// Runs f and reports the tensorplug::Error it throws (any other exception is a failure).
template <class F>
Caught Catch(F&& f) {
  Caught c;
  try {
    f();
  } catch (const tp::Error& e) {
    c.thrown = true;
    c.kind = e.kind();
    c.message = e.what();
  }
  return c;
}

bool Contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

}  // namespace

// Registered while this program is initialized, before main() runs.
TENSORPLUG_REGISTER_GLOBAL("runtime_test.add", [](int64_t a, int64_t b) { return a + b; }, "a", "b");
TENSORPLUG_REGISTER_GLOBAL("runtime_test.greet", [](const std::string& who) { return "hello " + who; });

namespace {

void TestGlobalFunctions() {
  EXPECT(TPGetABIVersion() == TENSORPLUG_ABI_VERSION);

  tp::Function add = tp::Function::GetGlobalRequired("runtime_test.add");
  EXPECT(add(2, 3).cast<int64_t>() == 5);
  EXPECT(std::string(add.signature()) == "a:int;b:int->int");
  tp::Function greet = tp::Function::GetGlobalRequired("runtime_test.greet");
  EXPECT(greet("world").cast<std::string>() == "hello world");
  EXPECT(std::string(greet.signature()) == "arg0:str->str");

  std::vector<std::string> names = tp::Function::ListGlobalNames();
  EXPECT(std::find(names.begin(), names.end(), "runtime_test.add") != names.end());

  EXPECT(!tp::Function::GetGlobal("runtime_test.missing").defined());
  Caught missing = Catch([] { tp::Function::GetGlobalRequired("runtime_test.missing"); });
  EXPECT(missing.kind == "ValueError");
  EXPECT(missing.message == "global function 'runtime_test.missing' is not registered");

  // Registering a taken name fails unless overriding is allowed.
  tp::Function mul = tp::Function::FromTyped([](double a, double b) { return a * b; }, "mul", {"a", "b"});
  EXPECT(std::string(mul.signature()) == "a:float;b:float->float");
  mul.RegisterGlobal("runtime_test.mul");
  EXPECT(Catch([&] { mul.RegisterGlobal("runtime_test.mul"); }).thrown);
  mul.RegisterGlobal("runtime_test.mul", /*allow_override=*/true);
  EXPECT(tp::Function::GetGlobalRequired("runtime_test.mul")(1.5, 4).cast<double>() == 6.0);
  EXPECT(TPGlobalFuncRemove("runtime_test.mul") == 0);
  EXPECT(!tp::Function::GetGlobal("runtime_test.mul").defined());

  // A C++ callable handed to another function.
  tp::Function apply = tp::Function::FromTyped(
      [](tp::Function f, int64_t x) { return f(x).cast<int64_t>() + 1; }, "apply", {"f", "x"});
  tp::Function square = tp::Function::FromTyped([](int64_t x) { return x * x; });
  EXPECT(apply(square, 7).cast<int64_t>() == 50);

  // Tuples and optionals.
  tp::Function pair = tp::Function::FromTyped(
      [](std::optional<int64_t> x) { return std::make_tuple(x.has_value(), x.value_or(-1)); });
  auto [has, value] = pair(nullptr).cast<std::tuple<bool, int64_t>>();
  EXPECT(!has && value == -1);
  EXPECT(std::get<1>(pair(9).cast<std::tuple<bool, int64_t>>()) == 9);
}

void TestErrors() {
  // TENSORPLUG_THROW inside a function comes back as tensorplug::Error of the same kind.
  tp::Function thrower = tp::Function::FromTyped(
      [](int64_t which) -> int64_t {
        if (which == 0) TENSORPLUG_THROW(ValueError) << "bad value " << 42;
        if (which == 1) throw std::out_of_range("index 7 out of range");
        if (which == 2) throw std::bad_alloc();
        if (which == 3) throw std::runtime_error("plain runtime error");
        if (which == 4) throw 42;
        if (which == 5) TENSORPLUG_CHECK(which < 0, KeyError) << "no such key";
        if (which == 6) TENSORPLUG_ICHECK(which == 0) << "broken invariant";
        return which;
      },
      "thrower", {"which"});
  Caught c = Catch([&] { thrower(0); });
  EXPECT(c.kind == "ValueError" && c.message == "bad value 42");
  const char* kind = nullptr;
  const char* message = nullptr;
  EXPECT(TPErrorGet(&kind, &message) == 0);  // consumed by the rethrow
  c = Catch([&] { thrower(1); });
  EXPECT(c.kind == "IndexError" && c.message == "index 7 out of range");
  c = Catch([&] { thrower(2); });
  EXPECT(c.kind == "MemoryError");
  c = Catch([&] { thrower(3); });
  EXPECT(c.kind == "RuntimeError" && c.message == "plain runtime error");
  c = Catch([&] { thrower(4); });
  // Not a std::exception: the function and the thrown type are named (issue 21, item 6).
  EXPECT(c.kind == "RuntimeError" &&
         c.message == "thrower() threw a C++ exception of type int (not derived from std::exception)");
  c = Catch([&] { thrower(5); });
  EXPECT(c.kind == "KeyError" && c.message == "no such key (check failed: which < 0)");
  c = Catch([&] { thrower(6); });
  EXPECT(c.kind == "InternalError" && Contains(c.message, "which == 0") &&
         Contains(c.message, "runtime_test.cc:") && Contains(c.message, "broken invariant"));
  EXPECT(thrower(7).cast<int64_t>() == 7);

  // Argument checking names the function, position, parameter and kinds.
  tp::Function add = tp::Function::GetGlobalRequired("runtime_test.add");
  c = Catch([&] { add(1, "two"); });
  EXPECT(c.kind == "TypeError");
  EXPECT(c.message == "runtime_test.add() argument 2 'b': expected an int, got str");
  c = Catch([&] { add(1); });
  EXPECT(c.kind == "TypeError" && c.message == "runtime_test.add() takes 2 arguments (a, b), got 1");
  c = Catch([&] { add(1, 2).cast<std::string>(); });
  EXPECT(c.kind == "TypeError" && Contains(c.message, "expected a str, got int"));

  // Errors are per thread.
  std::thread([] { TPErrorSet("ValueError", "other thread"); }).join();
  EXPECT(TPErrorGet(&kind, &message) == 0);
}

void TestStreams() {
  const DLDevice gpu0 = tp::CUDADevice(0);
  const DLDevice gpu1 = tp::CUDADevice(1);
  void* const s0 = reinterpret_cast<void*>(0x1000);
  void* const s1 = reinterpret_cast<void*>(0x2000);
  EXPECT(tp::GetCurrentStream(gpu0) == nullptr);
  EXPECT(tp::SetCurrentStream(gpu0, s0) == nullptr);
  EXPECT(tp::GetCurrentStream(gpu0) == s0);
  EXPECT(tp::GetCurrentStream(gpu1) == nullptr);  // per device

  void* seen_in_thread = s1;
  std::thread([&] {
    seen_in_thread = tp::GetCurrentStream(gpu0);
    tp::SetCurrentStream(gpu0, s1);
  }).join();
  EXPECT(seen_in_thread == nullptr);          // a new thread starts on default streams
  EXPECT(tp::GetCurrentStream(gpu0) == s0);   // and cannot change this thread's

  EXPECT(tp::SetCurrentStream(gpu0, nullptr) == s0);
  EXPECT(tp::GetCurrentStream(gpu0) == nullptr);
}

int g_storage_deleted = 0;

void TestStorage() {
  auto deleter = [](void* value) {
    ++g_storage_deleted;
    delete static_cast<int*>(value);
  };
  tp::Storage::Set("runtime_test.handle", new int(7), deleter);
  EXPECT(*static_cast<int*>(tp::Storage::Get("runtime_test.handle")) == 7);
  tp::Storage::Set("runtime_test.handle", new int(8), deleter);  // replaces, destroying 7
  EXPECT(g_storage_deleted == 1);
  int seen = 0;
  std::thread([&] { seen = *static_cast<int*>(tp::Storage::Get("runtime_test.handle")); }).join();
  EXPECT(seen == 8);  // process-wide
  tp::Storage::Erase("runtime_test.handle");
  EXPECT(g_storage_deleted == 2);
  EXPECT(tp::Storage::Get("runtime_test.handle") == nullptr);
  tp::Storage::Erase("runtime_test.handle");  // erasing nothing is fine
  EXPECT(tp::Storage::Get("runtime_test.never") == nullptr);
}

void TestEnvAlloc() {
  tp::Tensor t = tp::Tensor::FromEnvAlloc({2, 3}, tp::kFloat32, tp::kCPU);
  EXPECT(t.defined() && t.dim() == 2 && t.numel() == 6);
  EXPECT(t.size(0) == 2 && t.size(-1) == 3);
  EXPECT(t.stride(0) == 3 && t.stride(1) == 1 && t.is_contiguous());
  EXPECT(t.dtype() == tp::kFloat32 && t.device() == tp::kCPU);
  float* data = t.mutable_data_ptr<float>();
  for (int i = 0; i < 6; ++i) data[i] = static_cast<float>(i);
  EXPECT(t.data_ptr<float>()[5] == 5.0f);

  EXPECT(Catch([&] { t.size(2); }).kind == "IndexError");
  EXPECT(Catch([&] { t.size(-3); }).kind == "IndexError");
  EXPECT(Catch([&] { t.data_ptr<int32_t>(); }).kind == "TypeError");
  EXPECT(Catch([] { tp::Tensor::FromEnvAlloc({2, -1}, tp::kFloat32, tp::kCPU); }).kind == "ValueError");
  // The default allocator serves the CPU only.
  EXPECT(Catch([] { tp::Tensor::FromEnvAlloc({2}, tp::kFloat32, tp::CUDADevice(0)); }).thrown);

  tp::Tensor scalar = tp::Tensor::FromEnvAlloc({}, tp::kInt64, tp::kCPU);
  EXPECT(scalar.dim() == 0 && scalar.numel() == 1 && scalar.is_contiguous());
}

int g_allocs = 0;
int g_frees = 0;

void CountingDeleter(DLManagedTensorVersioned* managed) {
  ++g_frees;
  std::free(managed->dl_tensor.data);
  delete[] managed->dl_tensor.shape;
  delete managed;
}

// A bound allocator that always returns compact strides; runs out of memory for int8
// tensors of more than one element and has no uint16 at all, reporting both as MemoryError as frameworks do
// (to test errors).
int CountingAllocator(DLTensor* prototype, DLManagedTensorVersioned** out, void* error_ctx,
                      void (*set_error)(void*, const char*, const char*)) {
  if (prototype->dtype == tp::kInt8 && tp::detail::Numel(*prototype) > 1) {
    set_error(error_ctx, "MemoryError", "int8 pool exhausted");
    return -1;
  }
  if (prototype->dtype == tp::kUInt16) {
    set_error(error_ctx, "MemoryError", "Unsupported dtype\nbacktrace follows");
    return -1;
  }
  ++g_allocs;
  auto* managed = new DLManagedTensorVersioned{};
  managed->version = {DLPACK_MAJOR_VERSION, DLPACK_MINOR_VERSION};
  managed->deleter = CountingDeleter;
  managed->dl_tensor = *prototype;
  const int32_t n = prototype->ndim;
  int64_t* dims = new int64_t[2 * static_cast<size_t>(n) + 1];
  std::copy(prototype->shape, prototype->shape + n, dims);
  int64_t step = 1;
  for (int32_t i = n - 1; i >= 0; --i) {  // compact strides, whatever was asked for
    dims[n + i] = step;
    step *= std::max<int64_t>(dims[i], 1);
  }
  managed->dl_tensor.shape = dims;
  managed->dl_tensor.strides = dims + n;
  int64_t count = 1;
  for (int32_t i = 0; i < n; ++i) count *= dims[i];
  managed->dl_tensor.data = std::malloc(static_cast<size_t>(count * tp::DataTypeBytes(prototype->dtype)) + 1);
  *out = managed;
  return 0;
}

// The default CPU allocator and TPEnvAllocTensor check the size arithmetic and the ndim limit.
void TestDefaultAllocatorLimits() {
  Caught c = Catch([] { tp::Tensor::FromEnvAlloc({int64_t(1) << 59}, tp::kFloat32, tp::kCPU); });
  EXPECT(c.kind == "MemoryError" &&
         c.message == "cannot allocate 2305843009213693952 bytes (shape [576460752303423488]) on cpu:0: out of memory");
  c = Catch([] { tp::Tensor::FromEnvAlloc({int64_t(1) << 61, 2}, tp::kFloat32, tp::kCPU); });
  EXPECT(c.kind == "MemoryError" &&
         c.message == "cannot allocate more than 2^64 bytes (shape [2305843009213693952,2]) on cpu:0: more than "
                      "2^63 - 1 bytes, which no allocator can address");
  std::vector<int64_t> many(TP_MAX_NDIM + 1, 1);
  c = Catch([&] { tp::Tensor::FromEnvAlloc(tp::IntArrayView(many.data(), many.size()), tp::kFloat32, tp::kCPU); });
  EXPECT(c.kind == "ValueError" &&
         c.message == "FromEnvAlloc: 65 dimensions; tensorplug supports at most 64");
  // The C ABI checks too (a plain-C kernel calls it directly).
  DLTensor prototype{nullptr, tp::kCPU, TP_MAX_NDIM + 1, tp::kFloat32, many.data(), nullptr, 0};
  DLManagedTensorVersioned* out = nullptr;
  EXPECT(TPEnvAllocTensor(&prototype, &out) == -1 && out == nullptr);
  c = Catch([] { tp::detail::ThrowLastError(); });
  EXPECT(c.kind == "ValueError" &&
         c.message == "cannot allocate a tensor: too many dimensions (tensorplug supports at most 64)");
  std::vector<int64_t> limit(TP_MAX_NDIM, 1);
  EXPECT(tp::Tensor::FromEnvAlloc(tp::IntArrayView(limit.data(), limit.size()), tp::kFloat32, tp::kCPU).dim() == 64);
  EXPECT(tp::Tensor::FromEnvAlloc({0, int64_t(1) << 62}, tp::kFloat32, tp::kCPU).numel() == 0);
  EXPECT(tp::Tensor::FromEnvAlloc({int64_t(1) << 40, int64_t(1) << 40, 0}, tp::kFloat32, tp::kCPU).numel() == 0);
}

// Element counts that wrap around 64 bits (2^32 x 2^32 is 0 modulo 2^64) are refused before
// any allocator runs, for the default CPU allocator and a bound one alike; so are sub-byte
// and vector dtypes whose bytes do not fit, and a dtype of no bits.
void TestOverflowingShapes() {
  const std::string elements = "no tensor can index them (element counts and strides are int64)";
  struct Case {
    std::vector<int64_t> shape;
    DLDataType dtype;
    std::string message;
  };
  const int64_t p = 1;
  const std::vector<Case> cases = {
      {{p << 32, p << 32}, tp::kFloat32,
       "cannot allocate more than 2^63 - 1 elements (shape [4294967296,4294967296]) on cpu:0: " + elements},
      {{p << 62, 4}, tp::kFloat32,
       "cannot allocate more than 2^63 - 1 elements (shape [4611686018427387904,4]) on cpu:0: " + elements},
      {{p << 33, p << 31}, tp::kInt8,
       "cannot allocate more than 2^63 - 1 elements (shape [8589934592,2147483648]) on cpu:0: " + elements},
      {{p << 31, p << 32}, DLDataType{kDLInt, 4, 1},  // 2^62 bytes, but 2^63 elements
       "cannot allocate more than 2^63 - 1 elements (shape [2147483648,4294967296]) on cpu:0: " + elements},
      {{p << 60}, DLDataType{kDLFloat, 32, 4},  // 2^60 float32x4: 2^64 bytes
       "cannot allocate more than 2^64 bytes (shape [1152921504606846976]) on cpu:0: more than 2^63 - 1 bytes, "
       "which no allocator can address"},
  };
  DLPackManagedTensorAllocator previous = TPEnvGetAllocator();
  for (DLPackManagedTensorAllocator bound : {previous, &CountingAllocator}) {
    TPEnvSetAllocator(bound);
    const int allocs = g_allocs;
    for (const Case& c : cases) {
      Caught caught = Catch([&] {
        tp::Tensor::FromEnvAlloc(tp::IntArrayView(c.shape.data(), c.shape.size()), c.dtype, tp::kCPU);
      });
      EXPECT(caught.kind == "MemoryError" && caught.message == c.message);
    }
    Caught caught = Catch([] { tp::Tensor::FromEnvAlloc({2, 3}, DLDataType{kDLFloat, 32, 0}, tp::kCPU); });
    EXPECT(caught.kind == "ValueError" && caught.message == "cannot allocate a tensor: the dtype has 0 bits or 0 lanes");
    EXPECT(g_allocs == allocs);  // the bound allocator was never asked
  }
  TPEnvSetAllocator(previous);
}

void TestBoundAllocator() {
  DLPackManagedTensorAllocator previous = TPEnvSetAllocator(CountingAllocator);
  {
    tp::Tensor t = tp::Tensor::FromEnvAlloc({4, 5}, tp::kFloat64, tp::CUDADevice(1));
    EXPECT(g_allocs == 1 && t.device() == tp::CUDADevice(1) && t.strides()[0] == 5);
    tp::Tensor same_strides = tp::Tensor::FromEnvAlloc({4, 5}, {5, 1}, tp::kFloat64, tp::kCPU);
    EXPECT(same_strides.stride(0) == 5);
    Caught c = Catch([] { tp::Tensor::FromEnvAlloc({4, 5}, {1, 4}, tp::kFloat64, tp::kCPU); });
    EXPECT(c.kind == "ValueError" && Contains(c.message, "could not honour strides"));
    c = Catch([] { tp::Tensor::FromEnvAlloc({4}, tp::kInt8, tp::kCPU); });
    // The runtime names what was asked for and where, keeping the allocator's reason.
    EXPECT(c.kind == "MemoryError" &&
           c.message == "cannot allocate 4 bytes (shape [4]) on cpu:0: int8 pool exhausted");
    // An allocator refusing even a one-element tensor of a dtype refuses the dtype: TypeError,
    // with the first line of its reason.
    c = Catch([] { tp::Tensor::FromEnvAlloc({4}, tp::kUInt16, tp::kCPU); });
    EXPECT(c.kind == "TypeError" &&
           c.message == "cannot allocate a uint16 tensor on cpu:0: the allocator refuses this dtype "
                        "(even for a one-element tensor): Unsupported dtype");
    // Allocation is per thread: another thread uses the default allocator.
    int allocs_before = g_allocs;
    std::thread([] { tp::Tensor::FromEnvAlloc({3}, tp::kFloat32, tp::kCPU); }).join();
    EXPECT(g_allocs == allocs_before);
  }
  EXPECT(g_frees == g_allocs);  // every tensor, also the rejected one, was freed once
  TPEnvSetAllocator(previous);
}

// An allocator that returns another tensor than the one asked for, as `g_lie` says:
// 0 one element more, 1 another dtype, 2 column-major strides, 3 another device; 4 tells
// the truth, with odd strides where any stride is compact.
int g_lie = 0;
int LyingAllocator(DLTensor* prototype, DLManagedTensorVersioned** out, void* error_ctx,
                   void (*set_error)(void*, const char*, const char*)) {
  DLTensor asked = *prototype;
  std::vector<int64_t> shape(asked.shape, asked.shape + asked.ndim);
  if (g_lie == 0) shape[0] += 1;
  if (g_lie == 1) asked.dtype = tp::kFloat64;
  if (g_lie == 3) asked.device = tp::CUDADevice(0);
  asked.shape = shape.data();
  asked.strides = nullptr;
  if (CountingAllocator(&asked, out, error_ctx, set_error) != 0) return -1;
  DLTensor& t = (*out)->dl_tensor;
  if (g_lie == 2) std::swap(t.strides[0], t.strides[1]);
  for (int32_t i = 0; g_lie == 4 && i < t.ndim; ++i) {
    if (t.shape[i] == 1) t.strides[i] = 12345;  // any stride is compact for an extent of 1
  }
  return 0;
}

// TPEnvAllocTensor checks what every allocator returns (c_api.h): another tensor than the
// one asked for is released and refused, naming both.
void TestAllocatorResultChecked() {
  DLPackManagedTensorAllocator previous = TPEnvSetAllocator(LyingAllocator);
  const int frees_before = g_frees;
  const char* expected[] = {
      "the allocator returned float32[3, 3] strides [3, 1] on cpu:0 for a request of float32[2, 3] on cpu:0 "
      "(row-major compact)",
      "the allocator returned float64[2, 3] strides [3, 1] on cpu:0 for a request of float32[2, 3] on cpu:0 "
      "(row-major compact)",
      "the allocator returned float32[2, 3] strides [1, 3] on cpu:0 for a request of float32[2, 3] on cpu:0 "
      "(row-major compact)",
      "the allocator returned float32[2, 3] strides [3, 1] on cuda:0 for a request of float32[2, 3] on cpu:0 "
      "(row-major compact)",
  };
  for (g_lie = 0; g_lie < 4; ++g_lie) {
    Caught c = Catch([] { tp::Tensor::FromEnvAlloc({2, 3}, tp::kFloat32, tp::kCPU); });
    EXPECT(c.kind == "RuntimeError" && c.message == expected[g_lie]);
  }
  EXPECT(g_frees == frees_before + 4);  // every refused tensor was released
  // Strides of extent-1 dimensions are free; a strided request's strides are the allocator's.
  g_lie = 4;
  EXPECT(tp::Tensor::FromEnvAlloc({1, 3}, tp::kFloat32, tp::kCPU).stride(0) == 12345);
  g_lie = 2;
  Caught c = Catch([] { tp::Tensor::FromEnvAlloc({2, 3}, {3, 1}, tp::kFloat32, tp::kCPU); });
  EXPECT(c.kind == "ValueError" && Contains(c.message, "could not honour strides [3, 1]"));
  TPEnvSetAllocator(previous);
}

// Lent tensors (c_api.h): requests get them in order, checked against each; what does not
// match, and a request past the last one, goes to `refuse`; lends nest and restore.
struct TestLent : TPLentTensors {
  int refused = 0;
};
int RefuseForTest(TPLentTensors* self, const DLTensor* request) {
  auto* lent = static_cast<TestLent*>(self);
  ++lent->refused;
  TPErrorSet("ValueError", ("refused request " + std::to_string(lent->next) + " of " +
                            std::to_string(request->ndim) + " dimension(s)").c_str());
  return -1;
}

void TestLentTensors() {
  float a[6], b[4];
  int64_t a_shape[2] = {2, 3}, a_strides[2] = {3, 1}, b_shape[1] = {4}, b_strides[1] = {1};
  unsigned char scratch[2][TENSORPLUG_LENT_SCRATCH_BYTES] alignas(void*);
  DLManagedTensorVersioned tensors[2] = {};
  tensors[0].dl_tensor = DLTensor{a, tp::kCPU, 2, tp::kFloat32, a_shape, a_strides, 0};
  tensors[1].dl_tensor = DLTensor{b, tp::kCPU, 1, tp::kInt32, b_shape, b_strides, 0};
  for (int k = 0; k < 2; ++k) {
    tensors[k].version = {DLPACK_MAJOR_VERSION, DLPACK_MINOR_VERSION};
    tensors[k].manager_ctx = scratch[k];
    tensors[k].deleter = TPLentTensorDeleter;
  }
  TestLent lent;
  static_cast<TPLentTensors&>(lent) = TPLentTensors{tensors, 2, 0, RefuseForTest, nullptr, nullptr};
  DLPackManagedTensorAllocator before = TPEnvSetAllocator(CountingAllocator);
  TPEnvLend(&lent);
  EXPECT(TPEnvGetAllocator() == TPLentAllocator);
  {
    // A mismatch is refused and hands nothing out; the match then gets the tensor itself.
    Caught c = Catch([] { tp::Tensor::FromEnvAlloc({3, 2}, tp::kFloat32, tp::kCPU); });
    EXPECT(c.kind == "ValueError" && c.message == "refused request 0 of 2 dimension(s)" && lent.refused == 1);
    tp::Tensor first = tp::Tensor::FromEnvAlloc({2, 3}, tp::kFloat32, tp::kCPU);
    EXPECT(first.data_ptr() == a && first.use_count() == 1);
    {
      tp::Tensor copy = first;  // the count lives in the lent scratch bytes
      EXPECT(first.use_count() == 2);
    }
    // An allocator bound inside the lend (a framework call in the kernel) serves its own
    // requests, and the lend goes on when it is restored.
    const int allocs = g_allocs;
    DLPackManagedTensorAllocator inner = TPEnvSetAllocator(CountingAllocator);
    EXPECT(inner == TPLentAllocator);
    EXPECT(tp::Tensor::FromEnvAlloc({4}, tp::kInt32, tp::kCPU).data_ptr() != b && g_allocs == allocs + 1);
    TPEnvSetAllocator(inner);
    // A nested lend of nothing refuses everything, and restores the outer one.
    TestLent none;
    static_cast<TPLentTensors&>(none) = TPLentTensors{nullptr, 0, 0, RefuseForTest, nullptr, nullptr};
    TPEnvLend(&none);
    c = Catch([] { tp::Tensor::FromEnvAlloc({4}, tp::kInt32, tp::kCPU); });
    EXPECT(c.kind == "ValueError" && none.refused == 1 && lent.refused == 1);
    TPEnvUnlend(&none);
    tp::Tensor second = tp::Tensor::FromEnvAlloc({4}, tp::kInt32, tp::kCPU);
    EXPECT(second.data_ptr() == b && lent.next == 2);
    c = Catch([] { tp::Tensor::FromEnvAlloc({4}, tp::kInt32, tp::kCPU); });
    EXPECT(c.message == "refused request 2 of 1 dimension(s)" && lent.refused == 2);
    // Called as a plain allocator, it reports through set_error.
    lent.next = 1;
    DLTensor request{nullptr, tp::kCPU, 1, tp::kInt32, b_shape, nullptr, 0};
    DLManagedTensorVersioned* out = nullptr;
    std::string reported;
    auto record = [](void* ctx, const char*, const char* message) { *static_cast<std::string*>(ctx) = message; };
    EXPECT(TPLentAllocator(&request, &out, &reported, record) == 0 && out == &tensors[1]);
    EXPECT(TPLentAllocator(&request, &out, &reported, record) == -1 && reported == "refused request 2 of 1 dimension(s)");
  }
  TPEnvUnlend(&lent);
  EXPECT(TPEnvGetAllocator() == CountingAllocator);
  TPEnvSetAllocator(before);
  // TPLentAllocator bound by hand, with nothing lent: an error, not a crash.
  before = TPEnvSetAllocator(TPLentAllocator);
  Caught c = Catch([] { tp::Tensor::FromEnvAlloc({4}, tp::kInt32, tp::kCPU); });
  EXPECT(c.kind == "RuntimeError" && Contains(c.message, "no tensors are lent"));
  TPEnvSetAllocator(before);
}

int g_deleted = 0;

void TestOwnership() {
  tp::Tensor t = tp::Tensor::FromEnvAlloc({8}, tp::kInt32, tp::kCPU);
  EXPECT(t.use_count() == 1);
  {
    tp::Tensor copy = t;
    EXPECT(t.use_count() == 2 && copy.data_ptr() == t.data_ptr());
    tp::Tensor moved = std::move(copy);
    EXPECT(!copy.defined() && t.use_count() == 2);
  }
  EXPECT(t.use_count() == 1);

  // ToDLPackVersioned holds one reference until its deleter runs.
  DLManagedTensorVersioned* exported = t.ToDLPackVersioned();
  EXPECT(t.use_count() == 2 && exported->dl_tensor.data == t.dltensor()->data);
  tp::Tensor back = tp::Tensor::FromDLPackVersioned(exported);
  EXPECT(back.data_ptr() == t.data_ptr() && t.use_count() == 2);
  back = tp::Tensor();
  EXPECT(t.use_count() == 1);

  // release() of the only reference hands over the managed tensor itself.
  const DLTensor* before = t.dltensor();
  DLManagedTensorVersioned* released = t.release();
  EXPECT(!t.defined() && &released->dl_tensor == before);
  t = tp::Tensor::FromDLPackVersioned(released);

  // A Tensor parameter takes ownership of the kTPTensor argument it is passed.
  tp::Function keep = tp::Function::FromTyped([](tp::Tensor x) { return x; }, "keep", {"x"});
  tp::Tensor same = keep(t).cast<tp::Tensor>();
  EXPECT(same.data_ptr() == t.data_ptr() && t.use_count() == 2);
  same = tp::Tensor();
  EXPECT(t.use_count() == 1);
  // ... and a view cannot stand in for an owning tensor.
  Caught c = Catch([&] { keep(t.view()); });
  EXPECT(c.kind == "TypeError" && c.message == "keep() argument 1 'x': expected an owning tensor, got tensor view");
  // Tensors passed to a failing call are released too.
  Catch([&] { keep(t, 1); });
  EXPECT(t.use_count() == 1);

  // A legacy DLManagedTensor with NULL strides gets compact strides.
  static int64_t shape[2] = {2, 3};
  static float data[6] = {0, 1, 2, 3, 4, 5};
  auto* legacy = new DLManagedTensor{};
  legacy->dl_tensor = DLTensor{data, tp::kCPU, 2, tp::kFloat32, shape, nullptr, 0};
  legacy->deleter = [](DLManagedTensor* self) {
    ++g_deleted;
    delete self;
  };
  {
    tp::Tensor wrapped = tp::Tensor::FromDLPack(legacy);
    EXPECT(wrapped.strides().size() == 2 && wrapped.strides()[0] == 3 && wrapped.strides()[1] == 1);
    EXPECT(wrapped.data_ptr<float>()[4] == 4.0f && g_deleted == 0);
  }
  EXPECT(g_deleted == 1);

  // Read-only tensors refuse mutable access.
  auto* managed = new DLManagedTensorVersioned{};
  managed->version = {DLPACK_MAJOR_VERSION, DLPACK_MINOR_VERSION};
  managed->flags = DLPACK_FLAG_BITMASK_READ_ONLY;
  managed->dl_tensor = DLTensor{data, tp::kCPU, 1, tp::kFloat32, shape, nullptr, 0};
  managed->deleter = [](DLManagedTensorVersioned* self) {
    ++g_deleted;
    delete self;
  };
  {
    tp::Tensor ro = tp::Tensor::FromDLPackVersioned(managed);
    EXPECT(ro.is_read_only() && ro.view().is_read_only() && ro.stride(0) == 1);
    c = Catch([&] { ro.mutable_data_ptr(); });
    EXPECT(c.kind == "ValueError" && c.message == "tensor is read-only");
    DLManagedTensorVersioned* again = ro.ToDLPackVersioned();
    EXPECT((again->flags & DLPACK_FLAG_BITMASK_READ_ONLY) != 0);
    again->deleter(again);
  }
  EXPECT(g_deleted == 2);

  // An unsupported DLPack major version is refused, and the tensor released.
  managed = new DLManagedTensorVersioned{};
  managed->version = {DLPACK_MAJOR_VERSION + 1, 0};
  managed->dl_tensor = DLTensor{data, tp::kCPU, 1, tp::kFloat32, shape, nullptr, 0};
  managed->deleter = [](DLManagedTensorVersioned* self) {
    ++g_deleted;
    delete self;
  };
  c = Catch([&] { tp::Tensor::FromDLPackVersioned(managed); });
  EXPECT(c.kind == "ValueError" && Contains(c.message, "unsupported DLPack version"));
  EXPECT(g_deleted == 3);
}

struct CountingNDAlloc {
  int* frees;
  void AllocData(DLTensor* tensor, float fill) {
    const int64_t n = tensor->shape[0];
    float* data = static_cast<float*>(std::malloc(static_cast<size_t>(n) * sizeof(float)));
    for (int64_t i = 0; i < n; ++i) data[i] = fill;
    tensor->data = data;
  }
  void FreeData(DLTensor* tensor) {
    ++*frees;
    std::free(tensor->data);
  }
};

// Counts the requests and refuses each (allocates nothing, whatever the shape).
struct RefusingNDAlloc {
  int* asked;
  void AllocData(DLTensor*) {
    ++*asked;
    TENSORPLUG_THROW(RuntimeError) << "refused";
  }
  void FreeData(DLTensor*) {}
};

void TestNDAlloc() {
  int frees = 0;
  {
    tp::Tensor t = tp::Tensor::FromNDAlloc(CountingNDAlloc{&frees}, {4}, tp::kFloat32, tp::kCPU, 2.5f);
    EXPECT(t.data_ptr<float>()[3] == 2.5f && t.strides()[0] == 1);
    tp::Tensor copy = t;
    t = tp::Tensor();
    EXPECT(frees == 0);
    DLManagedTensorVersioned* exported = copy.ToDLPackVersioned();
    copy = tp::Tensor();
    EXPECT(frees == 0);  // the export still holds a reference
    exported->deleter(exported);
    EXPECT(frees == 1);
  }
  EXPECT(frees == 1);
  // An element count past 2^63 - 1 (2^32 x 2^32 wraps to 0) never reaches AllocData.
  const int64_t p = 1;
  int asked = 0;
  Caught c = Catch([&] { tp::Tensor::FromNDAlloc(RefusingNDAlloc{&asked}, {p << 32, p << 32}, tp::kFloat32, tp::kCPU); });
  EXPECT(asked == 0 && c.kind == "MemoryError" &&
         c.message == "FromNDAlloc: shape [4294967296, 4294967296] has more than 2^63 - 1 elements (element counts "
                      "and strides are int64)");
  c = Catch([&] { tp::Tensor::FromNDAlloc(RefusingNDAlloc{&asked}, {0, p << 62, p << 62}, tp::kFloat32, tp::kCPU); });
  EXPECT(asked == 1 && c.kind == "RuntimeError");  // empty, so the allocator is asked
}

void TestHelpers() {
  EXPECT(tp::DataTypeToString(tp::kFloat32) == "float32");
  EXPECT(tp::DataTypeToString(tp::kBFloat16) == "bfloat16");
  EXPECT(tp::DataTypeToString(tp::kBool) == "bool");
  EXPECT(tp::DataTypeToString(DLDataType{kDLFloat, 32, 4}) == "float32x4");
  EXPECT(tp::DeviceToString(tp::kCPU) == "cpu:0");
  EXPECT(tp::DeviceToString(tp::CUDADevice(3)) == "cuda:3");
  EXPECT(tp::DataTypeOf<int64_t>() == tp::kInt64 && tp::DataTypeOf<uint8_t>() == tp::kUInt8);

  for (float v : {0.0f, 1.0f, -2.5f, 65504.0f, 0.000061035156f, 5.9604645e-08f}) {
    EXPECT(static_cast<float>(tp::Half(v)) == v);
  }
  EXPECT(tp::Half(1.0f).bits == 0x3c00 && tp::Half(65520.0f).bits == 0x7c00);
  EXPECT(tp::Half(1.0f + 1.0f / 2048).bits == 0x3c00);  // a tie rounds to even
  EXPECT(static_cast<float>(tp::BFloat16(3.0f)) == 3.0f && tp::BFloat16(1.0f).bits == 0x3f80);

  auto dispatch_size = [](DLDataType dtype) {
    return TENSORPLUG_DISPATCH_ALL_TYPES_AND_HALF(dtype, "test", [&] {
      return static_cast<int>(sizeof(scalar_t));
    });
  };
  EXPECT(dispatch_size(tp::kFloat64) == 8 && dispatch_size(tp::kFloat16) == 2);
  EXPECT(dispatch_size(tp::kBool) == 1);
  Caught c = Catch([&] { dispatch_size(tp::kComplex64); });
  EXPECT(c.kind == "TypeError" && c.message == "unsupported dtype complex64 for test");
}

}  // namespace

int main() {
  try {
    TestGlobalFunctions();
    TestErrors();
    TestStreams();
    TestStorage();
    TestEnvAlloc();
    TestDefaultAllocatorLimits();
    TestOverflowingShapes();
    TestBoundAllocator();
    TestAllocatorResultChecked();
    TestLentTensors();
    TestOwnership();
    TestNDAlloc();
    TestHelpers();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "runtime_test: unexpected exception after %d checks: %s\n", g_checks, e.what());
    return 1;
  }
  std::printf("runtime_test: %d checks passed\n", g_checks);
  return 0;
}
