// tvm-ffi functions as tensorplug functions (core/tensorplug/tvm_ffi/__init__.py, docs/migration.md).
//
// Compiled at run time by tensorplug.cpp.load_cdll against tensorplug's public C API (c_api.h)
// and the installed apache-tvm-ffi's headers, linked to both runtimes. Each exported
// `__tvm_ffi_<name>` function of a library built for tvm-ffi (TVMFFISafeCallType) becomes a
// tensorplug function (tensorplug.function_from_pointer on an entry of a slot pool) whose entry converts the TPAny arguments to
// TVMFFIAny values, binds tvm-ffi's environment (allocator, streams) to tensorplug's for the
// call, calls the function, restores the environment, and converts the result or the raised
// error back. No core rebuild: everything here goes through the two projects' C ABIs.
// Over 500 lines: one idea, the conversion between the two conventions, in both directions
// (arguments, environment, results, errors), which must be read side by side.
//
// Arguments, by TPAny tag (the signature chose the tag):
//   kTPDLTensorPtr (view, mview)  -> kTVMFFIDLTensorPtr: the caller's DLTensor, no copy; for
//                                    an ffi::Tensor parameter (hint 't': one declared
//                                    written) a tvm-ffi tensor over it, valid for the call
//   kTPTensor (tensor)            -> kTVMFFITensor: TVMFFITensorFromDLPackVersioned takes the
//                                    moved managed tensor (no copy)
//   kTPArray (views, mviews)      -> an ffi::Array<ffi::Tensor> of non-owning tensors, valid
//                                    for the call
//   kTPIntArray (ints)            -> ffi::Array<int64_t>, or ffi::Shape where the parameter's
//                                    hint is 's' (tvm-ffi's metadata said ffi.Shape)
//   kTPRawStr (str)               -> kTVMFFIRawStr (tvm-ffi converts it to ffi::String)
//   int, float, bool, device, dtype, opaque pointer, None -> the same POD value
// Results: POD values as they are; ffi::Tensor -> an owning kTPTensor whose deleter releases
// the tvm-ffi object (TVMFFITensorToDLPackVersioned); strings -> kTPStr; ffi::Shape and
// arrays (tuples) -> kTPTuple, item by item.
// Errors: the kind and message of tvm-ffi's raised error become tensorplug's (TPErrorSet), so
// a kernel's ValueError reaches Python as ValueError.
#include <tensorplug/c_api.h>
#include <tvm/ffi/c_api.h>
#include <tvm/ffi/container/array.h>
#include <tvm/ffi/container/shape.h>
#include <tvm/ffi/container/tensor.h>
#include <tvm/ffi/error.h>
#include <tvm/ffi/extra/c_env_api.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cstdlib>
#include <utility>
#include <cstring>
#include <memory>
#include <new>
#include <string>
#include <vector>

namespace ffi = tvm::ffi;

namespace {

struct Wrapped {
  TVMFFISafeCallType entry;
  std::string name;
  std::string hints;  // one char per parameter: 's' ints as ffi::Shape, 't' a view as ffi::Tensor, '.' as they come
  bool wraps_views;  // some parameter is a view passed as ffi::Tensor (hint 't')
};

bool HintIs(const Wrapped& w, int32_t i, char hint) {
  return i < static_cast<int32_t>(w.hints.size()) && w.hints[i] == hint;
}

// tvm-ffi's allocator during a call: tensorplug's bound allocator (the caller's framework's,
// numpy's included, or XLA's lent result buffers inside jax.jit). tvm-ffi wraps what it gets
// in its own tensor object, and hands back, for a result, a new managed tensor of its own
// (TVMFFITensorToDLPackVersioned), which is not the one the caller's framework made: torch's
// native kernel and XLA's handler take their own tensors back by identity. So tvm-ffi gets a
// proxy of each allocation; a result tensor that is one of this call's proxies, held by no one
// but the result, is handed back as the framework's own tensor (the proxy, "claimed", then
// frees only itself when tvm-ffi drops it). A lent tensor (XLA's result buffer inside
// jax.jit) needs no proxy: tvm-ffi gets it as it is, and the call records it to find it again.
//
// A proxy is linked into its thread's list of live proxies while the call that made it runs
// (the list is a stack: calls nest, a kernel calling a kernel), so the call finds its own
// allocations; when the call ends it unlinks them. tvm-ffi drops a proxy (DeleteProxy) while
// the call runs (the usual case), or later, on any thread, if the kernel kept the tensor:
// `state` hands the proxy over between the two without a lock (whoever comes second recycles
// it).
enum ProxyState : uint8_t { kLinked, kDroppedLinked, kUnlinked };

struct Proxy {
  DLManagedTensorVersioned managed;  // first: tvm-ffi's deleter gets &managed
  DLManagedTensorVersioned* allocated;
  Proxy* next;  // in the live list, or the free list
  std::atomic<uint8_t> state;
  bool claimed;
};

// What the bridge keeps per thread. Plain data, zero-initialized and trivially destructible:
// one __tls_get_addr per function that uses it, where a thread_local with a constructor or a
// destructor also costs a guard check and an init call per use (they were half the TLS cost
// of a call). Its pooled proxies are freed at thread exit by PoolReaper, armed the first time
// the thread's pool gets one.
constexpr int kLentKept = 8;
struct ThreadState {
  Proxy* live;       // the live proxies of this thread's running calls, newest first
  Proxy* free_list;  // freed proxies kept for reuse: a warm call allocates none of its own
  int free_count;    // kKeptProxies once the thread's pool was freed (thread exit): no more kept
  bool reaper_armed;
  // Lent tensors (XLA's result buffers, TPLentTensorDeleter) tvm-ffi got as they are in the
  // running calls, a stack like `live`; a claimed one is set to nullptr.
  int32_t lent_count;
  DLManagedTensorVersioned* lent[kLentKept];
};
thread_local ThreadState t_state;
constexpr int kKeptProxies = 16;

struct PoolReaper {
  ~PoolReaper() {
    ThreadState& state = t_state;
    while (state.free_list != nullptr) {
      Proxy* next = state.free_list->next;
      delete state.free_list;
      state.free_list = next;
    }
    state.free_count = kKeptProxies;
  }
};

__attribute__((noinline)) void ArmReaper(ThreadState& state) {
  static thread_local PoolReaper reaper;  // constructed (its destructor registered) here, once per thread
  (void)&reaper;
  state.reaper_armed = true;
}

void Recycle(ThreadState& state, Proxy* proxy) {
  if (state.free_count < kKeptProxies) {
    if (!state.reaper_armed) ArmReaper(state);
    proxy->next = state.free_list;
    state.free_list = proxy;
    ++state.free_count;
  } else {
    delete proxy;
  }
}

void DeleteProxy(DLManagedTensorVersioned* self) {
  auto* proxy = reinterpret_cast<Proxy*>(self);
  if (!proxy->claimed && proxy->allocated->deleter) proxy->allocated->deleter(proxy->allocated);
  // Still linked: its call recycles it when it ends (no thread-local lookup here).
  if (proxy->state.exchange(kDroppedLinked, std::memory_order_acq_rel) == kLinked) return;
  Recycle(t_state, proxy);
}

// Unlink the proxies made since `outer` was the head of the live list (one call's), recycling
// those tvm-ffi already dropped.
__attribute__((noinline)) void UnlinkProxies(ThreadState& state, Proxy* outer) {
  Proxy* proxy = state.live;
  while (proxy != outer) {
    Proxy* next = proxy->next;
    if (proxy->state.exchange(kUnlinked, std::memory_order_acq_rel) == kDroppedLinked) Recycle(state, proxy);
    proxy = next;
  }
  state.live = outer;
}

// A proxy from the thread's pool, or a new one (nullptr: out of memory).
Proxy* TakeProxy(ThreadState& state) {
  Proxy* proxy = state.free_list;
  if (__builtin_expect(proxy == nullptr, 0)) return new (std::nothrow) Proxy{};
  state.free_list = proxy->next;
  --state.free_count;
  return proxy;
}

int EnvAlloc(DLTensor* prototype, DLManagedTensorVersioned** out, void* error_ctx,
             void (*set_error)(void* error_ctx, const char* kind, const char* message)) {
  DLManagedTensorVersioned* allocated = nullptr;
  if (TPEnvAllocTensor(prototype, &allocated) != 0) {
    const char* kind = "RuntimeError";
    const char* message = "allocation failed";
    TPErrorGet(&kind, &message);
    set_error(error_ctx, kind, message);
    return -1;
  }
  ThreadState* state = &t_state;
  asm("" : "+r"(state));  // one TLS lookup: keep the address, not recompute it after TakeProxy's call
  if (allocated->deleter == TPLentTensorDeleter && state->lent_count < kLentKept) {
    // A lent tensor needs no proxy: its deleter frees nothing and its lender keeps it for the
    // life of the process (c_api.h), so tvm-ffi may hold it, and drop it, as it is.
    state->lent[state->lent_count++] = allocated;
    *out = allocated;
    return 0;
  }
  Proxy* proxy = TakeProxy(*state);
  if (proxy == nullptr) {
    if (allocated->deleter) allocated->deleter(allocated);
    set_error(error_ctx, "MemoryError", "out of memory");
    return -1;
  }
  proxy->managed = *allocated;
  proxy->managed.manager_ctx = proxy;
  proxy->managed.deleter = DeleteProxy;
  proxy->allocated = allocated;
  proxy->claimed = false;
  proxy->state.store(kLinked, std::memory_order_relaxed);
  proxy->next = state->live;
  state->live = proxy;
  *out = &proxy->managed;
  return 0;
}

// One call's context for converting its result.
struct Frame {
  const Wrapped& w;
  ThreadState& state;
  Proxy* outer;  // the live list's head when the call began: the call's proxies are those before it
  int32_t lent_mark;  // state.lent[lent_mark:] are the call's lent tensors
};

bool SameTensor(const DLTensor& a, const DLTensor& t) {
  if (a.data != t.data || a.byte_offset != t.byte_offset || a.ndim != t.ndim) return false;
  if (a.shape == t.shape) return true;  // tvm-ffi's tensor object shares the managed tensor's shape
  for (int32_t d = 0; d < a.ndim; ++d) {
    if (a.shape[d] != t.shape[d]) return false;
  }
  return true;
}

// The caller's framework's own tensor for the tvm-ffi tensor `obj`, when it is this call's
// allocation and nothing else holds it; else nullptr.
DLManagedTensorVersioned* ClaimAllocation(const Frame& frame, TVMFFIObject* obj, bool sole) {
  if (!sole || (obj->combined_ref_count & 0xFFFFFFFFu) != 1) return nullptr;
  const DLTensor* t = TVMFFITensorGetDLTensorPtr(obj);
  for (int32_t i = frame.lent_mark; i < frame.state.lent_count; ++i) {
    DLManagedTensorVersioned* lent = frame.state.lent[i];
    if (lent != nullptr && SameTensor(lent->dl_tensor, *t)) {
      frame.state.lent[i] = nullptr;
      return lent;
    }
  }
  for (Proxy* proxy = frame.state.live; proxy != frame.outer; proxy = proxy->next) {
    if (!proxy->claimed && proxy->state.load(std::memory_order_relaxed) == kLinked &&
        SameTensor(proxy->managed.dl_tensor, *t)) {
      proxy->claimed = true;
      return proxy->allocated;
    }
  }
  return nullptr;
}

// A managed tensor that frees only itself: a caller's view lent to tvm-ffi for the call.
void FreeViewOnly(DLManagedTensorVersioned* self) { delete self; }

void SetError(const std::string& name, const char* kind, const std::string& message) {
  TPErrorSet(kind, (name + "(): " + message).c_str());
}

// The raised tvm-ffi error as tensorplug's error of the same kind.
__attribute__((noinline, cold)) void MoveRaisedError() {
  TVMFFIObjectHandle err = nullptr;
  TVMFFIErrorMoveFromRaised(&err);
  if (err == nullptr) {
    TPErrorSet("RuntimeError", "a tvm-ffi function failed without raising an error");
    return;
  }
  TVMFFIErrorCell* cell = TVMFFIErrorGetCellPtr(err);
  std::string kind(cell->kind.data, cell->kind.size);
  std::string message(cell->message.data, cell->message.size);
  TPErrorSet(kind.c_str(), message.c_str());
  TVMFFIObjectDecRef(err);
}

// A tvm-ffi tensor over the caller's tensor `view` (no copy), valid while the caller's is.
int WrapView(const DLTensor* view, TVMFFIAny* out) {
  auto* managed = new (std::nothrow) DLManagedTensorVersioned{};
  if (managed == nullptr) {
    TPErrorSet("MemoryError", "out of memory");
    return -1;
  }
  managed->version = {DLPACK_MAJOR_VERSION, DLPACK_MINOR_VERSION};
  managed->dl_tensor = *view;
  managed->deleter = FreeViewOnly;
  TVMFFIObjectHandle handle = nullptr;
  if (TVMFFITensorFromDLPackVersioned(managed, 0, 0, &handle) != 0) {
    delete managed;
    MoveRaisedError();
    return -1;
  }
  out->type_index = kTVMFFITensor;
  out->zero_padding = 0;
  out->v_obj = static_cast<TVMFFIObject*>(handle);
  return 0;
}

struct Env {
  int nstreams = 0;
  DLDevice devices[4];
  TVMFFIStreamHandle streams[4];

  void BindStream(const DLDevice& device) {
    if (device.device_type == kDLCPU || nstreams == 4) return;
    for (int i = 0; i < nstreams; ++i) {
      if (devices[i].device_type == device.device_type && devices[i].device_id == device.device_id) return;
    }
    TVMFFIEnvSetStream(device.device_type, device.device_id, TPEnvGetStream(device.device_type, device.device_id),
                       &streams[nstreams]);
    devices[nstreams++] = device;
  }
  void RestoreStreams() {
    for (int i = 0; i < nstreams; ++i) {
      TVMFFIEnvSetStream(devices[i].device_type, devices[i].device_id, streams[i], nullptr);
    }
  }
};

int ToTP(const Frame& frame, const TVMFFIAny& value, bool sole, TPAny* out);

int ItemsToTuple(const Frame& frame, const TVMFFIAny* items, int64_t size, bool sole, TPAny* out) {
  TPTuple* tuple = TPTupleCreate(static_cast<int32_t>(size));
  if (tuple == nullptr) {
    TPErrorSet("MemoryError", "out of memory");
    return -1;
  }
  out->type_index = kTPTuple;
  out->v_tuple = tuple;
  for (int64_t i = 0; i < size; ++i) {
    if (ToTP(frame, items[i], sole, &tuple->items[i]) != 0) {
      TPAnyRelease(out);
      return -1;
    }
  }
  return 0;
}

// A tvm-ffi POD value as a TPAny; false for a value that is not one of them.
inline bool PodToTP(const TVMFFIAny& value, TPAny* out) {
  out->flags = 0;
  switch (value.type_index) {
    case kTVMFFINone: out->type_index = kTPNone; return true;
    case kTVMFFIInt: out->type_index = kTPInt; out->v_int64 = value.v_int64; return true;
    case kTVMFFIBool: out->type_index = kTPBool; out->v_int64 = value.v_int64 != 0; return true;
    case kTVMFFIFloat: out->type_index = kTPFloat; out->v_float64 = value.v_float64; return true;
    case kTVMFFIOpaquePtr: out->type_index = kTPOpaquePtr; out->v_ptr = value.v_ptr; return true;
    case kTVMFFIDataType: out->type_index = kTPDataType; out->v_dtype = value.v_dtype; return true;
    case kTVMFFIDevice: out->type_index = kTPDevice; out->v_device = value.v_device; return true;
    default: return false;
  }
}

// A tvm-ffi value (borrowed) as a TPAny the caller owns; `sole`: the result holds the only
// reference to the value's container.
int ToTP(const Frame& frame, const TVMFFIAny& value, bool sole, TPAny* out) {
  if (PodToTP(value, out)) return 0;
  switch (value.type_index) {
    case kTVMFFISmallStr:
    case kTVMFFIStr: {
      const char* data;
      size_t size;
      if (value.type_index == kTVMFFISmallStr) {
        data = value.v_bytes;
        size = value.small_str_len;
      } else {
        const TVMFFIByteArray* bytes = TVMFFIBytesGetByteArrayPtr(value.v_obj);
        data = bytes->data;
        size = bytes->size;
      }
      TPString* str = TPStringCreate(data, size);
      if (str == nullptr) {
        TPErrorSet("MemoryError", "out of memory");
        return -1;
      }
      out->type_index = kTPStr;
      out->v_str = str;
      return 0;
    }
    case kTVMFFITensor: {
      DLManagedTensorVersioned* managed = ClaimAllocation(frame, value.v_obj, sole);
      if (managed != nullptr) {
        out->type_index = kTPTensor;
        out->v_tensor = managed;
        return 0;
      }
      if (TVMFFITensorToDLPackVersioned(value.v_obj, &managed) != 0) {
        MoveRaisedError();
        return -1;
      }
      out->type_index = kTPTensor;
      out->v_tensor = managed;
      return 0;
    }
    case kTVMFFIShape: {
      const TVMFFIShapeCell* cell = TVMFFIShapeGetCellPtr(value.v_obj);
      TPTuple* tuple = TPTupleCreate(static_cast<int32_t>(cell->size));
      if (tuple == nullptr) {
        TPErrorSet("MemoryError", "out of memory");
        return -1;
      }
      for (size_t i = 0; i < cell->size; ++i) {
        tuple->items[i].type_index = kTPInt;
        tuple->items[i].v_int64 = cell->data[i];
      }
      out->type_index = kTPTuple;
      out->v_tuple = tuple;
      return 0;
    }
    case kTVMFFIArray:
    case kTVMFFIList: {
      const TVMFFISeqCell* cell = reinterpret_cast<const TVMFFISeqCell*>(
          reinterpret_cast<const char*>(value.v_obj) + sizeof(TVMFFIObject));
      return ItemsToTuple(frame, static_cast<const TVMFFIAny*>(cell->data), cell->size,
                          sole && (value.v_obj->combined_ref_count & 0xFFFFFFFFu) == 1, out);
    }
    default: {
      const TVMFFITypeInfo* info = TVMFFIGetTypeInfo(value.type_index);
      std::string type = info ? std::string(info->type_key.data, info->type_key.size)
                              : "type index " + std::to_string(value.type_index);
      SetError(frame.w.name, "TypeError", "returned a " + type + ", which tensorplug cannot pass to Python "
               "(it takes None, int, float, bool, str, device, dtype, tensors, shapes and arrays of them)");
      return -1;
    }
  }
}

// An object result: converted, then tvm-ffi's reference dropped (unclaimed allocations go
// with it).
__attribute__((noinline)) int ObjectToTP(const Frame& frame, TVMFFIAny* ret, TPAny* result) {
  if (ret->type_index == kTVMFFITensor) {  // the usual object result, without ffi::Any
    TVMFFIObject* obj = ret->v_obj;
    DLManagedTensorVersioned* managed = ClaimAllocation(frame, obj, true);
    int status = 0;
    if (managed == nullptr && TVMFFITensorToDLPackVersioned(obj, &managed) != 0) {
      MoveRaisedError();
      status = -1;
    } else {
      result->type_index = kTPTensor;
      result->flags = 0;
      result->v_tensor = managed;
    }
    ffi::details::ObjectUnsafe::DecRefObjectHandle(obj);
    return status;
  }
  ffi::Any owned = ffi::details::AnyUnsafe::MoveTVMFFIAnyToAny(ret);
  TVMFFIAny view = ffi::AnyView(owned).CopyToTVMFFIAny();
  return ToTP(frame, view, true, result);
}

// The argument kinds that need tvm-ffi objects (owned for the call in `keep`): moved-in
// tensors, views passed as ffi::Tensor, int arrays, lists of tensors. Out of the common
// path (views and POD values). Returns nonzero with the error set.
__attribute__((noinline)) int ConvertObjectArg(const Wrapped& w, int32_t i, const TPAny& a, TVMFFIAny& t, Env& env,
                                               std::unique_ptr<std::vector<ffi::Any>>& kept) {
  if (!kept) kept.reset(new std::vector<ffi::Any>());
  std::vector<ffi::Any>& keep = *kept;
  switch (a.type_index) {
    case kTPDLTensorPtr: {  // an ffi::Tensor parameter
      env.BindStream(a.v_dltensor->device);
      if (WrapView(a.v_dltensor, &t) != 0) return -1;
      keep.push_back(ffi::details::AnyUnsafe::MoveTVMFFIAnyToAny(&t));
      t = ffi::AnyView(keep.back()).CopyToTVMFFIAny();
      return 0;
    }
    case kTPTensor: {
      env.BindStream(a.v_tensor->dl_tensor.device);
      TVMFFIObjectHandle handle = nullptr;
      if (TVMFFITensorFromDLPackVersioned(a.v_tensor, 0, 0, &handle) != 0) {
        if (a.v_tensor->deleter) a.v_tensor->deleter(a.v_tensor);
        MoveRaisedError();
        return -1;
      }
      t.type_index = kTVMFFITensor;
      t.zero_padding = 0;
      t.v_obj = static_cast<TVMFFIObject*>(handle);
      keep.push_back(ffi::details::AnyUnsafe::MoveTVMFFIAnyToAny(&t));
      t.type_index = kTVMFFITensor;
      t.v_obj = static_cast<TVMFFIObject*>(handle);
      return 0;
    }
    case kTPIntArray: {
      const int64_t* data = a.v_int_array->data;
      ffi::Any held;
      if (HintIs(w, i, 's')) {
        held = ffi::Shape(data, data + a.v_int_array->size);
      } else {
        held = ffi::Array<int64_t>(data, data + a.v_int_array->size);
      }
      keep.push_back(std::move(held));
      t = ffi::AnyView(keep.back()).CopyToTVMFFIAny();
      return 0;
    }
    case kTPArray: {
      std::vector<ffi::Tensor> items;
      for (int64_t k = 0; k < a.v_array->size; ++k) {
        const TPAny& item = a.v_array->items[k];
        if (item.type_index != kTPDLTensorPtr) {
          SetError(w.name, "TypeError", "argument " + std::to_string(i + 1) +
                   ": tvm-ffi functions take lists of tensors only");
          return -1;
        }
        env.BindStream(item.v_dltensor->device);
        TVMFFIAny raw;
        if (WrapView(item.v_dltensor, &raw) != 0) return -1;
        items.push_back(ffi::details::AnyUnsafe::MoveTVMFFIAnyToAny(&raw).cast<ffi::Tensor>());
      }
      keep.push_back(ffi::Array<ffi::Tensor>(items.begin(), items.end()));
      t = ffi::AnyView(keep.back()).CopyToTVMFFIAny();
      return 0;
    }
    default:
      SetError(w.name, "TypeError", "argument " + std::to_string(i + 1) + ": tensorplug value kind " +
               std::to_string(a.type_index) + " has no tvm-ffi form");
      return -1;
  }
}

// Moved-in tensors after a failed conversion at argument `failed_at`: ours to release.
__attribute__((noinline, cold)) void ReleaseMovedAfter(const TPAny* args, int32_t nargs, int32_t failed_at) {
  for (int32_t i = failed_at + 1; i < nargs; ++i) {
    if (args[i].type_index == kTPTensor && args[i].v_tensor->deleter) args[i].v_tensor->deleter(args[i].v_tensor);
  }
}

// The call, C++ exceptions aside (Call catches them). Views and POD values are converted
// inline; the rest by ConvertObjectArg.
inline __attribute__((always_inline)) int CallUnguarded(const Wrapped& w, const TPAny* args, int32_t nargs,
                                                        TPAny* result) {
  TVMFFIAny small[8];
  std::unique_ptr<TVMFFIAny[]> large;
  TVMFFIAny* targs = small;
  if (nargs > 8) {
    large.reset(new TVMFFIAny[nargs]);
    targs = large.get();
  }
  std::unique_ptr<std::vector<ffi::Any>> keep;  // owned temporaries (arrays, shapes, moved-in tensors), made when needed
  Env env;
  const bool wraps_views = w.wraps_views;
  for (int32_t i = 0; i < nargs; ++i) {
    const TPAny& a = args[i];
    TVMFFIAny& t = targs[i];
    t.zero_padding = 0;
    switch (a.type_index) {
      case kTPDLTensorPtr:
        if (wraps_views && HintIs(w, i, 't')) goto object;
        if (a.v_dltensor->device.device_type != kDLCPU) env.BindStream(a.v_dltensor->device);
        t.type_index = kTVMFFIDLTensorPtr;
        t.v_ptr = a.v_dltensor;
        break;
      case kTPNone: t.type_index = kTVMFFINone; t.v_int64 = 0; break;
      case kTPInt: t.type_index = kTVMFFIInt; t.v_int64 = a.v_int64; break;
      case kTPBool: t.type_index = kTVMFFIBool; t.v_int64 = a.v_int64; break;
      case kTPFloat: t.type_index = kTVMFFIFloat; t.v_float64 = a.v_float64; break;
      case kTPDevice: t.type_index = kTVMFFIDevice; t.v_int64 = 0; t.v_device = a.v_device; break;
      case kTPDataType: t.type_index = kTVMFFIDataType; t.v_int64 = 0; t.v_dtype = a.v_dtype; break;
      case kTPOpaquePtr: t.type_index = kTVMFFIOpaquePtr; t.v_ptr = a.v_ptr; break;
      case kTPRawStr: t.type_index = kTVMFFIRawStr; t.v_c_str = a.v_c_str; break;
      default:
      object:
        if (ConvertObjectArg(w, i, a, t, env, keep) != 0) {
          ReleaseMovedAfter(args, nargs, i);
          env.RestoreStreams();
          return -1;
        }
    }
  }

  ThreadState& state = t_state;
  Frame frame{w, state, state.live, state.lent_count};
  struct Unlink {  // also when a conversion below throws
    const Frame& frame;
    ~Unlink() {
      if (frame.state.live != frame.outer) UnlinkProxies(frame.state, frame.outer);
      frame.state.lent_count = frame.lent_mark;
    }
  } unlink{frame};
  DLPackManagedTensorAllocator previous = nullptr;
  TVMFFIEnvSetDLPackManagedTensorAllocator(EnvAlloc, 0, &previous);
  TVMFFIAny ret;
  ret.type_index = kTVMFFINone;
  ret.zero_padding = 0;
  ret.v_int64 = 0;
  int rc = w.entry(nullptr, targs, nargs, &ret);
  TVMFFIEnvSetDLPackManagedTensorAllocator(previous, 0, nullptr);
  if (env.nstreams != 0) env.RestoreStreams();
  int status;
  if (rc != 0) {
    MoveRaisedError();  // a failed call's allocations are tvm-ffi's to free
    status = -1;
  } else if (ret.type_index == kTVMFFINone) {  // destination passing: the usual result
    result->type_index = kTPNone;
    result->flags = 0;
    status = 0;
  } else if (ret.type_index < kTVMFFIStaticObjectBegin && PodToTP(ret, result)) {
    status = 0;
  } else {
    status = ObjectToTP(frame, &ret, result);
  }
  return status;
}

// CallUnguarded, with the C++ exceptions of tvm-ffi's containers (out of memory) as errors.
__attribute__((noinline)) int Call(const Wrapped* w, const TPAny* args, int32_t nargs, TPAny* result) {
  try {
    return CallUnguarded(*w, args, nargs, result);
  } catch (const ffi::Error& e) {
    TPErrorSet(e.kind().c_str(), e.message().c_str());
  } catch (const std::bad_alloc&) {
    TPErrorSet("MemoryError", "out of memory");
  } catch (const std::exception& e) {
    TPErrorSet("RuntimeError", e.what());
  }
  return -1;
}

// A fixed pool of entry points, one per bound function: function_from_pointer passes its
// own closure as `self`, so each entry finds its function through its slot instead.
constexpr int kSlots = 8192;
Wrapped* g_slots[kSlots];
std::atomic<int> g_next_slot{0};

template <int I>
int Trampoline(void*, const TPAny* args, int32_t nargs, TPAny* result) {
  return Call(g_slots[I], args, nargs, result);
}

template <int... I>
constexpr std::array<TPPackedFunc, sizeof...(I)> MakeTrampolines(std::integer_sequence<int, I...>) {
  return {&Trampoline<I>...};
}

constexpr std::array<TPPackedFunc, kSlots> kTrampolines = MakeTrampolines(std::make_integer_sequence<int, kSlots>{});

}  // namespace

extern "C" {

// Bind the tvm-ffi function `entry` to the next free slot: returns the address of that
// slot's TPPackedFunc (for tensorplug.function_from_pointer, which attaches the signature
// and the name), or 0 with the error recorded when every slot is taken. Slots are never
// freed: the libraries stay mapped for the life of the process too.
TP_EXPORT void* TPTvmFfiBind(void* entry, const char* name, const char* hints) {
  int slot = g_next_slot.fetch_add(1);
  if (slot >= kSlots) {
    TPErrorSet("RuntimeError", (std::string("cannot bind tvm-ffi function '") + name + "': a process binds at most " +
                                std::to_string(kSlots) + " tvm-ffi functions").c_str());
    return nullptr;
  }
  g_slots[slot] = new Wrapped{reinterpret_cast<TVMFFISafeCallType>(entry), name, hints,
                              std::strchr(hints, 't') != nullptr};
  return reinterpret_cast<void*>(kTrampolines[slot]);
}

// Call the metadata function `entry` (`__tvm_ffi__metadata_<name>`): its JSON into
// buf[0:size] (NUL-terminated). Returns the JSON's length (larger than size - 1: call again
// with a bigger buffer), or -1 with the error recorded for TPErrorGet.
TP_EXPORT int64_t TPTvmFfiMetadata(void* entry, char* buf, int64_t size) {
  TVMFFIAny ret;
  ret.type_index = kTVMFFINone;
  ret.zero_padding = 0;
  ret.v_int64 = 0;
  if (reinterpret_cast<TVMFFISafeCallType>(entry)(nullptr, nullptr, 0, &ret) != 0) {
    MoveRaisedError();
    return -1;
  }
  ffi::Any owned = ffi::details::AnyUnsafe::MoveTVMFFIAnyToAny(&ret);
  auto text = owned.try_cast<ffi::String>();
  if (!text.has_value()) {
    TPErrorSet("TypeError", "the metadata function did not return a string");
    return -1;
  }
  int64_t n = static_cast<int64_t>(text->size());
  if (n < size) {
    std::memcpy(buf, text->data(), n);
    buf[n] = '\0';
  }
  return n;
}

// The tvm-ffi runtime's version (major, minor, patch).
TP_EXPORT void TPTvmFfiVersion(int32_t* out) {
  TVMFFIVersion version;
  TVMFFIGetVersion(&version);
  out[0] = static_cast<int32_t>(version.major);
  out[1] = static_cast<int32_t>(version.minor);
  out[2] = static_cast<int32_t>(version.patch);
}

}  // extern "C"
