// The environment a kernel runs in: per-thread streams and allocator (storage: storage.cc).
#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <new>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "runtime_internal.h"
#include "tensorplug/dtype.h"
#include "tensorplug/tensor.h"

using tensorplug::runtime::Fail;
using tensorplug::runtime::ThreadEnv;
using tensorplug::runtime::tls_env;

namespace tensorplug::runtime {
// A thread sees few devices, so a short array scanned linearly beats a hash map.
struct StreamEntry {
  int32_t device_type;
  int32_t device_id;
  void* stream;
};
struct StreamTable {
  std::vector<StreamEntry> entries;
};
__thread ThreadEnv tls_env TP_FAST_TLS = {nullptr, nullptr, nullptr};
}  // namespace tensorplug::runtime

using tensorplug::runtime::StreamEntry;
using tensorplug::runtime::StreamTable;

namespace {

// ---- default CPU allocator: one malloc holding the header, shape, strides and data ----
constexpr size_t kDataAlignment = 64;

void FreeCPUTensor(DLManagedTensorVersioned* self) { std::free(self->manager_ctx); }

// The allocators' error callback: records the error for the thread, and marks `reported`
// (a bool*, or NULL) so that TPEnvAllocTensor needs no TPErrorClear before each call.
void SetErrorToThread(void* reported, const char* kind, const char* message) {
  TPErrorSet(kind, message);
  if (reported != nullptr) *static_cast<bool*>(reported) = true;
}

// Bytes of a tensor of `prototype`'s shape and dtype, checked: false when the element
// count passes 2^63 - 1 (numel() and every stride are int64) or the byte count does not fit
// in 64 bits. Nothing is ever allocated from a wrapped-around size: 2^32 x 2^32 elements
// wrap to 0, which must not read as an empty tensor (only a zero extent makes one).
bool CheckedNumBytes(const DLTensor& prototype, uint64_t* nbytes) {
  uint64_t numel = 1;
  bool overflow = false;
  bool empty = false;
  for (int32_t i = 0; i < prototype.ndim; ++i) {
    const uint64_t extent = static_cast<uint64_t>(prototype.shape[i]);
    empty |= extent == 0;
    overflow |= __builtin_mul_overflow(numel, extent, &numel);
  }
  if (empty) {  // an empty tensor costs nothing, whatever its other extents
    *nbytes = 0;
    return true;
  }
  if (overflow || numel > uint64_t(INT64_MAX)) return false;
  // Whole bits, then bytes rounded up (sub-byte dtypes pack): 128 bits hold any product of
  // a 63-bit count and the at most 24 bits of bits x lanes.
  const unsigned __int128 bits = static_cast<unsigned __int128>(numel) * prototype.dtype.bits * prototype.dtype.lanes;
  const unsigned __int128 bytes = (bits + 7) / 8;
  if (bytes > UINT64_MAX) return false;
  *nbytes = static_cast<uint64_t>(bytes);
  return true;
}

// Whether the element count of a non-empty `prototype` passes 2^63 - 1 (for the message).
bool TooManyElements(const DLTensor& prototype) {
  uint64_t numel = 1;
  bool overflow = false;
  for (int32_t i = 0; i < prototype.ndim; ++i) {
    if (prototype.shape[i] == 0) return false;
    overflow |= __builtin_mul_overflow(numel, static_cast<uint64_t>(prototype.shape[i]), &numel);
  }
  return overflow || numel > uint64_t(INT64_MAX);
}

// The request itself is malformed (a kernel passing a bad prototype): a ValueError.
const char* CheckPrototype(const DLTensor& prototype) {
  if (prototype.ndim < 0) return "ndim must not be negative";
  if (prototype.ndim > TP_MAX_NDIM) return "too many dimensions (tensorplug supports at most 64)";
  if (prototype.ndim > 0 && prototype.shape == nullptr) return "shape is NULL";
  for (int32_t i = 0; i < prototype.ndim; ++i) {
    if (prototype.shape[i] < 0) return "shape must not contain negative extents";
  }
  // A dtype of no bits would make a non-empty tensor of 0 bytes.
  if (prototype.dtype.bits == 0 || prototype.dtype.lanes == 0) return "the dtype has 0 bits or 0 lanes";
  return nullptr;
}

int DefaultCPUAllocator(DLTensor* prototype, DLManagedTensorVersioned** out, void* error_ctx,
                        void (*set_error)(void*, const char*, const char*)) {
  if (prototype->device.device_type != kDLCPU) {
    set_error(error_ctx, "RuntimeError",
              "no allocator is bound for this device: outside a call from a framework only CPU "
              "tensors can be allocated");
    return -1;
  }
  if (const char* problem = CheckPrototype(*prototype)) {
    set_error(error_ctx, "ValueError", problem);
    return -1;
  }
  const int32_t ndim = prototype->ndim;
  uint64_t nbytes = 0;
  if (!CheckedNumBytes(*prototype, &nbytes)) {
    set_error(error_ctx, "MemoryError", "the size in bytes does not fit in 64 bits");
    return -1;
  }
  const size_t header = sizeof(DLManagedTensorVersioned) + sizeof(int64_t) * 2 * size_t(ndim);
  const size_t data_offset = (header + kDataAlignment - 1) / kDataAlignment * kDataAlignment;
  size_t total = 0;
  void* block = nullptr;
  if (__builtin_add_overflow(data_offset, nbytes, &total) ||
      posix_memalign(&block, kDataAlignment, total) != 0) {
    set_error(error_ctx, "MemoryError", "out of memory");
    return -1;
  }
  auto* managed = static_cast<DLManagedTensorVersioned*>(block);
  auto* shape = reinterpret_cast<int64_t*>(managed + 1);
  int64_t* strides = shape + ndim;
  for (int32_t i = 0; i < ndim; ++i) shape[i] = prototype->shape[i];
  // Fits: the product of the extents was checked.
  tensorplug::detail::FillContiguousStrides(ndim, shape, strides);
  managed->version = {DLPACK_MAJOR_VERSION, DLPACK_MINOR_VERSION};
  managed->manager_ctx = block;
  managed->deleter = FreeCPUTensor;
  managed->flags = 0;
  managed->dl_tensor.data = static_cast<char*>(block) + data_offset;
  managed->dl_tensor.device = prototype->device;
  managed->dl_tensor.ndim = ndim;
  managed->dl_tensor.dtype = prototype->dtype;
  managed->dl_tensor.shape = ndim ? shape : nullptr;
  managed->dl_tensor.strides = ndim ? strides : nullptr;
  managed->dl_tensor.byte_offset = 0;
  *out = managed;
  return 0;
}

// "cpu:0", "cuda:1", ... for error messages.
std::string DeviceName(DLDevice device) {
  std::string name;
  switch (device.device_type) {
#define TP_X(type, type_name) \
  case type: name = type_name; break;
    TP_DEVICE_TYPES(TP_X)
#undef TP_X
    default: name = "device" + std::to_string(int(device.device_type)); break;
  }
  return name + ":" + std::to_string(device.device_id);
}

// TPEnvAllocTensor's failures, out of line (the success path stays short): a malformed
// request (`problem`), or what `alloc` refused (`reported`: it recorded an error). `alloc`
// is nullptr when no allocator was asked: a request of more than 2^63 - 1 bytes.
__attribute__((noinline)) int ReportAllocFailure(DLTensor* prototype, DLPackManagedTensorAllocator alloc,
                                                 const char* problem, bool reported) {
  try {  // a C entry point: std::string may throw std::bad_alloc
    if (problem != nullptr) return Fail("ValueError", std::string("cannot allocate a tensor: ") + problem);
    const bool addressable = alloc != nullptr;  // nullptr: refused for its size, before any allocator
    const bool too_many_elements = !addressable && TooManyElements(*prototype);
    if (too_many_elements) {
      TPErrorSet("MemoryError", "no tensor can index them (element counts and strides are int64)");
      reported = true;
    } else if (!addressable) {
      TPErrorSet("MemoryError", "more than 2^63 - 1 bytes, which no allocator can address");
      reported = true;
    }
    // Whatever the framework said, the caller learns what was asked for and where. Errors
    // about the request itself keep their kind; so does an allocator's own kind when an
    // empty tensor fails too. The rest is out-of-memory from the caller's view.
    const char* kind_ptr = "MemoryError";
    const char* why_ptr = "the allocator returned no tensor";
    if (reported) TPErrorGet(&kind_ptr, &why_ptr);
    const std::string kind = kind_ptr;  // copies: the probe below records errors
    // The first line only: frameworks append backtraces (torch: "\nException raised from ...").
    const std::string why(why_ptr, std::strcspn(why_ptr, "\n"));
    bool request_error = false;
    for (const char* k : {"TypeError", "ValueError", "BufferError", "NotImplementedError", "OverflowError"}) {
      request_error = request_error || kind == k;
    }
    // Frameworks' C allocators report every failure as out-of-memory (torch: "Unsupported
    // code 9" for a float8 it lacks, or a device it was built without, is a MemoryError;
    // paddle names no exception at all): such an answer says nothing about the cause.
    const bool says_nothing = !reported || kind == "MemoryError" ||
                              kind.size() < 5 || kind.compare(kind.size() - 5, 5, "Error") != 0;
    if (!request_error && addressable) {
      // An allocator that can make a one-element tensor of this dtype on this device refuses
      // the size: out of memory. One that cannot refuses the dtype or the device; which one,
      // a one-element float32 tensor there tells, when the allocator itself did not say (an
      // allocator that raised RuntimeError keeps its kind). One element, not none: paddle
      // makes an empty tensor on a device it was built without and fails only on memory.
      auto can_allocate_one = [&](DLDataType dtype) {
        int64_t ones[TP_MAX_NDIM];
        std::fill(ones, ones + TP_MAX_NDIM, int64_t{1});
        DLTensor one = *prototype;
        one.ndim = prototype->ndim > 0 ? prototype->ndim : 1;
        one.shape = ones;
        one.strides = nullptr;
        one.dtype = dtype;
        DLManagedTensorVersioned* probe = nullptr;
        if (alloc(&one, &probe, nullptr, SetErrorToThread) != 0 || probe == nullptr) return false;
        if (probe->deleter) probe->deleter(probe);
        return true;
      };
      if (!can_allocate_one(prototype->dtype)) {
        if (!says_nothing) return Fail(kind.c_str(), "cannot allocate a " +
                                                         tensorplug::DataTypeToString(prototype->dtype) + " tensor on " +
                                                         DeviceName(prototype->device) + ": " + why);
        const DLDataType float32{kDLFloat, 32, 1};
        if (!can_allocate_one(float32)) {
          return Fail("ValueError", "cannot allocate on " + DeviceName(prototype->device) +
                                        ": the allocator refuses this device (even for a one-element float32 tensor): " +
                                        why);
        }
        return Fail("TypeError", "cannot allocate a " + tensorplug::DataTypeToString(prototype->dtype) +
                                     " tensor on " + DeviceName(prototype->device) +
                                     ": the allocator refuses this dtype (even for a one-element tensor): " + why);
      }
    }
    const std::string out_kind = request_error ? kind : "MemoryError";
    std::string shape = "[";
    for (int32_t i = 0; i < prototype->ndim; ++i) shape += (i ? "," : "") + std::to_string(prototype->shape[i]);
    shape += "]";
    uint64_t nbytes = 0;
    const std::string size = too_many_elements                        ? "more than 2^63 - 1 elements"
                             : CheckedNumBytes(*prototype, &nbytes) ? std::to_string(nbytes) + " bytes"
                                                                    : "more than 2^64 bytes";
    const std::string message = "cannot allocate " + size + " (shape " + shape + ") on " +
                                DeviceName(prototype->device) + ": " + why;
    return Fail(out_kind.c_str(), message);
  } catch (...) {
    TPErrorSet("MemoryError", "TPEnvAllocTensor: out of memory while reporting an allocation failure");
    return -1;
  }
}

// Whether an allocator's tensor is what `request` asked for: its dtype, device and shape,
// and row-major compact when the request gave no strides (strides of extent-1 dimensions,
// and of empty tensors, are free). Strided requests are a wish the kernel API checks
// (Tensor::FromEnvAlloc).
inline bool MatchesRequest(const DLTensor& t, const DLTensor& request) {
  const int32_t ndim = request.ndim;
  if (t.ndim != ndim || t.dtype.code != request.dtype.code || t.dtype.bits != request.dtype.bits ||
      t.dtype.lanes != request.dtype.lanes || t.device.device_type != request.device.device_type ||
      t.device.device_id != request.device.device_id || (ndim > 0 && t.shape == nullptr)) {
    return false;
  }
  const bool check_strides = request.strides == nullptr && t.strides != nullptr;
  bool same_shape = true;
  bool compact = true;
  uint64_t expected = 1;  // the request was checked: a non-empty one has fewer than 2^63 items
  for (int32_t i = ndim - 1; i >= 0; --i) {
    const int64_t extent = request.shape[i];
    same_shape &= t.shape[i] == extent;
    compact &= !check_strides || extent == 1 || uint64_t(t.strides[i]) == expected;
    expected *= uint64_t(extent);
  }
  return same_shape && (compact || expected == 0);
}

// An allocator returned another tensor than the one asked for: released, and a RuntimeError.
__attribute__((noinline)) int RefuseMismatch(const DLTensor* request, DLManagedTensorVersioned** out) {
  DLManagedTensorVersioned* got = std::exchange(*out, nullptr);
  try {
    auto describe = [](const DLTensor& t, bool with_strides) {
      std::string text = tensorplug::DataTypeToString(t.dtype) + "[";
      for (int32_t i = 0; t.shape != nullptr && i < t.ndim; ++i) text += (i ? ", " : "") + std::to_string(t.shape[i]);
      text += "]";
      if (with_strides && t.strides != nullptr) {
        text += " strides [";
        for (int32_t i = 0; i < t.ndim; ++i) text += (i ? ", " : "") + std::to_string(t.strides[i]);
        text += "]";
      }
      return text + " on " + DeviceName(t.device);
    };
    const std::string message = "the allocator returned " + describe(got->dl_tensor, true) +
                                " for a request of " + describe(*request, false) +
                                (request->strides == nullptr ? " (row-major compact)" : "");
    if (got->deleter != nullptr) got->deleter(got);
    return Fail("RuntimeError", message);
  } catch (...) {
    if (got->deleter != nullptr) got->deleter(got);
    TPErrorSet("MemoryError", "TPEnvAllocTensor: out of memory while reporting an allocation failure");
    return -1;
  }
}

// The next lent tensor for `request` (c_api.h, TPLentTensors): one compare of the request
// with it, which also validates the request (lent tensors are well formed).
inline int LendNext(const DLTensor* request, DLManagedTensorVersioned** out) {
  TPLentTensors* lent = tls_env.lent;
  if (__builtin_expect(lent == nullptr, 0)) {
    TPErrorSet("RuntimeError", "TPLentAllocator is bound, but no tensors are lent (TPEnvLend)");
    return -1;
  }
  const int32_t k = lent->next;
  if (__builtin_expect(k >= lent->count, 0)) return lent->refuse(lent, request);
  DLManagedTensorVersioned* tensor = &lent->tensors[k];
  const DLTensor& t = tensor->dl_tensor;
  const int32_t ndim = request->ndim;
  // dtype and device compared as words (4 and 8 bytes, no padding).
  uint32_t dtype_asked, dtype_lent;
  uint64_t device_asked, device_lent;
  static_assert(sizeof(DLDataType) == 4 && sizeof(DLDevice) == 8, "DLPack layout");
  std::memcpy(&dtype_asked, &request->dtype, 4);
  std::memcpy(&dtype_lent, &t.dtype, 4);
  std::memcpy(&device_asked, &request->device, 8);
  std::memcpy(&device_lent, &t.device, 8);
  bool same = ndim == t.ndim && dtype_asked == dtype_lent && device_asked == device_lent &&
              (ndim == 0 || request->shape != nullptr);
  if (same && ndim > 0) {
    for (int32_t i = 0; i < ndim; ++i) same &= request->shape[i] == t.shape[i];
    if (const int64_t* strides = request->strides) {
      for (int32_t i = 0; i < ndim; ++i) same &= t.shape[i] == 1 || strides[i] == t.strides[i];  // t is compact
    }
  }
  if (__builtin_expect(!same, 0)) return lent->refuse(lent, request);
  lent->next = k + 1;
  *out = tensor;
  return 0;
}

// TPEnvAllocTensor through the bound allocator (or the default CPU one), out of line: the
// lent path stays a leaf.
__attribute__((noinline)) int AllocThroughAllocator(DLTensor* prototype, DLManagedTensorVersioned** out) {
  if (const char* problem = CheckPrototype(*prototype)) {
    return ReportAllocFailure(prototype, nullptr, problem, false);
  }
  // No allocator can hold more than 2^63 - 1 bytes, and not every framework checks its own
  // size arithmetic (paddle 3.3 wraps 2^64 bytes to an empty block that the kernel would
  // then write): such a request is refused here, before any allocator sees it.
  uint64_t request_bytes = 0;
  if (!CheckedNumBytes(*prototype, &request_bytes) || request_bytes > uint64_t(INT64_MAX)) {
    return ReportAllocFailure(prototype, nullptr, nullptr, false);
  }
  DLPackManagedTensorAllocator alloc = tls_env.allocator ? tls_env.allocator : DefaultCPUAllocator;
  bool reported = false;
  if (alloc(prototype, out, &reported, SetErrorToThread) != 0 || *out == nullptr) {
    *out = nullptr;  // an allocator that failed may have written it
    return ReportAllocFailure(prototype, alloc, nullptr, reported);
  }
  // What kernels rely on (c_api.h), checked once here for every allocator: the tensor asked for.
  if (__builtin_expect(!MatchesRequest((*out)->dl_tensor, *prototype), 0)) return RefuseMismatch(prototype, out);
  return 0;
}

}  // namespace

extern "C" {

void* TPEnvGetStream(int32_t device_type, int32_t device_id) {
  const StreamTable* table = tls_env.streams;
  if (!table) return nullptr;
  for (const StreamEntry& e : table->entries) {
    if (e.device_type == device_type && e.device_id == device_id) return e.stream;
  }
  return nullptr;
}

void* TPEnvSetStream(int32_t device_type, int32_t device_id, void* stream) {
  StreamTable* table = tls_env.streams;
  if (!table) {
    if (stream == nullptr) return nullptr;  // the default needs no entry
    // Freed with the thread: a thread_local owner runs its destructor at thread exit.
    static thread_local std::unique_ptr<StreamTable> owner(new StreamTable);
    table = tls_env.streams = owner.get();
  }
  for (StreamEntry& e : table->entries) {
    if (e.device_type == device_type && e.device_id == device_id) {
      void* previous = e.stream;
      e.stream = stream;
      return previous;
    }
  }
  if (stream != nullptr) table->entries.push_back({device_type, device_id, stream});
  return nullptr;
}

void TPLentTensorDeleter(DLManagedTensorVersioned*) {}

void TPEnvLend(TPLentTensors* lent) {
  lent->previous_allocator = tls_env.allocator;
  lent->previous = tls_env.lent;
  tls_env.allocator = TPLentAllocator;
  tls_env.lent = lent;
}

void TPEnvUnlend(TPLentTensors* lent) {
  tls_env.allocator = lent->previous_allocator;
  tls_env.lent = lent->previous;
}

int TPLentAllocator(DLTensor* prototype, DLManagedTensorVersioned** out, void* error_ctx,
                    void (*set_error)(void* error_ctx, const char* kind, const char* message)) {
  if (prototype == nullptr || out == nullptr) {
    set_error(error_ctx, "ValueError", "TPLentAllocator: prototype or out is NULL");
    return -1;
  }
  if (LendNext(prototype, out) == 0) return 0;
  const char* kind = "RuntimeError";
  const char* message = "TPLentAllocator: refused";
  TPErrorGet(&kind, &message);
  set_error(error_ctx, kind, message);
  return -1;
}

DLPackManagedTensorAllocator TPEnvGetAllocator(void) { return tls_env.allocator; }

DLPackManagedTensorAllocator TPEnvSetAllocator(DLPackManagedTensorAllocator alloc) {
  DLPackManagedTensorAllocator previous = tls_env.allocator;
  tls_env.allocator = alloc;
  return previous;
}

DLPackManagedTensorAllocator* TPEnvAllocatorSlot(void) { return &tls_env.allocator; }

int TPEnvAllocTensor(DLTensor* prototype, DLManagedTensorVersioned** out) {
  if (out == nullptr) return -1;
  *out = nullptr;
  if (prototype == nullptr) {
    TPErrorSet("ValueError", "TPEnvAllocTensor: prototype is NULL");
    return -1;
  }
  // Lent tensors first: the request is checked by matching the next one.
  if (tls_env.allocator == TPLentAllocator) return LendNext(prototype, out);
  return AllocThroughAllocator(prototype, out);
}

}  // extern "C"
