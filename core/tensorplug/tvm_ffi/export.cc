// apache tvm-ffi's calling convention for a tensorplug kernel library: the other direction of
// bridge.cc (core/tensorplug/tvm_ffi/export.py; tensorplug.cpp.build(..., export_tvm_ffi=True)).
//
// Compiled into the library itself, in a translation unit generated after this text: one
// TENSORPLUG_TVM_FFI_EXPORT(name) line per exported tensorplug function defines
// `__tvm_ffi_<name>` with tvm-ffi's packed signature (TVMFFISafeCallType), which converts the
// TVMFFIAny arguments to TPAny by the function's signature (`__tensorplugsig_<name>`), calls
// `__tensorplug_<name>`, and converts the result back. The library neither includes tvm-ffi's
// headers nor links libtvm_ffi: the layouts below are tvm-ffi's C ABI (tvm/ffi/c_api.h of
// apache-tvm-ffi 0.1), and the few runtime functions it needs (raising an error, making a
// tensor or string object, the environment's allocator and stream) are looked up with
// dlsym(RTLD_DEFAULT) when first needed: a caller through tvm-ffi has libtvm_ffi loaded.
//
// Arguments, by the parameter's kind: view/mview <- a DLTensor* or a tvm-ffi Tensor (its
// DLTensor, no copy); tensor <- the same, as a managed tensor holding a reference to the
// tvm-ffi object (or, for a DLTensor*, valid for the call); int <- int or bool; float <- float
// or int; bool <- bool or int; str <- a raw, small or object string; device, dtype <- the
// same; None for an optional. Results: None, int, float, bool, device, dtype, str (a tvm-ffi
// String) and tensor (a tvm-ffi Tensor owning the result); others are a TypeError.
// Environment: tvm-ffi's allocator (set by the caller, e.g. tvm_ffi's torch integration) is
// bound as tensorplug's for the call, and tvm-ffi's stream of each non-CPU device a tensor is
// on as tensorplug's; both restored after. Errors: tensorplug's recorded error is raised into
// tvm-ffi with its kind and message.
#include <tensorplug/c_api.h>

#include <dlfcn.h>

#include <cstdint>
#include <cstring>
#include <exception>
#include <mutex>
#include <new>
#include <deque>
#include <string>
#include <vector>

namespace tensorplug_tvm_ffi_export {

// ---------------------------------------------------------- tvm-ffi's C ABI ----
struct Any {  // TVMFFIAny
  int32_t type_index;
  uint32_t small_str_len;  // zero_padding for every type but a small string
  union {
    int64_t v_int64;
    double v_float64;
    void* v_ptr;
    const char* v_c_str;
    void* v_obj;
    DLDataType v_dtype;
    DLDevice v_device;
    char v_bytes[8];
  };
};
static_assert(sizeof(Any) == 16, "TVMFFIAny is 16 bytes");

struct ObjectHeader {  // TVMFFIObject: a Tensor's DLTensor, a String's bytes follow it
  uint64_t combined_ref_count;
  int32_t type_index;
  uint32_t padding;
  void* deleter;
};
static_assert(sizeof(ObjectHeader) == 24, "TVMFFIObject is 24 bytes");

struct ByteArray {  // TVMFFIByteArray
  const char* data;
  size_t size;
};

enum : int32_t {  // TVMFFITypeIndex
  kNone = 0,
  kInt = 1,
  kBool = 2,
  kFloat = 3,
  kDataType = 5,
  kDevice = 6,
  kDLTensorPtr = 7,
  kRawStr = 8,
  kByteArrayPtr = 9,
  kSmallStr = 11,
  kStr = 65,
  kTensor = 70,
};

template <class F>
F Resolve(const char* symbol) {
  return reinterpret_cast<F>(dlsym(RTLD_DEFAULT, symbol));
}

using RaiseFn = void (*)(const char* kind, const char* message);
using TensorFromFn = int (*)(DLManagedTensorVersioned* from, int32_t alignment, int32_t contiguous, void** out);
using StringFromFn = int (*)(const ByteArray* input, Any* out);
using RefFn = int (*)(void* obj);
using GetAllocatorFn = DLPackManagedTensorAllocator (*)();
using GetStreamFn = void* (*)(int32_t device_type, int32_t device_id);

int Raise(const char* kind, const std::string& message) {
  static const RaiseFn raise = Resolve<RaiseFn>("TVMFFIErrorSetRaisedFromCStr");
  if (raise != nullptr) raise(kind, message.c_str());
  return -1;
}

int RaiseRecorded() {
  const char* kind = "RuntimeError";
  const char* message = "a tensorplug function failed without recording an error";
  TPErrorGet(&kind, &message);
  return Raise(kind, message);
}

// --------------------------------------------------------------- signatures ----
enum class Kind { kView, kTensor, kInt, kFloat, kBool, kStr, kDevice, kDType, kAny, kOther };

struct Param {
  Kind kind;
  bool optional;
  std::string text;  // the kind as the signature writes it, for messages
};

struct Export {
  const char* name;
  TPPackedFunc entry;
  const char* (*signature)(void);  // null: the library exports none (every argument as it comes)
  std::once_flag parsed;
  std::vector<Param> params;
  bool has_signature = false;
};

void Parse(Export& e) {
  if (e.signature == nullptr) return;
  const char* text = e.signature();
  if (text == nullptr) return;
  e.has_signature = true;
  std::string sig(text);
  const std::string params = sig.substr(0, sig.find("->"));
  size_t start = 0;
  while (start < params.size()) {
    size_t end = params.find(';', start);
    if (end == std::string::npos) end = params.size();
    std::string item = params.substr(start, end - start);
    start = end + 1;
    const size_t colon = item.find(':');
    std::string kind = colon == std::string::npos ? item : item.substr(colon + 1);
    kind = kind.substr(0, kind.find('='));
    const bool optional = !kind.empty() && kind[0] == '?';
    if (optional) kind = kind.substr(1);
    Kind k = Kind::kOther;
    if (kind == "view" || kind == "mview") k = Kind::kView;
    else if (kind == "tensor") k = Kind::kTensor;
    else if (kind == "int") k = Kind::kInt;
    else if (kind == "float") k = Kind::kFloat;
    else if (kind == "bool") k = Kind::kBool;
    else if (kind == "str") k = Kind::kStr;
    else if (kind == "device") k = Kind::kDevice;
    else if (kind == "dtype") k = Kind::kDType;
    else if (kind == "any") k = Kind::kAny;
    e.params.push_back({k, optional, kind});
  }
}

// ---------------------------------------------------------------- arguments ----
const DLTensor* TensorOf(const Any& a) {
  if (a.type_index == kDLTensorPtr) return static_cast<const DLTensor*>(a.v_ptr);
  if (a.type_index == kTensor) {
    return reinterpret_cast<const DLTensor*>(static_cast<const char*>(a.v_obj) + sizeof(ObjectHeader));
  }
  return nullptr;
}

void DropManaged(DLManagedTensorVersioned* self) {
  if (self->manager_ctx != nullptr) {
    static const RefFn dec_ref = Resolve<RefFn>("TVMFFIObjectDecRef");
    if (dec_ref != nullptr) dec_ref(self->manager_ctx);
  }
  delete self;
}

struct Call {
  std::vector<TPAny> args;
  // Small and object strings, NUL-terminated, for the call. A deque: earlier strings stay where
  // they are as more come (a vector's growth moved them, and the TPAny pointing at them dangled).
  std::deque<std::string> strings;
  int nstreams = 0;
  DLDevice devices[4];
  void* streams[4];
  bool allocator_bound = false;
  DLPackManagedTensorAllocator allocator = nullptr;

  ~Call() {
    for (TPAny& a : args) {
      if (a.type_index == kTPTensor && a.v_tensor != nullptr) a.v_tensor->deleter(a.v_tensor);  // not moved in
    }
  }
  void BindStream(const DLDevice& device) {
    if (device.device_type == kDLCPU || nstreams == 4) return;
    for (int i = 0; i < nstreams; ++i) {
      if (devices[i].device_type == device.device_type && devices[i].device_id == device.device_id) return;
    }
    static const GetStreamFn get_stream = Resolve<GetStreamFn>("TVMFFIEnvGetStream");
    if (get_stream == nullptr) return;
    streams[nstreams] = TPEnvSetStream(device.device_type, device.device_id,
                                       get_stream(device.device_type, device.device_id));
    devices[nstreams++] = device;
  }
  void Restore() {
    for (int i = nstreams - 1; i >= 0; --i) TPEnvSetStream(devices[i].device_type, devices[i].device_id, streams[i]);
    nstreams = 0;
    if (allocator_bound) TPEnvSetAllocator(allocator);
    allocator_bound = false;
  }
};

const char* TypeName(int32_t type_index) {
  switch (type_index) {
    case kNone: return "None";
    case kInt: return "int";
    case kBool: return "bool";
    case kFloat: return "float";
    case kDataType: return "dtype";
    case kDevice: return "device";
    case kDLTensorPtr: return "DLTensor*";
    case kRawStr: case kSmallStr: case kStr: return "str";
    case kTensor: return "ffi.Tensor";
  }
  return nullptr;
}

int Mismatch(const Export& e, int i, const std::string& expected, const Any& a) {
  const char* type = TypeName(a.type_index);
  return Raise("TypeError", std::string(e.name) + "() argument " + std::to_string(i + 1) + ": expected " + expected +
                                ", got " + (type ? type : "tvm-ffi type index " + std::to_string(a.type_index)));
}

int ToTP(const Export& e, int i, const Param& p, const Any& a, Call& call, TPAny* out) {
  out->flags = 0;
  out->v_int64 = 0;
  if (a.type_index == kNone && (p.optional || p.kind == Kind::kAny)) {
    out->type_index = kTPNone;
    return 0;
  }
  switch (p.kind) {
    case Kind::kAny:
    case Kind::kView: {
      if (const DLTensor* t = TensorOf(a)) {
        out->type_index = kTPDLTensorPtr;
        out->v_dltensor = const_cast<DLTensor*>(t);
        call.BindStream(t->device);
        return 0;
      }
      if (p.kind == Kind::kView) return Mismatch(e, i, "a tensor", a);
      break;  // any: the scalars below
    }
    case Kind::kTensor: {
      const DLTensor* t = TensorOf(a);
      if (t == nullptr) return Mismatch(e, i, "a tensor", a);
      auto* managed = new DLManagedTensorVersioned{};
      managed->version = {DLPACK_MAJOR_VERSION, DLPACK_MINOR_VERSION};
      managed->dl_tensor = *t;
      managed->deleter = DropManaged;
      if (a.type_index == kTensor) {  // the tvm-ffi tensor stays alive while the managed tensor is
        static const RefFn inc_ref = Resolve<RefFn>("TVMFFIObjectIncRef");
        if (inc_ref != nullptr) {
          inc_ref(a.v_obj);
          managed->manager_ctx = a.v_obj;
        }
      }
      out->type_index = kTPTensor;
      out->v_tensor = managed;
      call.BindStream(t->device);
      return 0;
    }
    default:
      break;
  }
  switch (a.type_index) {
    case kInt:
    case kBool:
      if (p.kind == Kind::kInt || p.kind == Kind::kAny || (p.kind == Kind::kBool)) {
        out->type_index = p.kind == Kind::kBool || (p.kind == Kind::kAny && a.type_index == kBool) ? kTPBool : kTPInt;
        out->v_int64 = out->type_index == kTPBool ? (a.v_int64 != 0) : a.v_int64;
        return 0;
      }
      if (p.kind == Kind::kFloat && a.type_index == kInt) {
        out->type_index = kTPFloat;
        out->v_float64 = static_cast<double>(a.v_int64);
        return 0;
      }
      break;
    case kFloat:
      if (p.kind == Kind::kFloat || p.kind == Kind::kAny) {
        out->type_index = kTPFloat;
        out->v_float64 = a.v_float64;
        return 0;
      }
      break;
    case kRawStr:
    case kSmallStr:
    case kStr:
    case kByteArrayPtr:
      if (p.kind == Kind::kStr || p.kind == Kind::kAny) {
        out->type_index = kTPRawStr;
        if (a.type_index == kRawStr) {
          out->v_c_str = a.v_c_str;
          return 0;
        }
        if (a.type_index == kSmallStr) {
          call.strings.emplace_back(a.v_bytes, a.small_str_len);
        } else {
          const ByteArray* bytes = a.type_index == kByteArrayPtr
                                       ? static_cast<const ByteArray*>(a.v_ptr)
                                       : reinterpret_cast<const ByteArray*>(static_cast<const char*>(a.v_obj) +
                                                                            sizeof(ObjectHeader));
          call.strings.emplace_back(bytes->data, bytes->size);
        }
        out->v_c_str = call.strings.back().c_str();
        return 0;
      }
      break;
    case kDevice:
      if (p.kind == Kind::kDevice || p.kind == Kind::kAny) {
        out->type_index = kTPDevice;
        out->v_device = a.v_device;
        return 0;
      }
      break;
    case kDataType:
      if (p.kind == Kind::kDType || p.kind == Kind::kAny) {
        out->type_index = kTPDataType;
        out->v_dtype = a.v_dtype;
        return 0;
      }
      break;
  }
  if (p.kind == Kind::kOther) {
    return Raise("TypeError", std::string(e.name) + "() argument " + std::to_string(i + 1) + ": a parameter of kind '" +
                                  p.text + "' cannot be passed through tvm-ffi's calling convention (tensors, "
                                  "int, float, bool, str, device, dtype and None can)");
  }
  return Mismatch(e, i, (p.optional ? "None or " : "") + p.text, a);
}

// ------------------------------------------------------------------ results ----
int ToTvmFfi(const Export& e, TPAny& r, Any* out) {
  out->small_str_len = 0;
  out->v_int64 = 0;
  switch (r.type_index) {
    case kTPNone: out->type_index = kNone; return 0;
    case kTPInt: out->type_index = kInt; out->v_int64 = r.v_int64; return 0;
    case kTPBool: out->type_index = kBool; out->v_int64 = r.v_int64 != 0; return 0;
    case kTPFloat: out->type_index = kFloat; out->v_float64 = r.v_float64; return 0;
    case kTPDevice: out->type_index = kDevice; out->v_device = r.v_device; return 0;
    case kTPDataType: out->type_index = kDataType; out->v_dtype = r.v_dtype; return 0;
    case kTPTensor: {
      static const TensorFromFn from = Resolve<TensorFromFn>("TVMFFITensorFromDLPackVersioned");
      DLManagedTensorVersioned* managed = r.v_tensor;
      r.type_index = kTPNone;
      r.v_tensor = nullptr;
      void* handle = nullptr;
      if (from == nullptr || from(managed, 0, 0, &handle) != 0) {
        if (managed->deleter) managed->deleter(managed);
        return from == nullptr ? Raise("RuntimeError", "libtvm_ffi is not loaded") : -1;
      }
      out->type_index = kTensor;
      out->v_obj = handle;
      return 0;
    }
    case kTPStr: {
      static const StringFromFn from = Resolve<StringFromFn>("TVMFFIStringFromByteArray");
      ByteArray bytes{r.v_str->data, r.v_str->size};
      const int rc = from == nullptr ? Raise("RuntimeError", "libtvm_ffi is not loaded") : from(&bytes, out);
      TPAnyRelease(&r);
      return rc;
    }
  }
  TPAnyRelease(&r);
  return Raise("TypeError", std::string(e.name) + "() returns a value tvm-ffi's calling convention cannot carry "
                                "here (tensorplug type index " + std::to_string(r.type_index) +
                                "): None, int, float, bool, str, device, dtype and tensors can");
}

int Invoke(Export& e, const void* args_in, int32_t nargs, void* result_out) {
  std::call_once(e.parsed, Parse, std::ref(e));
  const Any* args = static_cast<const Any*>(args_in);
  Any* result = static_cast<Any*>(result_out);
  Call call;
  call.args.resize(size_t(nargs));
  for (int32_t i = 0; i < nargs; ++i) {
    const Param any{Kind::kAny, true, "any"};
    const Param& p = e.has_signature && size_t(i) < e.params.size() ? e.params[size_t(i)] : any;
    if (ToTP(e, i, p, args[i], call, &call.args[size_t(i)]) != 0) {
      call.Restore();
      return -1;
    }
  }
  static const GetAllocatorFn get_allocator = Resolve<GetAllocatorFn>("TVMFFIEnvGetDLPackManagedTensorAllocator");
  if (DLPackManagedTensorAllocator alloc = get_allocator ? get_allocator() : nullptr) {
    call.allocator = TPEnvSetAllocator(alloc);
    call.allocator_bound = true;
  }
  TPAny r{};
  const int rc = e.entry(nullptr, call.args.data(), nargs, &r);
  for (TPAny& a : call.args) {
    if (a.type_index == kTPTensor) a.v_tensor = nullptr;  // moved into the callee
  }
  call.Restore();
  if (rc != 0) return RaiseRecorded();
  return ToTvmFfi(e, r, result);
}

int Guarded(Export& e, const void* args, int32_t nargs, void* result) {
  try {
    return Invoke(e, args, nargs, result);
  } catch (const std::bad_alloc&) {
    return Raise("MemoryError", std::string(e.name) + "(): out of memory");
  } catch (const std::exception& ex) {
    return Raise("RuntimeError", std::string(e.name) + "(): " + ex.what());
  }
}

}  // namespace tensorplug_tvm_ffi_export

#define TENSORPLUG_TVM_FFI_EXPORT(name)                                                                        \
  extern "C" int __tensorplug_##name(void* self, const TPAny* args, int32_t nargs, TPAny* result);             \
  extern "C" __attribute__((weak)) const char* __tensorplugsig_##name(void);                                  \
  extern "C" __attribute__((visibility("default"))) int __tvm_ffi_##name(void* self, const void* args,        \
                                                                         int32_t nargs, void* result) {        \
    (void)self;                                                                                                \
    static tensorplug_tvm_ffi_export::Export e{#name, __tensorplug_##name, __tensorplugsig_##name, {}, {}};   \
    return tensorplug_tvm_ffi_export::Guarded(e, args, nargs, result);                                         \
  }
