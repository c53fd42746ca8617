// Provider storage: typed values under string keys (tensor, function, string, number,
// opaque pointer with a deleter), an atomic get-or-create, and per-device workspaces.
//
// Lifetime: values are destroyed when replaced, erased, or at process exit. Under Python the
// exit cleanup runs from Python's atexit (tensorplug/storage.py calls StorageExitCleanup),
// which runs before any C or C++ exit handler, so every static object a deleter uses is
// still whole, whenever it was constructed. Without Python it is a C atexit handler
// registered again whenever a shared library was loaded since the last registration
// (glibc's dlpi_adds counts loads): handlers run in reverse order of registration, so it
// runs before the destructors of the static objects that existed at the last store after a
// load, and after those of statics constructed later (docs/cpp.md says so).
#include <dlfcn.h>
#include <link.h>

#include <atomic>
#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <new>
#include <string>
#include <thread>
#include <vector>

#include "cuda_driver.h"
#include "runtime_internal.h"

using tensorplug::runtime::Fail;

namespace {

// A stored tensor is shared by every reader: each TPEnvStorageGetValue hands out a new
// managed tensor that keeps the stored one alive (also past an erase).
struct SharedTensor {
  std::atomic<int64_t> refs{1};
  DLManagedTensorVersioned* original;
};
void ReleaseShared(SharedTensor* shared) {
  if (shared->refs.fetch_sub(1, std::memory_order_acq_rel) == 1) {
    if (shared->original->deleter) shared->original->deleter(shared->original);
    delete shared;
  }
}
struct TensorReader {
  DLManagedTensorVersioned managed;
  SharedTensor* shared;
};
void DeleteReader(DLManagedTensorVersioned* self) {
  auto* reader = static_cast<TensorReader*>(self->manager_ctx);
  ReleaseShared(reader->shared);
  delete reader;
}

struct Entry {
  TPAny value;                         // kTPTensor: v_ptr is the SharedTensor*
  TPStorageDeleter deleter = nullptr;  // kTPOpaquePtr only
};

void Destroy(Entry* entry) {
  if (entry->value.type_index == kTPTensor) {
    ReleaseShared(static_cast<SharedTensor*>(entry->value.v_ptr));
  } else if (entry->value.type_index == kTPOpaquePtr) {
    if (entry->deleter) entry->deleter(entry->value.v_ptr);
  } else {
    TPAnyRelease(&entry->value);
  }
  entry->value.type_index = kTPNone;
}

struct Store {
  std::mutex mutex;
  std::condition_variable created;  // signalled when a get-or-create finishes
  std::map<std::string, Entry> entries;
  std::map<std::string, std::thread::id> creating;  // keys whose create() is running
  bool exiting = false;
  unsigned long long registered_adds = 0;  // dlpi_adds when the exit cleanup was last registered
};
// Leaked on purpose: the exit cleanup runs from atexit handlers, after which other static
// destructors (and late threads) may still touch the store.
Store& TheStore() {
  static Store* store = new Store;
  return *store;
}

void CleanupAtExit() {
  Store& store = TheStore();
  std::map<std::string, Entry> entries;
  {
    std::lock_guard<std::mutex> lock(store.mutex);
    store.exiting = true;
    entries.swap(store.entries);
  }
  for (auto& item : entries) Destroy(&item.second);
}

}  // namespace

void tensorplug::runtime::StorageExitCleanup() { CleanupAtExit(); }

namespace {

int ReadAdds(struct dl_phdr_info* info, size_t, void* out) {
  *static_cast<unsigned long long*>(out) = info->dlpi_adds;
  return 1;  // the first object carries the process-wide counter
}

// With the store locked: make sure an exit cleanup runs before the destructors of every
// library loaded so far.
void RegisterCleanupLocked(Store& store) {
  unsigned long long adds = 0;
  dl_iterate_phdr(ReadAdds, &adds);
  if (store.registered_adds != 0 && adds == store.registered_adds) return;
  if (std::atexit(CleanupAtExit) == 0) store.registered_adds = adds;
}

// Turn `value` into a stored entry (taking what it owns); the error names `where`.
int MakeEntry(const char* where, TPAny* value, TPStorageDeleter deleter, Entry* out) {
  TPAny v = *value;
  value->type_index = kTPNone;
  value->v_int64 = 0;
  out->value = v;
  out->value.flags = 0;
  out->deleter = nullptr;
  auto refuse = [&](const std::string& why) {
    TPAnyRelease(&v);
    return Fail("TypeError", std::string(where) + ": " + why);
  };
  if (deleter && v.type_index != kTPOpaquePtr) {
    return refuse("a deleter is only for an opaque pointer (kTPOpaquePtr) value");
  }
  switch (v.type_index) {
    case kTPInt: case kTPFloat: case kTPBool: case kTPDevice: case kTPDataType: case kTPStr: case kTPFunction:
      return 0;
    case kTPHandle:
      if (!v.v_handle) return refuse("the handle is NULL");
      return 0;
    case kTPOpaquePtr:
      out->deleter = deleter;
      return 0;
    case kTPRawStr: {
      TPString* s = TPStringCreate(v.v_c_str, std::strlen(v.v_c_str));
      if (!s) return Fail("MemoryError", std::string(where) + ": out of memory");
      out->value.type_index = kTPStr;
      out->value.v_str = s;
      return 0;
    }
    case kTPTensor: {
      if (!v.v_tensor) return refuse("the tensor is NULL");
      auto* shared = new (std::nothrow) SharedTensor;
      if (!shared) {
        TPAnyRelease(&v);
        return Fail("MemoryError", std::string(where) + ": out of memory");
      }
      shared->original = v.v_tensor;
      out->value.v_ptr = shared;
      return 0;
    }
    case kTPNone:
      return refuse("None cannot be stored (erase the key instead)");
    case kTPDLTensorPtr:
      return refuse("a borrowed tensor view (kTPDLTensorPtr) cannot be stored; store an owning tensor (kTPTensor)");
    case kTPTuple:
      return refuse("a tuple cannot be stored; store its items under keys of their own");
    default:
      return refuse("unknown type index " + std::to_string(v.type_index));
  }
}

// A value the caller owns, read from a stored entry (store locked).
int ReadEntry(const Entry& entry, TPAny* out, TPStorageDeleter* deleter) {
  *out = entry.value;
  if (deleter) *deleter = entry.deleter;
  switch (entry.value.type_index) {
    case kTPStr:
      out->v_str = TPStringCreate(entry.value.v_str->data, entry.value.v_str->size);
      if (!out->v_str) {
        out->type_index = kTPNone;
        return Fail("MemoryError", "TPEnvStorageGetValue: out of memory");
      }
      return 0;
    case kTPFunction:
      TPFunctionRetain(entry.value.v_func);
      return 0;
    case kTPHandle:
      TPHandleRetain(entry.value.v_handle);
      return 0;
    case kTPTensor: {
      auto* shared = static_cast<SharedTensor*>(entry.value.v_ptr);
      auto* reader = new (std::nothrow) TensorReader;
      if (!reader) {
        out->type_index = kTPNone;
        return Fail("MemoryError", "TPEnvStorageGetValue: out of memory");
      }
      shared->refs.fetch_add(1, std::memory_order_relaxed);
      reader->shared = shared;
      reader->managed = *shared->original;  // dl_tensor's shape/strides stay the original's
      reader->managed.manager_ctx = reader;
      reader->managed.deleter = DeleteReader;
      out->v_tensor = &reader->managed;
      return 0;
    }
    default:
      return 0;
  }
}

int Insert(const char* where, const char* key, TPAny* value, TPStorageDeleter deleter) {
  Entry entry;
  if (MakeEntry(where, value, deleter, &entry) != 0) return -1;
  Store& store = TheStore();
  Entry old;
  old.value.type_index = kTPNone;
  bool exiting = false;
  {
    std::lock_guard<std::mutex> lock(store.mutex);
    exiting = store.exiting;
  }
  if (exiting) {  // after the exit cleanup nothing would free it: destroy it now instead
    Destroy(&entry);
    return 0;
  }
  {
    std::lock_guard<std::mutex> lock(store.mutex);
    RegisterCleanupLocked(store);
    auto it = store.entries.find(key);
    if (it != store.entries.end()) {
      old = it->second;
      it->second = entry;
    } else {
      store.entries.emplace(key, entry);
    }
  }
  // Outside the lock: a deleter may use the storage. Storing the same pointer again keeps it.
  const bool same_pointer = old.value.type_index == kTPOpaquePtr && entry.value.type_index == kTPOpaquePtr &&
                            old.value.v_ptr == entry.value.v_ptr;
  if (!same_pointer) Destroy(&old);
  return 0;
}

}  // namespace

extern "C" {

int TPEnvStorageSetValue(const char* key, TPAny* value, TPStorageDeleter deleter) {
  if (!value) return Fail("ValueError", "TPEnvStorageSetValue: value is NULL");
  if (!key) {
    TPAnyRelease(value);
    return Fail("ValueError", "TPEnvStorageSetValue: key is NULL");
  }
  try {
    return Insert("TPEnvStorageSetValue", key, value, deleter);
  } catch (...) {
    return Fail("MemoryError", "TPEnvStorageSetValue: out of memory");
  }
}

int TPEnvStorageGetValue(const char* key, TPAny* out, TPStorageDeleter* deleter) {
  if (!out) return Fail("ValueError", "TPEnvStorageGetValue: out is NULL");
  out->type_index = kTPNone;
  out->flags = 0;
  out->v_int64 = 0;
  if (deleter) *deleter = nullptr;
  if (!key) return Fail("ValueError", "TPEnvStorageGetValue: key is NULL");
  Store& store = TheStore();
  try {
    std::lock_guard<std::mutex> lock(store.mutex);
    auto it = store.entries.find(key);
    if (it == store.entries.end()) return 0;
    return ReadEntry(it->second, out, deleter);
  } catch (...) {
    return Fail("MemoryError", "TPEnvStorageGetValue: out of memory");
  }
}

int TPEnvStorageGetOrCreate(const char* key, TPStorageCreate create, void* ctx, TPAny* out) {
  if (!out) return Fail("ValueError", "TPEnvStorageGetOrCreate: out is NULL");
  out->type_index = kTPNone;
  out->flags = 0;
  out->v_int64 = 0;
  if (!key || !create) return Fail("ValueError", "TPEnvStorageGetOrCreate: key and create must not be NULL");
  Store& store = TheStore();
  try {
    std::unique_lock<std::mutex> lock(store.mutex);
    for (;;) {
      auto it = store.entries.find(key);
      if (it != store.entries.end()) return ReadEntry(it->second, out, nullptr);
      auto busy = store.creating.find(key);
      if (busy == store.creating.end()) break;
      if (busy->second == std::this_thread::get_id()) {
        return Fail("RuntimeError", std::string("TPEnvStorageGetOrCreate: the value of '") + key +
                                        "' is being created by this thread (create() asked for its own key)");
      }
      store.created.wait(lock);
    }
    store.creating.emplace(key, std::this_thread::get_id());
    lock.unlock();
    // create() runs unlocked (it may use the storage for other keys); racing callers of
    // this key wait above, and one of them creates it if this create() fails.
    TPAny value{};
    value.type_index = kTPNone;
    TPStorageDeleter deleter = nullptr;
    int rc = create(ctx, &value, &deleter);
    Entry entry;
    if (rc == 0) rc = MakeEntry("TPEnvStorageGetOrCreate", &value, deleter, &entry);
    else TPAnyRelease(&value);
    lock.lock();
    store.creating.erase(key);
    store.created.notify_all();
    if (rc != 0) return -1;
    if (store.exiting) {
      lock.unlock();
      Destroy(&entry);
      return Fail("RuntimeError", "TPEnvStorageGetOrCreate: the process is exiting");
    }
    RegisterCleanupLocked(store);
    auto inserted = store.entries.emplace(key, entry);
    if (!inserted.second) {  // a TPEnvStorageSetValue won the race: keep its value
      int read = ReadEntry(inserted.first->second, out, nullptr);
      lock.unlock();
      Destroy(&entry);
      return read;
    }
    return ReadEntry(inserted.first->second, out, nullptr);
  } catch (...) {
    return Fail("MemoryError", "TPEnvStorageGetOrCreate: out of memory");
  }
}

int TPEnvStorageContains(const char* key) {
  if (!key) return 0;
  Store& store = TheStore();
  std::lock_guard<std::mutex> lock(store.mutex);
  return store.entries.count(key) ? 1 : 0;
}

int TPEnvStorageListKeys(void (*visit)(void* ctx, const char* key), void* ctx) {
  std::vector<std::string> keys;
  try {
    Store& store = TheStore();
    std::lock_guard<std::mutex> lock(store.mutex);
    for (const auto& item : store.entries) keys.push_back(item.first);
  } catch (...) {
    return Fail("MemoryError", "TPEnvStorageListKeys: out of memory");
  }
  for (const auto& key : keys) visit(ctx, key.c_str());  // unlocked: visit may use the storage
  return 0;
}

int TPEnvStorageErase(const char* key) {
  if (!key) return 0;
  Store& store = TheStore();
  Entry old;
  {
    std::lock_guard<std::mutex> lock(store.mutex);
    auto it = store.entries.find(key);
    if (it == store.entries.end()) return 0;
    old = it->second;
    store.entries.erase(it);
  }
  Destroy(&old);
  return 0;
}

// The pointer-only calls of the first storage API: the same store, opaque pointers.
int TPEnvStorageSet(const char* key, void* value, void (*deleter)(void* value)) {
  if (!key) return Fail("ValueError", "storage key must not be NULL");
  TPAny any{};
  any.type_index = kTPOpaquePtr;
  any.v_ptr = value;
  return TPEnvStorageSetValue(key, &any, deleter);
}

void* TPEnvStorageGet(const char* key) {
  if (!key) return nullptr;
  Store& store = TheStore();
  std::lock_guard<std::mutex> lock(store.mutex);
  auto it = store.entries.find(key);
  if (it == store.entries.end() || it->second.value.type_index != kTPOpaquePtr) return nullptr;
  return it->second.value.v_ptr;
}

}  // extern "C"

// ------------------------------------------------------------------ workspaces ----
namespace {

constexpr size_t kWorkspaceGranule = 256;  // sizes are rounded up to this

struct CPUWorkspace {
  void* data = nullptr;
  size_t capacity = 0;
  ~CPUWorkspace() { std::free(data); }
};

// CUDA workspaces belong to a (device, stream) pair: work queued on one stream runs in
// order, so the buffer is never used by two kernels at once. Never freed at exit (the
// driver may be gone by then; the process's memory goes with it).
struct CUDAWorkspace {
  tensorplug::runtime::CUdeviceptr data = 0;
  size_t capacity = 0;
};
struct CUDAKey {
  int32_t device_id;
  void* stream;
  bool operator<(const CUDAKey& o) const { return device_id != o.device_id ? device_id < o.device_id : stream < o.stream; }
};
std::mutex& CUDAWorkspaceMutex() {
  static auto* m = new std::mutex;
  return *m;
}
std::map<CUDAKey, CUDAWorkspace>& CUDAWorkspaces() {
  static auto* w = new std::map<CUDAKey, CUDAWorkspace>;
  return *w;
}

int CUDAWorkspaceGet(int32_t device_id, size_t nbytes, void** out) {
  using namespace tensorplug::runtime;
  std::string error;
  const CudaDriver* driver = GetCudaDriver(&error);
  if (!driver) return Fail("RuntimeError", "TPEnvWorkspace: " + error);
  CudaContextScope scope(driver, device_id, &error);
  if (!scope.ok()) return Fail("RuntimeError", "TPEnvWorkspace: " + error);
  void* stream = TPEnvGetStream(kDLCUDA, device_id);
  std::lock_guard<std::mutex> lock(CUDAWorkspaceMutex());
  CUDAWorkspace& ws = CUDAWorkspaces()[CUDAKey{device_id, stream}];
  if (ws.capacity < nbytes || ws.data == 0) {
    const size_t capacity = (nbytes + kWorkspaceGranule - 1) / kWorkspaceGranule * kWorkspaceGranule + (nbytes == 0) * kWorkspaceGranule;
    if (ws.data) driver->cuMemFree(ws.data);  // synchronizes: earlier kernels are done with it
    ws = CUDAWorkspace{};
    CUresult rc = driver->cuMemAlloc(&ws.data, capacity);
    if (rc != 0) {
      return Fail("MemoryError", "TPEnvWorkspace: cannot allocate " + std::to_string(capacity) + " bytes on cuda:" +
                                     std::to_string(device_id) + ": " + CudaErrorText(driver, "cuMemAlloc", rc));
    }
    ws.capacity = capacity;
  }
  CUresult rc = driver->cuMemsetD8Async(ws.data, 0, nbytes, static_cast<CUstream>(stream));
  if (rc != 0) return Fail("RuntimeError", "TPEnvWorkspace: " + CudaErrorText(driver, "cuMemsetD8Async", rc));
  *out = reinterpret_cast<void*>(ws.data);
  return 0;
}

}  // namespace

extern "C" int TPEnvWorkspace(int32_t device_type, int32_t device_id, size_t nbytes, void** out) {
  if (!out) return Fail("ValueError", "TPEnvWorkspace: out is NULL");
  *out = nullptr;
  try {
    if (device_type == kDLCUDA) return CUDAWorkspaceGet(device_id, nbytes, out);
    if (device_type != kDLCPU) {
      return Fail("ValueError", "TPEnvWorkspace: device type " + std::to_string(device_type) +
                                    " has no workspace (cpu and cuda do)");
    }
    // One CPU workspace per thread: kernels on two threads never share one.
    static thread_local CPUWorkspace ws;
    if (ws.capacity < nbytes || ws.data == nullptr) {
      size_t capacity = 0;
      if (__builtin_add_overflow(nbytes, kWorkspaceGranule, &capacity)) {
        return Fail("MemoryError", "TPEnvWorkspace: cannot allocate " + std::to_string(nbytes) + " bytes on cpu");
      }
      capacity = capacity / kWorkspaceGranule * kWorkspaceGranule;
      void* data = nullptr;
      if (posix_memalign(&data, 64, capacity) != 0) {
        return Fail("MemoryError", "TPEnvWorkspace: cannot allocate " + std::to_string(nbytes) + " bytes on cpu");
      }
      std::free(ws.data);
      ws.data = data;
      ws.capacity = capacity;
    }
    std::memset(ws.data, 0, nbytes);
    *out = ws.data;
    return 0;
  } catch (...) {
    return Fail("MemoryError", "TPEnvWorkspace: out of memory");
  }
}
