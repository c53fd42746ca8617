// The native torch kernel: runs a tensorplug op's call plan (tensorplug/plan.h) as its
// dispatcher kernel, with no Python and no GIL between torch's dispatcher and the function.
//
// torch (>= 2.10) registers a boxed C kernel `void fn(StableIValue* stack, uint64_t
// num_args, uint64_t num_outputs)` with torch_library_impl, and its tensors are read and
// made through the stable C shim (shim.h), resolved at run time: no torch header.
//
// As for the XLA handler (the jax plugin's xla_ffi.cc), the boxed signature carries no user
// data: each op is a plan in a slot, and each slot has a handler function of its own
// (HandlerAt). Per call the handler turns the stack into the function's packed arguments
// (tensors as DLTensor views of torch's tensors, scalars, optionals, lists, devices,
// dtypes), and the call plan checks them, evaluates the output rule, binds the stream of
// the primary tensor's device and an allocator that allocates through torch
// (aoti_torch_empty_strided), calls the function and checks each returned tensor against
// the rule; the results are left on the stack as torch tensors. An error becomes a C++
// exception, which torch raises as RuntimeError("<op>(): <kind>: <message>").
//
// Over 500 lines: one idea, the op's kernel in torch's dispatcher, in its three entries --
// the plain kernel (RunPlan), the Autograd kernel that chooses between it and the Python
// formula (RunAutograd), the compiled bridge's (BridgeRun) -- and the Python functions
// that define and register them; all share the slot table and the stack's encoding.
#include <dlfcn.h>
#include <malloc.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cstring>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <string>
#include <unordered_map>
#include <vector>

#include "native.h"
#include "shim.h"
#include "tensorplug/dtype.h"
#include "tensorplug/plan.h"

namespace tensorplug_adapters::torch {

namespace {

using tensorplug::DataTypeToString;
using tensorplug::python::GuardedMethod;
using tensorplug::python::PlanOfCapsule;

// -------------------------------------------------------------- plans ----
// The parameter kinds are the call plan's (tensorplug/plan.h).
enum class Kind : int32_t {
  kView = kTPParamView, kTensor = kTPParamTensor, kInt = kTPParamInt, kFloat = kTPParamFloat, kBool = kTPParamBool,
  kStr = kTPParamStr, kDevice = kTPParamDevice, kDType = kTPParamDType, kViews = kTPParamViews, kInts = kTPParamInts
};

struct ParamPlan {
  Kind kind;
  bool optional;
  bool written;
  std::string name;
};

// An op's torch kernel: the call plan (the function, its checks and output rule, the
// environment binding) and what torch's stack needs of it.
struct TorchPlan {
  std::string op;  // "ns::name", for messages
  TPPlanHandle plan;  // one reference, never released (torch may call the kernel until the process ends)
  std::vector<ParamPlan> params;
  size_t n_outputs = 0;               // the tensors the function returns
  std::vector<size_t> written;       // the indices of the written parameters
  bool writes = false;               // a parameter is written
  std::string bridge_kinds;          // one letter per parameter where the compiled bridge can run it, else ""
};

constexpr int32_t kMaxPlans = 1024;
constexpr size_t kBridgeMaxParams = 32;  // torch_bridge.cc's kMaxParams
std::atomic<const TorchPlan*> g_plan_slots[kMaxPlans];
std::mutex g_define_mutex;
int32_t g_next_slot = 0;

[[noreturn]] void Fail(const TorchPlan& plan, const std::string& kind, const std::string& message) {
  throw std::runtime_error(plan.op + "(): " + kind + ": " + message);
}

// ------------------------------------------------------- the call ----
using tensorplug::FrameArray;  // plan.h: the call's arrays, on the heap only past kInlineParams
constexpr size_t kInlineParams = 16;

// What the call owns of the stack until it ends (torch hands the kernel its values): per
// parameter a tensor handle, a list handle or a string handle (nullptr once moved or for
// None).
struct Owned {
  const TorchPlan& plan;
  FrameArray<void*, kInlineParams> by_param;
  Owned(const TorchPlan& p, size_t n) : plan(p), by_param(n) {
    for (size_t i = 0; i < n; ++i) by_param.data[i] = nullptr;
  }
  ~Owned() {
    for (size_t i = 0; i < plan.params.size(); ++i) {
      void* h = by_param.data[i];
      if (h == nullptr) continue;
      switch (plan.params[i].kind) {
        case Kind::kView:
        case Kind::kTensor: g_shim.delete_tensor_object(h); break;
        case Kind::kViews:
        case Kind::kInts: g_shim.delete_list(h); break;
        case Kind::kStr: g_shim.delete_string(h); break;
        default: break;
      }
    }
  }
};

// The handles of list items read so far, deleted at the end: the list's items are the
// kernel's to delete (torch_delete_list frees the list alone).
struct OwnedItems {
  AtenTensorHandle* items;
  size_t n = 0;
  ~OwnedItems() {
    for (size_t j = 0; j < n; ++j) g_shim.delete_tensor_object(items[j]);
  }
};

// An optional's value: nullptr for None, else the boxed StableIValue (freed here).
bool Unbox(StableIValue value, StableIValue* inner) {
  auto* box = reinterpret_cast<StableIValue*>(static_cast<uintptr_t>(value));
  if (box == nullptr) return false;
  *inner = *box;
  if (g_shim.delete_stable_ivalue) {
    g_shim.delete_stable_ivalue(box);
  } else {
    delete box;  // torch < 2.13 boxes with new
  }
  return true;
}

// Releases TPAny values still owned (kTPTensor arguments not yet moved, results).
struct AnyGuard {
  TPAny* values;
  size_t n = 0;
  ~AnyGuard() {
    for (size_t i = 0; i < n; ++i) TPAnyRelease(&values[i]);
  }
};

// The plan's error as torch shows it: "<op>(): <kind>: <what>", or the plan's own text
// for a result that breaks the declaration ("op '<op>' returned ...").
[[noreturn]] void ThrowPlanError(const TorchPlan& plan) {
  const char* kind = "RuntimeError";
  const char* message = "unknown error";
  TPErrorGet(&kind, &message);
  std::string text = message;
  const std::string prefix = plan.op + "(): ";
  if (text.compare(0, prefix.size(), prefix) == 0) text = prefix + kind + ": " + text.substr(prefix.size());
  TPErrorClear();
  throw std::runtime_error(text);
}

// The primary device of a call: the first non-CPU tensor's, else the first tensor's.
struct PrimaryDevice {
  DLDevice device{kDLCPU, 0};
  bool seen = false;
  void Note(DLDevice d) {
    if (!seen || (device.device_type == kDLCPU && d.device_type != kDLCPU)) device = d;
    seen = true;
  }
};

// A scalar parameter's value: the same bits on torch's stable stack and the bridge's.
inline void ScalarArg(Kind kind, StableIValue v, TPAny* a) {
  if (kind == Kind::kInt) {
    a->type_index = kTPInt;
    a->v_int64 = static_cast<int64_t>(v);
  } else if (kind == Kind::kFloat) {
    a->type_index = kTPFloat;
    std::memcpy(&a->v_float64, &v, sizeof a->v_float64);
  } else {  // kBool
    a->type_index = kTPBool;
    a->v_int64 = (v & 0xff) != 0;
  }
}

[[noreturn]] void FailCounts(const TorchPlan& plan, uint64_t num_args, uint64_t num_outputs) {
  Fail(plan, "RuntimeError", "torch passed " + std::to_string(num_args) + " argument(s) and expects " +
                                 std::to_string(num_outputs) + " result(s); the op declares " +
                                 std::to_string(plan.params.size()) + " and " + std::to_string(plan.n_outputs));
}
inline void CheckCounts(const TorchPlan& plan, uint64_t num_args, uint64_t num_outputs) {
  if (num_args != plan.params.size() || num_outputs != plan.n_outputs) FailCounts(plan, num_args, num_outputs);
}

template <class ListItem>
void CallPlan(const TorchPlan& plan, TPAny* args, AnyGuard& guard, DLDevice primary, const StableIValue* values,
              StableIValue* stack, ListItem list_item);

// Runs `plan` on torch's stable `stack` (its values taken) and leaves its results there as
// new handles.
void RunPlan(const TorchPlan& plan, StableIValue* stack, uint64_t num_args, uint64_t num_outputs) {
  const size_t n = plan.params.size();
  CheckCounts(plan, num_args, num_outputs);
  // First: every stack value is taken (owned by `owned`), so that an error below leaks nothing.
  Owned owned(plan, n);
  FrameArray<StableIValue, kInlineParams> values(n);
  size_t total_items = 0, total_ints = 0;
  for (size_t i = 0; i < n; ++i) {
    const ParamPlan& p = plan.params[i];
    StableIValue v = stack[i];
    if (p.optional && !Unbox(stack[i], &v)) v = 0;  // None: no handle (0 is never one)
    values.data[i] = v;
    switch (p.kind) {
      case Kind::kView:
      case Kind::kTensor:
      case Kind::kStr: owned.by_param.data[i] = reinterpret_cast<void*>(static_cast<uintptr_t>(v)); break;
      case Kind::kViews:
      case Kind::kInts: {
        owned.by_param.data[i] = reinterpret_cast<void*>(static_cast<uintptr_t>(v));
        size_t size = 0;
        if (v != 0) g_shim.list_size(owned.by_param.data[i], &size);
        (p.kind == Kind::kViews ? total_items : total_ints) += size;
        break;
      }
      default: break;
    }
  }
  FrameArray<AtenTensorHandle, kInlineParams> item_handles(total_items);
  OwnedItems owned_items{item_handles.data};
  FrameArray<DLTensor, kInlineParams> views(n + total_items);  // one per tensor parameter, then list items
  FrameArray<TPAny, kInlineParams> items(total_items);
  FrameArray<int64_t, 64> ints(total_ints);
  FrameArray<TPArray, kInlineParams> arrays(n);
  FrameArray<TPIntArray, kInlineParams> int_arrays(n);
  FrameArray<TPAny, kInlineParams> args(n);
  size_t items_used = 0, ints_used = 0;

  std::string error;
  PrimaryDevice primary;
  auto arg_error = [&](const ParamPlan& p, const std::string& what) {
    Fail(plan, "TypeError", "argument '" + p.name + "': " + what);
  };
  AnyGuard guard{args.data};
  for (size_t i = 0; i < n; ++i, guard.n = i) {
    const ParamPlan& p = plan.params[i];
    TPAny& a = args.data[i];
    a = TPAny{};
    if (p.optional && stack[i] == 0) continue;  // None
    const StableIValue v = values.data[i];
    switch (p.kind) {
      case Kind::kView: {
        auto h = reinterpret_cast<AtenTensorHandle>(static_cast<uintptr_t>(v));
        if (!Describe(h, &views.data[i], &error)) arg_error(p, error);
        primary.Note(views.data[i].device);
        a.type_index = kTPDLTensorPtr;
        a.v_dltensor = &views.data[i];
        break;
      }
      case Kind::kTensor: {
        // Owning: the stack's handle is moved into the callee.
        auto h = reinterpret_cast<AtenTensorHandle>(static_cast<uintptr_t>(v));
        owned.by_param.data[i] = nullptr;
        DLManagedTensorVersioned* managed = Own(h, &error);
        if (managed == nullptr) arg_error(p, error);
        primary.Note(managed->dl_tensor.device);
        a.type_index = kTPTensor;
        a.v_tensor = managed;
        break;
      }
      case Kind::kInt:
      case Kind::kFloat:
      case Kind::kBool:
        ScalarArg(p.kind, v, &a);
        break;
      case Kind::kStr: {
        // torch's string handle holds a NUL-terminated string, kept until the call ends.
        const char* data = nullptr;
        if (g_shim.string_c_str(reinterpret_cast<StringHandle>(static_cast<uintptr_t>(v)), &data)) {
          arg_error(p, "unreadable string");
        }
        a.type_index = kTPRawStr;
        a.v_c_str = data;
        break;
      }
      case Kind::kDevice: {
        const int32_t type = DLDeviceOf(static_cast<int32_t>(v >> 32));
        const int32_t index = static_cast<int32_t>(v & 0xffffffffu);
        if (type < 0) arg_error(p, "torch device type " + std::to_string(static_cast<int32_t>(v >> 32)) +
                                       " is not supported");
        a.type_index = kTPDevice;
        a.v_device = DLDevice{static_cast<DLDeviceType>(type), index < 0 ? 0 : index};
        break;
      }
      case Kind::kDType: {
        DLDataType dl;
        if (!DLFromTorchDType(static_cast<int32_t>(v), &dl)) {
          arg_error(p, "torch dtype code " + std::to_string(static_cast<int32_t>(v)) + " has no DLPack equivalent");
        }
        a.type_index = kTPDataType;
        a.v_dtype = dl;
        break;
      }
      case Kind::kViews: {
        auto list = reinterpret_cast<StableListHandle>(static_cast<uintptr_t>(v));
        size_t size = 0;
        g_shim.list_size(list, &size);
        TPAny* list_items = items.data + items_used;
        for (size_t j = 0; j < size; ++j) {
          StableIValue item = 0;
          g_shim.list_get_item(list, j, &item);
          auto h = reinterpret_cast<AtenTensorHandle>(static_cast<uintptr_t>(item));
          item_handles.data[owned_items.n++] = h;
          DLTensor& view = views.data[n + items_used + j];
          if (!Describe(h, &view, &error)) arg_error(p, "item " + std::to_string(j) + ": " + error);
          primary.Note(view.device);
          list_items[j] = TPAny{};
          list_items[j].type_index = kTPDLTensorPtr;
          list_items[j].v_dltensor = &view;
        }
        items_used += size;
        arrays.data[i] = TPArray{static_cast<int64_t>(size), list_items};
        a.type_index = kTPArray;
        a.v_array = &arrays.data[i];
        break;
      }
      case Kind::kInts: {
        auto list = reinterpret_cast<StableListHandle>(static_cast<uintptr_t>(v));
        size_t size = 0;
        g_shim.list_size(list, &size);
        int64_t* data = ints.data + ints_used;
        for (size_t j = 0; j < size; ++j) {
          StableIValue item = 0;
          g_shim.list_get_item(list, j, &item);
          data[j] = static_cast<int64_t>(item);
        }
        ints_used += size;
        int_arrays.data[i] = TPIntArray{static_cast<int64_t>(size), data};
        a.type_index = kTPIntArray;
        a.v_int_array = &int_arrays.data[i];
        break;
      }
    }
  }
  CallPlan(plan, args.data, guard, primary.device, values.data, stack, [&](const TPAny& list, size_t j) {
    return item_handles.data[static_cast<size_t>(list.v_array->items - items.data) + j];
  });
}

// The call, once its arguments are read (RunPlan reads torch's stable stack, RunBridged the
// compiled bridge's): evaluates the output rules, binds the stream and allocator, bumps the
// version of every written tensor (`values[i]`, parameter i's handle; `list_item(a, j)`, the
// handle of item j of list argument a), calls the function, checks its results and leaves
// them on `stack` as new handles. `guard` releases `args` until the function takes them.
template <class ListItem>
void CallPlan(const TorchPlan& plan, TPAny* args, AnyGuard& guard, DLDevice primary, const StableIValue* values,
              StableIValue* stack, ListItem list_item) {
  const size_t n = plan.params.size();
  guard.n = n;
  std::string error;

  TPTensorSpec specs[4];
  std::unique_ptr<TPTensorSpec[]> many;
  TPTensorSpec* expected = specs;
  if (plan.n_outputs > 4) expected = (many.reset(new TPTensorSpec[plan.n_outputs]), many.get());
  if (TPPlanPrepare(plan.plan, args, primary, expected) != 0) ThrowPlanError(plan);

  void* stream = nullptr;
  if (primary.device_type == kDLCUDA) {
    if (g_shim.current_cuda_stream == nullptr || g_shim.current_cuda_stream(primary.device_id, &stream) != 0) {
      Fail(plan, "RuntimeError", "torch has no current CUDA stream for device " + std::to_string(primary.device_id));
    }
  }
  // Every tensor the kernel writes has its version counter bumped, as torch's own in-place
  // ops do, so that autograd refuses a backward that saved it. Before the call: a bump that
  // throws (an inference tensor outside InferenceMode) fails it with nothing written.
  // (native.py gives a writing op the Python kernel where torch lacks bump_version.)
  auto bump = [&](const ParamPlan& p, AtenTensorHandle h, size_t item, bool in_list) {
    auto fail = [&](std::string text) {
      const size_t backtrace = text.find("\nException raised from ");  // c10::Error's, when it keeps one
      if (backtrace != std::string::npos) text.resize(backtrace);
      Fail(plan, "RuntimeError", "argument '" + p.name + "'" + (in_list ? " item " + std::to_string(item) : "") +
                                     ": " + text);
    };
    if (g_shim.bump_version == nullptr) fail("this torch lacks torch::autograd::impl::bump_version");
    try {
      g_shim.bump_version(h);
    } catch (const std::exception& e) {
      fail(e.what());
    }
  };
  for (const size_t i : plan.written) {
    const TPAny& a = args[i];
    if (a.type_index == kTPDLTensorPtr) {
      bump(plan.params[i], reinterpret_cast<AtenTensorHandle>(static_cast<uintptr_t>(values[i])), 0, false);
    }
    if (a.type_index != kTPArray) continue;
    for (size_t j = 0; j < static_cast<size_t>(a.v_array->size); ++j) bump(plan.params[i], list_item(a, j), j, true);
  }
  TPAny result;
  const TPPlanBinding binding{primary, stream, TorchAllocator, nullptr};
  const int rc = TPPlanInvoke(plan.plan, args, &binding, expected, &result);
  guard.n = 0;  // owning tensor arguments now belong to the callee
  if (rc != 0) ThrowPlanError(plan);
  AnyGuard result_guard{&result, 1};
  // Results (checked against the rule by the plan): handed to torch on the stack.
  const size_t declared = plan.n_outputs;
  TPAny* results = result.type_index == kTPTuple ? result.v_tuple->items : &result;
  FrameArray<AtenTensorHandle, 8> out(declared);
  for (size_t k = 0; k < declared; ++k) {
    DLManagedTensorVersioned* managed = results[k].v_tensor;
    results[k] = TPAny{};  // consumed by ToTorch
    out.data[k] = ToTorch(managed, &error);
    if (out.data[k] == nullptr) {
      for (size_t j = 0; j < k; ++j) g_shim.delete_tensor_object(out.data[j]);
      throw std::runtime_error("op '" + plan.op + "' " + error);
    }
  }
  for (size_t k = 0; k < declared; ++k) stack[k] = static_cast<StableIValue>(reinterpret_cast<uintptr_t>(out.data[k]));
}

// Runs `plan` on the compiled bridge's stack (torch's values, borrowed: nothing to free):
// plain tensors, as the bridge read them (`facts[i]`, whose views the call borrows), and
// scalars; leaves the results there as new handles.
void RunBridged(const TorchPlan& plan, StableIValue* stack, TensorFacts* facts, uint64_t num_args,
                uint64_t num_outputs) {
  const size_t n = plan.params.size();
  CheckCounts(plan, num_args, num_outputs);
  FrameArray<TPAny, kInlineParams> args(n);
  PrimaryDevice primary;
  for (size_t i = 0; i < n; ++i) {
    const ParamPlan& p = plan.params[i];
    TPAny& a = args.data[i];
    a = TPAny{};
    const StableIValue v = stack[i];
    switch (p.kind) {
      case Kind::kView: {
        if (!FactsOk(facts[i])) Fail(plan, "TypeError", "argument '" + p.name + "': " + FactsError(facts[i]));
        DLTensor* view = &facts[i].view;
        primary.Note(view->device);
        a.type_index = kTPDLTensorPtr;
        a.v_dltensor = view;
        break;
      }
      case Kind::kInt:
      case Kind::kFloat:
      case Kind::kBool:
        ScalarArg(p.kind, v, &a);
        break;
      default:  // never: bridge_kinds holds no other kind
        Fail(plan, "RuntimeError", "the compiled torch bridge cannot pass argument '" + p.name + "'");
    }
  }
  AnyGuard guard{args.data};  // views and scalars: nothing to release
  CallPlan(plan, args.data, guard, primary.device, stack, stack, [](const TPAny&, size_t) -> AtenTensorHandle {
    return nullptr;  // no list arguments
  });
}

// -------------------------------------------------- the Autograd kernel ----
// torch's stable ABI cannot redispatch below autograd (a boxed kernel gets no key set), so
// the op's Autograd kernel passes its stack on to one of two overloads of the same schema
// (torch_compile.py defines them): `<op>.nograd`, whose kernels are the op's own below
// autograd and whose Autograd key is torch's own fallback (C++), and `<op>.grad`, whose
// Autograd kernel is the Python one (torch_autograd.py: the formula, or the redispatch
// below autograd). A call goes to `nograd` only when no gradient is needed and nothing
// below autograd can be Python: no dispatch mode is set (FakeTensorMode, DTensor's,
// a user's) and every tensor has memory of its own (not a subclass or functorch wrapper,
// which have none). Deciding needs no Python and no GIL. Everything else goes to `grad`,
// where Python sees Python's exceptions: an exception that crosses this kernel becomes a
// RuntimeError with its message (torch_call_dispatcher keeps only the text).
//
// The hop to `nograd` is a second trip through torch's dispatcher (torch_call_dispatcher
// looks the schema up by name and converts the stack to IValues and back: about 2,200
// instructions). It buys something only when a dispatch key lies between the Autograd key
// and the backend kernel for this call: a Python tensor subclass, a lazy conjugate,
// negative or zero bit, a functionalization or functorch wrapper, another backend (meta,
// sparse, ...), or such a key included in the thread's dispatch state. When none does, the
// dispatcher would run the op's own CPU or CUDA kernel, RunPlan, which this kernel then
// calls itself (DirectBelow). Deciding that needs each tensor's dispatch key set and the
// thread's included keys, which the shim does not expose; both are read from memory:
// c10::TensorImpl::key_set_ at an offset found on probe tensors whose key sets torch
// reports (direct), and the first word (`included_`, stored XOR-ed with
// torch's default included set) of libc10's exported thread-local
// c10::impl::raw_local_dispatch_key_set. Neither layout is a promise of torch: both are
// checked against torch's own report when the direct call is enabled (native.py),
// and without a match every call keeps the hop.
constexpr const char* kNoGradOverload = "nograd";
constexpr const char* kGradOverload = "grad";
constexpr const char* kThreadKeysSymbol = "_ZN3c104impl26raw_local_dispatch_key_setE";

struct DirectBelow {
  size_t key_set_offset = 0;      // of c10::TensorImpl::key_set_
  uint64_t plain_keys = 0;        // every key a plain dense CPU or CUDA tensor has (raw DispatchKeySet)
  uint64_t included_xor = 0;      // the thread's included keys = raw included_ ^ this
  uint64_t included_refused = 0;  // keys below autograd (not the backend's) the thread must not include
  uint64_t conjugate_key = 0, negative_key = 0;  // torch's lazy bits (DirectBelow refuses them on written tensors)
  void* thread_keys_library = nullptr;  // the library exporting kThreadKeysSymbol
};
DirectBelow g_direct;
std::atomic<bool> g_direct_on{false};  // g_direct is set, and the direct call taken

// The calling thread's raw included keys (its own copy of libc10's thread-local; dlsym
// returns the calling thread's address of a TLS symbol).
const uint64_t* ThreadIncludedKeys() {
  thread_local const uint64_t* keys = nullptr;
  if (keys == nullptr) keys = static_cast<const uint64_t*>(dlsym(g_direct.thread_keys_library, kThreadKeysSymbol));
  return keys;
}

// What the Autograd kernel learns of a call's tensor arguments.
struct ArgumentKeys {
  bool grad = false;  // one requires grad
  uint64_t keys = 0;  // the union of their dispatch key sets (read when the direct call is on)
};

// The dispatch key set of the tensor behind `handle` (the direct call is on).
uint64_t KeysOf(const void* impl) {
  uint64_t keys;
  std::memcpy(&keys, static_cast<const char*>(impl) + g_direct.key_set_offset, sizeof keys);
  return keys;
}

// Calls visit(param, handle, item) for each tensor argument on `stack` (each written one
// where `written_only`; `item` the index in a list, else -1), read, never taken: the
// stack's values, list items included, belong to whoever runs the call. Stops, returning
// false, when `visit` does.
template <class Visit>
bool ForEachTensor(const TorchPlan& plan, const StableIValue* stack, bool written_only, Visit visit) {
  for (size_t i = 0; i < plan.params.size(); ++i) {
    const ParamPlan& p = plan.params[i];
    if (p.kind != Kind::kView && p.kind != Kind::kTensor && p.kind != Kind::kViews) continue;
    if (written_only && !p.written) continue;
    StableIValue v = stack[i];
    if (p.optional) {  // a box, or 0 for None
      if (v == 0) continue;
      v = *reinterpret_cast<const StableIValue*>(static_cast<uintptr_t>(v));
    }
    if (p.kind != Kind::kViews) {
      if (!visit(p, v, int64_t{-1})) return false;
      continue;
    }
    auto list = reinterpret_cast<StableListHandle>(static_cast<uintptr_t>(v));
    size_t size = 0;
    g_shim.list_size(list, &size);
    for (size_t j = 0; j < size; ++j) {
      StableIValue item = 0;
      g_shim.list_get_item(list, j, &item);
      if (!visit(p, item, static_cast<int64_t>(j))) return false;
    }
  }
  return true;
}

// Whether tensor `handle` (0: None) is a plain tensor (memory of its own); notes its keys.
// `facts`: what the compiled bridge read of it already (its data pointer), else nullptr.
bool PlainTensor(StableIValue handle, bool read_keys, ArgumentKeys* seen, const TensorFacts* facts) {
  if (handle == 0) return true;
  auto h = reinterpret_cast<AtenTensorHandle>(static_cast<uintptr_t>(handle));
  const void* impl = *reinterpret_cast<void* const*>(h);
  if (impl != nullptr) {
    if (g_shim.impl_requires_grad(impl)) seen->grad = true;
    if (read_keys) seen->keys |= KeysOf(impl);
  }
  if (facts != nullptr) return facts->readable != 0 && facts->view.data != nullptr;
  void* data = nullptr;
  return g_shim.get_data_ptr(h, &data) == 0 && data != nullptr;
}

// Whether every tensor argument on `stack` is plain. `facts`: the compiled bridge's reads,
// one per parameter (its plans take plain tensors and scalars, none optional), or nullptr.
bool PlainArguments(const TorchPlan& plan, const StableIValue* stack, bool read_keys, ArgumentKeys* seen,
                    const TensorFacts* facts) {
  return ForEachTensor(plan, stack, false, [&](const ParamPlan& p, StableIValue h, int64_t) {
    return PlainTensor(h, read_keys, seen, facts != nullptr ? &facts[&p - plan.params.data()] : nullptr);
  });
}

// Whether nothing lies between the Autograd key and the backend kernel for tensors with
// `keys` on this thread (the direct call is on).
bool NothingBelowAutograd(uint64_t keys) {
  if ((keys & ~g_direct.plain_keys) != 0) return false;
  const uint64_t* included = ThreadIncludedKeys();
  return included != nullptr && ((*included ^ g_direct.included_xor) & g_direct.included_refused) == 0;
}

// Releases every value of `stack` (this kernel owns them, as RunPlan does) for a call that
// is refused before it runs.
void ReleaseStack(const TorchPlan& plan, const StableIValue* stack) {
  Owned owned(plan, plan.params.size());  // deletes the handles noted below
  for (size_t i = 0; i < plan.params.size(); ++i) {
    const ParamPlan& p = plan.params[i];
    StableIValue v = stack[i];
    if (p.optional && !Unbox(stack[i], &v)) continue;  // None
    if (p.kind != Kind::kView && p.kind != Kind::kTensor && p.kind != Kind::kViews && p.kind != Kind::kInts &&
        p.kind != Kind::kStr) {
      continue;
    }
    owned.by_param.data[i] = reinterpret_cast<void*>(static_cast<uintptr_t>(v));
    if (p.kind != Kind::kViews) continue;
    size_t size = 0;  // a list's items are the kernel's to delete (torch_delete_list frees the list alone)
    g_shim.list_size(owned.by_param.data[i], &size);
    for (size_t j = 0; j < size; ++j) {
      StableIValue item = 0;
      g_shim.list_get_item(owned.by_param.data[i], j, &item);
      g_shim.delete_tensor_object(reinterpret_cast<AtenTensorHandle>(static_cast<uintptr_t>(item)));
    }
  }
}

// Refuses a written tensor argument with a lazy conjugate or negative bit (the direct call
// is on): the kernel would write its memory, which does not hold its values. Below
// autograd torch's fallbacks would run the op on a resolved copy and then fail for want of
// an out= result ("Expected Tensor but got None", naming neither op nor argument); this
// names both, in the words of the plain call's refusal (torch_lazy_views.cc), and releases
// the stack.
void RefuseLazyWrites(const TorchPlan& plan, const StableIValue* stack, bool borrowed) {
  std::string refusal;
  ForEachTensor(plan, stack, true, [&](const ParamPlan& p, StableIValue handle, int64_t item) {
    const void* impl = handle != 0 ? *reinterpret_cast<void* const*>(static_cast<uintptr_t>(handle)) : nullptr;
    const uint64_t keys = impl != nullptr ? KeysOf(impl) : 0;
    const char* what = (keys & g_direct.conjugate_key)  ? kTorchConjugateView
                       : (keys & g_direct.negative_key) ? kTorchNegativeView
                                                        : nullptr;
    if (what == nullptr) return true;
    refusal = "argument '" + p.name + "'" + (item >= 0 ? " item " + std::to_string(item) : "") + ": " +
              TP_LAZY_VIEW_EXPECTED + what;
    return false;
  });
  if (!refusal.empty()) {
    if (!borrowed) ReleaseStack(plan, stack);
    Fail(plan, "ValueError", refusal);
  }
}

// The text of the last exception this thread's tensorplug torch code raised: a handler's
// (HandlerAt), or the Python Autograd kernel's of `grad` (note_raised, in
// torch_autograd.py). A torch before 2.13 has no torch_exception_get_what_without_backtrace:
// its torch_call_dispatcher keeps no text, and the caller gets this one instead. Cleared
// before each hop, so that it is never an earlier call's.
thread_local std::string t_raised;
std::atomic<bool> g_shim_text_on{true};  // torch's text taken where its shim keeps one (tests turn it off)

// The text of the exception torch_call_dispatcher caught: a Python exception's as
// "<Kind>: <message>" (pybind11's form, with its traceback after "\n\nAt:\n" cut off),
// the kind dropped where it is RuntimeError, the type the caller gets. torch's own text
// where its shim keeps one, else the text tensorplug's code noted when it raised.
std::string CaughtMessage(const TorchPlan& plan, const char* overload) {
  const bool shim_text = g_shim.exception_what != nullptr && g_shim_text_on.load(std::memory_order_relaxed);
  const char* what = shim_text ? g_shim.exception_what() : nullptr;
  std::string text = what != nullptr ? what : t_raised;
  const size_t traceback = text.find("\n\nAt:\n");
  if (traceback != std::string::npos) text.resize(traceback);
  constexpr const char kRuntimeError[] = "RuntimeError: ";
  if (text.compare(0, sizeof kRuntimeError - 1, kRuntimeError) == 0) text.erase(0, sizeof kRuntimeError - 1);
  if (text.empty()) text = plan.op + "." + overload + " failed in torch's dispatcher, which kept no message";
  return text;
}

// The Autograd kernel's call. Returns the overload a borrowed stack's call passes on to
// (the compiled bridge calls it on torch's stack), else nullptr.
const char* RunAutograd(const TorchPlan& plan, StableIValue* stack, uint64_t num_args, uint64_t num_outputs,
                        bool borrowed, TensorFacts* facts = nullptr) {
  const bool direct = g_direct_on.load(std::memory_order_acquire);
  ArgumentKeys seen;
  const bool no_grad_path = num_args == plan.params.size() && !g_shim.any_dispatch_mode(false) &&
                            PlainArguments(plan, stack, direct, &seen, borrowed ? facts : nullptr) &&
                            !(seen.grad && g_shim.grad_mode_is_enabled());
  if (no_grad_path && direct && NothingBelowAutograd(seen.keys)) {
    // What the dispatcher would reach through `nograd`.
    if (borrowed) {
      RunBridged(plan, stack, facts, num_args, num_outputs);
    } else {
      RunPlan(plan, stack, num_args, num_outputs);
    }
    return nullptr;
  }
  if (direct && plan.writes && num_args == plan.params.size()) RefuseLazyWrites(plan, stack, borrowed);
  const char* overload = no_grad_path ? kNoGradOverload : kGradOverload;
  if (borrowed) return overload;
  // The call takes the stack's values and leaves the results on it, as this kernel must.
  t_raised.clear();
  if (g_shim.call_dispatcher(plan.op.c_str(), overload, stack, kTorch210) != 0) {
    throw std::runtime_error(CaughtMessage(plan, overload));
  }
  return nullptr;
}

// The boxed kernel of slot kSlot: `kRun` (RunPlan, or RunAutograd) on the slot's plan.
using PlanRunner = void (*)(const TorchPlan&, StableIValue*, uint64_t, uint64_t);
template <PlanRunner kRun, int32_t kSlot>
void HandlerAt(StableIValue* stack, uint64_t num_args, uint64_t num_outputs) {
  const TorchPlan* plan = g_plan_slots[kSlot].load(std::memory_order_acquire);
  if (plan == nullptr) throw std::runtime_error("tensorplug torch kernel " + std::to_string(kSlot) + " has no plan");
  try {
    kRun(*plan, stack, num_args, num_outputs);
  } catch (const std::exception& e) {
    t_raised = e.what();  // for a hop above this one whose torch keeps no text (CaughtMessage)
    throw;
  }
}

void RunAutogradStable(const TorchPlan& plan, StableIValue* stack, uint64_t num_args, uint64_t num_outputs) {
  RunAutograd(plan, stack, num_args, num_outputs, false);
}

template <PlanRunner kRun, size_t... kSlots>
constexpr std::array<BoxedKernel, sizeof...(kSlots)> MakeHandlers(std::index_sequence<kSlots...>) {
  return {&HandlerAt<kRun, static_cast<int32_t>(kSlots)>...};
}
constexpr auto kHandlers = MakeHandlers<RunPlan>(std::make_index_sequence<kMaxPlans>{});
constexpr auto kAutogradHandlers = MakeHandlers<RunAutogradStable>(std::make_index_sequence<kMaxPlans>{});

// ------------------------------------------------- the compiled bridge ----
// torch_bridge.cc (built at run time against the torch in hand, torch_bridge.py) registers
// its own boxed kernels for ops whose parameters are all plain tensors and scalars: it
// passes torch's stack on borrowed, and calls the plan here. Plain C both ways.
constexpr int32_t kBridgeInterface = 2;
thread_local std::string t_bridge_error;

// 0: ran (results in values[0..num_outputs)); 1: the Autograd kernel passes the call on to
// overload *hop; -1: failed, the message in BridgeErrorText(). `facts[i]`: what the bridge
// read of tensor argument i.
int BridgeRun(int32_t slot, int32_t autograd, StableIValue* values, TensorFacts* facts, uint64_t num_args,
              uint64_t num_outputs, const char** hop) {
  const TorchPlan* plan = slot >= 0 && slot < kMaxPlans ? g_plan_slots[slot].load(std::memory_order_acquire) : nullptr;
  try {
    if (plan == nullptr || plan->bridge_kinds.size() != num_args) {
      throw std::runtime_error("tensorplug torch kernel " + std::to_string(slot) + " has no plan the bridge can run");
    }
    *hop = nullptr;
    if (autograd) {
      *hop = RunAutograd(*plan, values, num_args, num_outputs, true, facts);
    } else {
      RunBridged(*plan, values, facts, num_args, num_outputs);
    }
    return *hop != nullptr ? 1 : 0;
  } catch (const std::exception& e) {
    t_bridge_error = e.what();
    return -1;
  }
}

const char* BridgeErrorText() { return t_bridge_error.c_str(); }

// ------------------------------------------------------------ Python ----
template <class F>
bool Resolve(void* const* libs, size_t n, const char* name, F* out) {
  for (size_t i = 0; i < n; ++i) {
    if (void* symbol = dlsym(libs[i], name)) {
      *out = reinterpret_cast<F>(symbol);
      return true;
    }
  }
  *out = nullptr;
  return false;
}

// load(paths) -> None, or the names of the missing required symbols (a
// str): resolves the shim in the already-loaded libraries `paths` (never loads one).
PyObject* LoadPy(PyObject*, PyObject* paths) {
  std::lock_guard<std::mutex> lock(g_define_mutex);
  if (g_shim_ready.load()) Py_RETURN_NONE;
  PyObject* seq = PySequence_Fast(paths, "load(): expected a sequence of paths");
  if (seq == nullptr) return nullptr;
  std::vector<void*> libs;
  for (Py_ssize_t i = 0; i < PySequence_Fast_GET_SIZE(seq); ++i) {
    const char* path = PyUnicode_AsUTF8(PySequence_Fast_GET_ITEM(seq, i));
    if (path == nullptr) {
      Py_DECREF(seq);
      return nullptr;
    }
    if (void* lib = dlopen(path, RTLD_NOW | RTLD_NOLOAD | RTLD_LOCAL)) libs.push_back(lib);
  }
  Py_DECREF(seq);
  ShimTable t{};
  std::string missing;
  auto need = [&](const char* name, auto* slot) {
    if (!Resolve(libs.data(), libs.size(), name, slot)) missing += (missing.empty() ? "" : ", ") + std::string(name);
  };
  need("aoti_torch_library_init_impl", &t.library_init_impl);
  need("torch_library_impl", &t.library_impl);
  need("aoti_torch_delete_tensor_object", &t.delete_tensor_object);
  need("aoti_torch_get_data_ptr", &t.get_data_ptr);
  need("aoti_torch_get_dim", &t.get_dim);
  need("aoti_torch_get_sizes", &t.get_sizes);
  need("aoti_torch_get_strides", &t.get_strides);
  need("aoti_torch_get_dtype", &t.get_dtype);
  need("aoti_torch_get_device_type", &t.get_device_type);
  need("aoti_torch_get_device_index", &t.get_device_index);
  need("aoti_torch_empty_strided", &t.empty_strided);
  need("torch_list_size", &t.list_size);
  need("torch_list_get_item", &t.list_get_item);
  need("torch_delete_list", &t.delete_list);
  need("torch_string_length", &t.string_length);
  need("torch_string_c_str", &t.string_c_str);
  need("torch_delete_string", &t.delete_string);
  need("aoti_torch_device_type_cpu", &t.device_type_cpu);
  need("aoti_torch_device_type_cuda", &t.device_type_cuda);
  need("aoti_torch_layout_strided", &t.layout_strided);
  static const std::pair<const char*, DLDataType> kDTypeGetters[] = {
      {"aoti_torch_dtype_bool", {kDLBool, 8, 1}},        {"aoti_torch_dtype_uint8", {kDLUInt, 8, 1}},
      {"aoti_torch_dtype_uint16", {kDLUInt, 16, 1}},     {"aoti_torch_dtype_uint32", {kDLUInt, 32, 1}},
      {"aoti_torch_dtype_uint64", {kDLUInt, 64, 1}},     {"aoti_torch_dtype_int8", {kDLInt, 8, 1}},
      {"aoti_torch_dtype_int16", {kDLInt, 16, 1}},       {"aoti_torch_dtype_int32", {kDLInt, 32, 1}},
      {"aoti_torch_dtype_int64", {kDLInt, 64, 1}},       {"aoti_torch_dtype_float16", {kDLFloat, 16, 1}},
      {"aoti_torch_dtype_float32", {kDLFloat, 32, 1}},   {"aoti_torch_dtype_float64", {kDLFloat, 64, 1}},
      {"aoti_torch_dtype_bfloat16", {kDLBfloat, 16, 1}}, {"aoti_torch_dtype_complex64", {kDLComplex, 64, 1}},
      {"aoti_torch_dtype_complex128", {kDLComplex, 128, 1}},
  };
  std::vector<DTypePair> dtypes;
  for (const auto& [name, dl] : kDTypeGetters) {
    int32_t (*getter)() = nullptr;
    if (Resolve(libs.data(), libs.size(), name, &getter)) dtypes.push_back(DTypePair{getter(), dl});
  }
  if (!missing.empty()) return PyUnicode_FromString(missing.c_str());
  Resolve(libs.data(), libs.size(), "torch_delete_stable_ivalue", &t.delete_stable_ivalue);
  Resolve(libs.data(), libs.size(), "torch_from_blob", &t.from_blob);
  Resolve(libs.data(), libs.size(), "aoti_torch_get_current_cuda_stream", &t.current_cuda_stream);
  Resolve(libs.data(), libs.size(), "torch_call_dispatcher", &t.call_dispatcher);
  Resolve(libs.data(), libs.size(), "aoti_torch_grad_mode_is_enabled", &t.grad_mode_is_enabled);
  Resolve(libs.data(), libs.size(), "torch_exception_get_what_without_backtrace", &t.exception_what);
  Resolve(libs.data(), libs.size(), "_ZNK3c1010TensorImpl13requires_gradEv", &t.impl_requires_grad);
  Resolve(libs.data(), libs.size(), "_ZN3c104impl20TorchDispatchModeTLS13any_modes_setEb", &t.any_dispatch_mode);
  for (void* lib : libs) {
    if (dlsym(lib, kThreadKeysSymbol) != nullptr) {
      g_direct.thread_keys_library = lib;
      break;
    }
  }
  Resolve(libs.data(), libs.size(), "_ZN5torch8autograd4impl12bump_versionERKN2at6TensorE", &t.bump_version);
  g_shim = t;
  for (const DTypePair& p : dtypes) {
    if (p.torch >= 0 && p.torch < kDTypeCodes) g_dl_of_torch_dtype[p.torch] = p.dl;
  }
  g_dtypes = std::move(dtypes);
  g_torch_cpu = t.device_type_cpu();
  g_torch_cuda = t.device_type_cuda();
  g_shim_ready.store(true);
  Py_RETURN_NONE;
}

// define(plan) -> slot: the torch kernel of a call plan (a capsule of
// tensorplug.plans.make: the function, its parameters and output rule).
PyObject* DefinePy(PyObject*, PyObject* capsule) {
  auto* handle = PlanOfCapsule(capsule, "define");
  if (handle == nullptr) return nullptr;
  auto plan = std::make_unique<TorchPlan>();
  plan->op = TPPlanGetName(handle);
  int32_t count = 0;
  const TPPlanParam* params = TPPlanGetParams(handle, &count);
  for (int32_t i = 0; i < count; ++i) {
    const TPPlanParam& p = params[i];
    plan->params.push_back(ParamPlan{static_cast<Kind>(p.kind), p.optional != 0, p.written != 0, p.name});
    plan->writes = plan->writes || p.written;
    if (p.written) plan->written.push_back(static_cast<size_t>(i));
  }
  plan->n_outputs = static_cast<size_t>(TPPlanGetNumOutputs(handle));
  const char* name = plan->op.c_str();
  std::lock_guard<std::mutex> lock(g_define_mutex);
  if (g_next_slot >= kMaxPlans) {
    PyErr_Format(PyExc_RuntimeError, "tensorplug: at most %d ops get native torch kernels in one process; '%s' is "
                 "one more", kMaxPlans, name);
    return nullptr;
  }
  // The compiled bridge passes plain tensors and scalars, none optional (torch_bridge.cc).
  std::string kinds;
  for (const ParamPlan& p : plan->params) {
    const char letter = p.optional         ? 0
                        : p.kind == Kind::kView  ? 't'
                        : p.kind == Kind::kInt   ? 'i'
                        : p.kind == Kind::kFloat ? 'f'
                        : p.kind == Kind::kBool  ? 'b'
                                                 : 0;
    if (letter == 0 || kinds.size() == kBridgeMaxParams) {
      kinds.clear();
      break;
    }
    kinds += letter;
  }
  plan->bridge_kinds = plan->params.empty() ? "" : kinds;
  TPPlanRetain(handle);
  plan->plan = handle;
  const int32_t slot = g_next_slot++;
  g_plan_slots[slot].store(plan.release(), std::memory_order_release);
  return PyLong_FromLong(slot);
}

bool HasAutograd() {
  return g_shim_ready.load() && g_shim.call_dispatcher != nullptr && g_shim.grad_mode_is_enabled != nullptr &&
         g_shim.impl_requires_grad != nullptr && g_shim.any_dispatch_mode != nullptr;
}

// register(slot, namespace, dispatch_key, name): the slot's kernel as the
// `dispatch_key` kernel of operator `namespace::name` (an overload: "name.overload"); for
// key "Autograd", the slot's Autograd kernel (RunAutograd).
PyObject* RegisterPy(PyObject*, PyObject* args) {
  int slot;
  const char *ns, *key, *name;
  if (!PyArg_ParseTuple(args, "isss:register", &slot, &ns, &key, &name)) return nullptr;
  const bool autograd = strcmp(key, "Autograd") == 0;
  if (autograd && !HasAutograd()) {
    PyErr_SetString(PyExc_RuntimeError, "register(): this torch lacks what the native Autograd kernel "
                    "needs (torch_call_dispatcher, aoti_torch_grad_mode_is_enabled, c10::TensorImpl::requires_grad, "
                    "c10::impl::TorchDispatchModeTLS::any_modes_set)");
    return nullptr;
  }
  if (!g_shim_ready.load()) {
    PyErr_SetString(PyExc_RuntimeError, "register(): the torch shim is not loaded");
    return nullptr;
  }
  if (slot < 0 || slot >= kMaxPlans || g_plan_slots[slot].load() == nullptr) {
    PyErr_Format(PyExc_ValueError, "register(): no plan in slot %d", slot);
    return nullptr;
  }
  std::lock_guard<std::mutex> lock(g_define_mutex);
  // One library per namespace and key, kept for the process (deleting it would remove
  // the kernels registered through it).
  static auto* libraries = new std::unordered_map<std::string, TorchLibraryHandle>();
  TorchLibraryHandle& lib = (*libraries)[std::string(ns) + "/" + key];
  if (lib == nullptr && g_shim.library_init_impl(ns, key, __FILE__, __LINE__, &lib) != 0) {
    lib = nullptr;
    PyErr_Format(PyExc_RuntimeError, "torch refused a library for namespace '%s' and key '%s'", ns, key);
    return nullptr;
  }
  if (g_shim.library_impl(lib, name, (autograd ? kAutogradHandlers : kHandlers)[slot], kTorch210) != 0) {
    PyErr_Format(PyExc_RuntimeError, "torch refused the native kernel of '%s::%s' for key '%s'", ns, name, key);
    return nullptr;
  }
  Py_RETURN_NONE;
}

PyObject* HasAutogradPy(PyObject*, PyObject*) { return PyBool_FromLong(HasAutograd()); }

// bridge_entry() -> (interface, run, error_text, dtypes, num_dtypes): the
// compiled bridge's interface version, the addresses of BridgeRun and BridgeErrorText, and
// the DLPack type of each torch dtype code (g_dl_of_torch_dtype), for its init.
PyObject* BridgeEntryPy(PyObject*, PyObject*) {
  return Py_BuildValue("(iKKKi)", kBridgeInterface,
                       static_cast<unsigned long long>(reinterpret_cast<uintptr_t>(&BridgeRun)),
                       static_cast<unsigned long long>(reinterpret_cast<uintptr_t>(&BridgeErrorText)),
                       static_cast<unsigned long long>(reinterpret_cast<uintptr_t>(g_dl_of_torch_dtype.data())),
                       kDTypeCodes);
}

// bridge_read(address): Describe reads tensors through the compiled bridge's
// tp_torch_bridge_read at `address` (0: through the shim again).
PyObject* BridgeReadPy(PyObject*, PyObject* address) {
  const unsigned long long value = PyLong_AsUnsignedLongLong(address);
  if (PyErr_Occurred()) return nullptr;
  g_bridge_read.store(reinterpret_cast<BridgeRead>(static_cast<uintptr_t>(value)), std::memory_order_release);
  Py_RETURN_NONE;
}

// bridge_kinds(slot) -> str: the parameter letters the compiled bridge passes
// for the slot's plan, "" where it cannot run it.
PyObject* BridgeKindsPy(PyObject*, PyObject* slot_obj) {
  const long slot = PyLong_AsLong(slot_obj);
  if (PyErr_Occurred()) return nullptr;
  const TorchPlan* plan = slot >= 0 && slot < kMaxPlans ? g_plan_slots[slot].load() : nullptr;
  if (plan == nullptr) return PyErr_Format(PyExc_ValueError, "bridge_kinds(): no plan in slot %ld", slot);
  return PyUnicode_FromString(plan->bridge_kinds.c_str());
}
PyObject* HasBumpVersionPy(PyObject*, PyObject*) {
  return PyBool_FromLong(g_shim_ready.load() && g_shim.bump_version != nullptr);
}

// thread_keys() -> int or None: the calling thread's raw `included_` word of
// c10::impl::raw_local_dispatch_key_set (None where libc10 does not export it), for
// native.py to check its encoding against torch's own report.
PyObject* ThreadKeysPy(PyObject*, PyObject*) {
  if (!g_shim_ready.load() || g_direct.thread_keys_library == nullptr) Py_RETURN_NONE;
  const uint64_t* keys = ThreadIncludedKeys();
  if (keys == nullptr) Py_RETURN_NONE;
  return PyLong_FromUnsignedLongLong(*keys);
}

// The offset of c10::TensorImpl::key_set_: the one 8-byte-aligned offset inside every
// probe's TensorImpl allocation (malloc_usable_size bounds the reads) that holds its key
// set; 0 when none or several do.
size_t FindKeySetOffset(const std::vector<std::pair<const char*, uint64_t>>& probes) {
  size_t limit = 1024;
  for (const auto& probe : probes) limit = std::min(limit, malloc_usable_size(const_cast<char*>(probe.first)));
  size_t found = 0, matches = 0;
  for (size_t offset = sizeof(void*); offset + sizeof(uint64_t) <= limit; offset += sizeof(uint64_t)) {
    bool all = true;
    for (const auto& [impl, keys] : probes) {
      uint64_t word;
      std::memcpy(&word, impl + offset, sizeof word);
      all = all && word == keys;
    }
    if (all) found = offset, ++matches;
  }
  return matches == 1 ? found : 0;
}

// direct(tensor_type, probes, plain_keys, included_xor, included_refused,
// conjugate_key, negative_key) -> bool: turn the Autograd kernel's direct call on (DirectBelow). `probes`: (tensor, raw key
// set as torch reports it) pairs of tensors with distinct key sets, which find
// TensorImpl::key_set_; the other three are DirectBelow's fields, which native.py
// computes and checks from torch's Python API. False (and the hop kept) when no offset
// fits the probes or the thread keys are not exported.
PyObject* DirectPy(PyObject*, PyObject* args) {
  PyObject *tensor_type, *probes;
  unsigned long long plain_keys, included_xor, included_refused, conjugate_key, negative_key;
  if (!PyArg_ParseTuple(args, "O!OKKKKK:direct", &PyType_Type, &tensor_type, &probes, &plain_keys,
                        &included_xor, &included_refused, &conjugate_key, &negative_key)) {
    return nullptr;
  }
  if (!HasAutograd() || g_direct.thread_keys_library == nullptr) Py_RETURN_FALSE;
  PyObject* seq = PySequence_Fast(probes, "direct(): probes must be a sequence of (tensor, keys)");
  if (seq == nullptr) return nullptr;
  std::vector<std::pair<const char*, uint64_t>> impls;  // the tensors stay alive in `probes`
  for (Py_ssize_t i = 0; i < PySequence_Fast_GET_SIZE(seq); ++i) {
    PyObject* tensor;
    unsigned long long keys;
    if (!PyArg_ParseTuple(PySequence_Fast_GET_ITEM(seq, i), "OK", &tensor, &keys)) {
      Py_DECREF(seq);
      return nullptr;
    }
    if (!PyObject_TypeCheck(tensor, reinterpret_cast<PyTypeObject*>(tensor_type))) {
      Py_DECREF(seq);
      return PyErr_Format(PyExc_TypeError, "direct(): probe %zd is a %s, not a tensor", i,
                          Py_TYPE(tensor)->tp_name);
    }
    PyObject* cdata = PyObject_GetAttrString(tensor, "_cdata");  // the TensorImpl's address
    void* impl = cdata != nullptr ? PyLong_AsVoidPtr(cdata) : nullptr;
    Py_XDECREF(cdata);
    if (impl == nullptr) {
      Py_DECREF(seq);
      if (PyErr_Occurred()) return nullptr;
      Py_RETURN_FALSE;
    }
    impls.emplace_back(static_cast<const char*>(impl), keys);
  }
  const size_t offset = impls.size() >= 2 ? FindKeySetOffset(impls) : 0;
  Py_DECREF(seq);
  if (offset == 0) Py_RETURN_FALSE;
  std::lock_guard<std::mutex> lock(g_define_mutex);
  g_direct.key_set_offset = offset;
  g_direct.plain_keys = plain_keys;
  g_direct.included_xor = included_xor;
  g_direct.included_refused = included_refused;
  g_direct.conjugate_key = conjugate_key;
  g_direct.negative_key = negative_key;
  g_direct_on.store(true, std::memory_order_release);
  Py_RETURN_TRUE;
}

// direct_off(): every call hops to `nograd` again (tests compare the paths).
PyObject* DirectOffPy(PyObject*, PyObject*) {
  g_direct_on.store(false, std::memory_order_release);
  Py_RETURN_NONE;
}

// note_raised(text): note the text of an exception the Python Autograd kernel
// is raising, for the native Autograd kernel's hop above it (t_raised).
PyObject* NoteRaisedPy(PyObject*, PyObject* text) {
  Py_ssize_t size = 0;
  const char* data = PyUnicode_AsUTF8AndSize(text, &size);
  if (data == nullptr) return nullptr;
  t_raised.assign(data, static_cast<size_t>(size));
  Py_RETURN_NONE;
}

// shim_text(on): whether a failed hop reports torch's text where its shim keeps
// one (True, the default), or always tensorplug's noted text, as before torch 2.13.
PyObject* ShimTextPy(PyObject*, PyObject* on) {
  const int truth = PyObject_IsTrue(on);
  if (truth < 0) return nullptr;
  g_shim_text_on.store(truth != 0, std::memory_order_relaxed);
  Py_RETURN_NONE;
}

PyMethodDef kKernelMethods[] = {
    {"load", GuardedMethod<LoadPy>(), METH_O,
     "load(paths) -> None, or the missing shim symbols (str)"},
    {"define", GuardedMethod<DefinePy>(), METH_O,
     "define(plan) -> slot: the native torch kernel of a call plan (tensorplug.plans.make)"},
    {"register", GuardedMethod<RegisterPy>(), METH_VARARGS,
     "register(slot, namespace, dispatch_key, name): register the slot's kernel with torch"},
    {"has_autograd", GuardedMethod<HasAutogradPy>(), METH_NOARGS,
     "has_autograd() -> bool: whether the loaded torch has what the native Autograd kernel needs"},
    {"thread_keys", GuardedMethod<ThreadKeysPy>(), METH_NOARGS,
     "thread_keys() -> int or None: the calling thread's raw included dispatch keys"},
    {"direct", GuardedMethod<DirectPy>(), METH_VARARGS,
     "direct(tensor_type, probes, plain_keys, included_xor, included_refused, conjugate_key, "
     "negative_key) -> bool: "
     "the Autograd kernel's direct call below autograd, on"},
    {"direct_off", GuardedMethod<DirectOffPy>(), METH_NOARGS,
     "direct_off(): the Autograd kernel's direct call off"},
    {"has_bump_version", GuardedMethod<HasBumpVersionPy>(), METH_NOARGS,
     "has_bump_version() -> bool: whether the native kernel can bump the version of a tensor it writes"},
    {"note_raised", GuardedMethod<NoteRaisedPy>(), METH_O,
     "note_raised(text): the text of the exception a Python Autograd kernel raises, for torch < 2.13"},
    {"bridge_entry", GuardedMethod<BridgeEntryPy>(), METH_NOARGS,
     "bridge_entry() -> (interface, run, error_text): what the compiled torch bridge calls"},
    {"bridge_read", GuardedMethod<BridgeReadPy>(), METH_O,
     "bridge_read(address): tensors read through the compiled bridge's reader (0: the shim's)"},
    {"bridge_kinds", GuardedMethod<BridgeKindsPy>(), METH_O,
     "bridge_kinds(slot) -> str: the parameter kinds the compiled bridge passes, '' if it cannot"},
    {"shim_text", GuardedMethod<ShimTextPy>(), METH_O,
     "shim_text(on): whether a failed hop reports torch's own text where its shim keeps one"},
    {nullptr, nullptr, 0, nullptr},
};

}  // namespace

bool InitKernel(PyObject* module) { return PyModule_AddFunctions(module, kKernelMethods) == 0; }

}  // namespace tensorplug_adapters::torch
