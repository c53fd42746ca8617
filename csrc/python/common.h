// Shared declarations of the Python extension (_core).
#pragma once
#include <Python.h>

#include <atomic>
#include <cstdint>
#include <exception>
#include <memory>
#include <new>
#include <string>
#include <type_traits>
#include <vector>

#include "tensorplug/c_api.h"
#include "tensorplug/plan.h"

namespace tensorplug::py {

// ----------------------------------------------------- C++ exception barrier ----
// No C++ exception may cross into CPython (or into C code calling our exchange tables):
// every function CPython or C calls is registered through Guarded<F>, which catches
// everything. std::bad_alloc becomes MemoryError, anything else RuntimeError; functions
// returning void (deallocators, capsule destructors, deleters) report nothing.
void SetErrorFromCxxException() noexcept;  // inside a catch block only
template <class R>
inline R GuardFailure() noexcept {
  if constexpr (std::is_pointer_v<R>) {
    return nullptr;
  } else if constexpr (std::is_same_v<R, bool>) {
    return false;
  } else if constexpr (!std::is_void_v<R>) {
    return R(-1);
  }
}
template <auto F>
struct GuardOf;
template <class R, class... A, R (*F)(A...)>
struct GuardOf<F> {
  static R Call(A... args) noexcept {
    try {
      return F(args...);
    } catch (...) {
      if constexpr (!std::is_void_v<R>) {
        SetErrorFromCxxException();
        return GuardFailure<R>();
      }
    }
  }
};
// The guarded form of F, with F's own signature.
template <auto F>
constexpr auto Guarded = &GuardOf<F>::Call;
// Guarded<F> cast to a type slot's void* / PyCFunction.
template <auto F>
inline void* GuardedSlot() { return reinterpret_cast<void*>(Guarded<F>); }
template <auto F>
inline PyCFunction GuardedMethod() { return reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)(void)>(Guarded<F>)); }

// ------------------------------------------------------------------ limits ----
// Refuse a tensor description the core cannot handle safely (ndim outside [0, TP_MAX_NDIM],
// a NULL shape with ndim > 0): false with `exc_type` raised, its message starting with `what`.
bool TensorLayoutError(const DLTensor& t, const char* what, PyObject* exc_type);
inline bool CheckTensorLayout(const DLTensor& t, const char* what, PyObject* exc_type) {
  if (static_cast<uint32_t>(t.ndim) <= TP_MAX_NDIM && (t.ndim == 0 || t.shape)) return true;
  return TensorLayoutError(t, what, exc_type);
}
// A managed result whose strides are NULL (allowed by DLPack for compact tensors) becomes
// one with explicit compact strides (the original is wrapped, not copied); nullptr with
// MemoryError set when out of memory (the original is then released).
DLManagedTensorVersioned* WithExplicitStrides(DLManagedTensorVersioned* managed);

// ---------------------------------------------------------------- shutdown ----
// Whether a deleter may take the GIL and touch Python objects. After Py_Finalize (C++
// statics destroyed at exit, other threads still running) it may not: the deleter then
// releases nothing Python owns (a leak at exit, instead of a crash).
inline bool PythonUsable() {
  if (!Py_IsInitialized()) return false;
#if PY_VERSION_HEX >= 0x030D0000
  if (Py_IsFinalizing()) return PyGILState_Check() != 0;
#else
  if (_Py_IsFinalizing()) return PyGILState_Check() != 0;
#endif
  return true;
}

// ---------------------------------------------------------------- adapters ----
// How the core tells whether an imported tensor may be written.
enum class ReadOnlyPolicy : int32_t {
  kNever = 0,   // the framework's tensors are mutable
  kAlways = 1,  // immutable arrays (jax)
  kProbe = 2,   // ask is_read_only(obj) per object (numpy's WRITEABLE flag)
};

// One resolved exchange table. Created once per (adapter, table) and never freed:
// cached types, live tensors and bound allocators may point at it.
struct AdapterTable {
  const DLPackExchangeAPI* api = nullptr;
  PyObject* owner = nullptr;  // keeps `api` alive (a capsule)
  PyObject* name = nullptr;   // adapter name (str)
  ReadOnlyPolicy read_only = ReadOnlyPolicy::kNever;
  int (*is_read_only)(PyObject* obj) = nullptr;
  // Asked with each tensor before it enters a kernel or a tensorplug.Tensor: a tensor whose
  // memory does not hold its values (torch's lazy conjugate and negative bits, which DLPack
  // cannot carry) is refused. nullptr: the framework has no such tensors.
  const struct LazyViewProbe* lazy_views = nullptr;
  // Told of each tensor a kernel will write (an "mview" argument or item), after its checks,
  // before the call: torch bumps the tensor's autograd version counter, as its own in-place
  // ops do. nullptr: nothing to tell.
  const struct WriteHook* writes = nullptr;
  // False for frameworks that cannot import negative strides (torch aborts the
  // process): the core refuses such tensors before handing them over.
  bool negative_strides = true;
  // Set for tables built from Python callables: their C functions find the callables
  // through tls_python_table, set by the core before each use.
  struct PythonTable* python = nullptr;
};

// Wrap an exchange-table capsule as an AdapterTable capsule (_core.adapter_table).
PyObject* MakeAdapterTable(PyObject* capsule, PyObject* name, PyObject* read_only, bool python,
                           PyObject* lazy_views, bool negative_strides, PyObject* write_hook);
// An exchange table whose functions call Python callables (_core.python_table).
PyObject* MakePythonTable(PyObject*, PyObject*, PyObject*, PyObject*, PyObject* importer);
// tensorplug._registry's resolver: called with a type no adapter is cached for.
void SetResolver(PyObject* resolver);
void ClearAdapterCache();
// Adapter of an object's exact type; nullptr (no Python error) when no adapter claims it,
// nullptr with a Python error set when resolution failed.
AdapterTable* LookupAdapter(PyTypeObject* type);
// Wrap a "dlpack_exchange_api" capsule, checking its version (walks prev_api).
AdapterTable* TableFromCapsule(PyObject* capsule, PyObject* name, ReadOnlyPolicy policy,
                               int (*is_read_only)(PyObject*));

// ------------------------------------------------------------------ errors ----
// Raise the calling thread's TPError as the matching Python exception; returns nullptr.
PyObject* RaiseFromTPError();
// Record the current Python exception as the thread's TPError (kind = exception type
// name) and keep the exception object so the outer boundary re-raises it unchanged.
void TPErrorFromPython();
// Raise `message` (str) as `type`, or as its nearest base class constructible from one
// message (UnicodeEncodeError -> UnicodeError), with `original` (may be null) as the cause
// when the class changed.
void RaiseWithMessage(PyObject* type, PyObject* message, PyObject* original);
// Replace the Python error set with one of the same kind whose message is "<prefix>: <the
// first line of the old message>"; `prefix` (a str, borrowed) may be null after a failure.
void PrefixError(PyObject* prefix);
// Used by C callbacks that receive an error_ctx/SetError pair.
void SetErrorViaTP(void* ctx, const char* kind, const char* message);

// ----------------------------------------------------------- tensors/values ----
extern PyTypeObject* TensorType;
extern PyObject* g_device_class;  // tensorplug.Device, set at import
bool InitTensorType(PyObject* module);
extern PyTypeObject* FunctionType;
// A new tensorplug.Tensor owning `managed` (taken even on failure).
PyObject* TensorFromManaged(DLManagedTensorVersioned* managed);
// Mark a tensorplug.Tensor lent to a Python callback as no longer valid (its data belongs
// to the caller); any later use raises. The object itself stays alive while referenced.
void InvalidateLentTensor(PyObject* tensor);
// Borrowed managed tensor of a tensorplug.Tensor.
DLManagedTensorVersioned* TensorManaged(PyObject* tensor);
// The core's own table for tensorplug.Tensor.
AdapterTable* CoreTensorTable();
// The numpy table (numpy must already be imported).
const DLPackExchangeAPI* NumpyExchangeAPI();
int NumpyIsReadOnly(PyObject* obj);
// DLPack dtype of a numpy dtype object (false when it has none or is not one).
bool NumpyDTypeOf(PyObject* descr, DLDataType* out);
// Import functions for jax arrays (C code reading the array's attributes, see jax_import.cc).
int JaxView(void* obj, DLTensor* out);
int JaxManaged(void* obj, DLManagedTensorVersioned** out);

// What an adapter can hand the core in capsules (docs/adapters.md, "C capsules"):
// a "tensorplug.read_only_probe" capsule points at a ReadOnlyProbe, asked per argument
// whether a tensor must not be written (ExchangeTable.from_capsule(read_only=probe));
// a "tensorplug.importer" capsule points at an Importer, C functions that read the
// adapter's tensors directly instead of through __dlpack__ (from_python(importer=...)).
struct ReadOnlyProbe {
  int (*is_read_only)(PyObject* obj);  // 1: read-only, 0: writable; raises nothing
};
struct Importer {
  int (*managed)(void* obj, DLManagedTensorVersioned** out);  // owning import
  int (*view)(void* obj, DLTensor* out);                      // non-owning view
};
// a "tensorplug.lazy_view_probe" capsule points at a LazyViewProbe, asked per tensor
// whether its memory holds its values (ExchangeTable.from_capsule(lazy_views=probe)).
struct LazyViewProbe {
  // 0: it does; 1: it does not, *what says why and what to do ("a torch conjugate view
  // (x.is_conj()); call .resolve_conj() first", static storage); -1: a Python error is set.
  int (*is_lazy)(PyObject* obj, const char** what);
};

// a "tensorplug.write_hook" capsule points at a WriteHook, told of each tensor a call will
// write (ExchangeTable.from_capsule(write_hook=hook); ConvertMView, ConvertMViews). A hook
// with state embeds the struct as its first member (`hook` is the struct itself).
struct WriteHook {
  // 0: go on; -1: refuse the call, with a Python error set (the caller prefixes the argument).
  int (*will_write)(const WriteHook* hook, PyObject* obj);
};
// _core.torch_write_hook(torch, libraries) -> (capsule, direct): see torch_versions.cc.
PyObject* TorchWriteHookPy(PyObject*, PyObject* args);

// torch's lazy views as a refusal names them (torch_lazy_views.cc; torch_native.cc for
// written arguments of native ops), after kLazyViewExpected.
constexpr const char kLazyViewExpected[] =
    "expected a tensor whose memory holds its values (DLPack has no conjugate or negative bit), got ";
constexpr const char kTorchConjugateView[] = "a torch conjugate view (x.is_conj()); call .resolve_conj() first";
constexpr const char kTorchNegativeView[] =
    "a torch tensor with the negative bit set (x.is_neg(), e.g. x.conj().imag); call .resolve_neg() first";
// The refusal of a tensor a LazyViewProbe reported (probe result `rc`, 1 or -1): a
// ValueError "expected a tensor whose memory holds its values ..., got <what>" (callers
// prefix the argument), or the probe's own error. Always false.
bool RefuseLazyView(int rc, const char* what);
// True when `obj` may enter a kernel as its memory: a flag read for tables without a
// probe, one C call (torch: two reads of the tensor's key set) for those with one. False
// with a Python error set otherwise.
inline bool HoldsItsValues(const AdapterTable* table, PyObject* obj) {
  if (!table->lazy_views) return true;
  const char* what = nullptr;
  const int rc = table->lazy_views->is_lazy(obj, &what);
  return rc == 0 || RefuseLazyView(rc, what);
}
// _core.torch_lazy_view_probe(torch, libraries) -> (capsule, direct): see torch_lazy_views.cc.
PyObject* TorchLazyViewProbePy(PyObject*, PyObject* args);

// A managed tensor describing `src` (own copies of shape and strides) that does not own
// the data; nullptr when out of memory.
DLManagedTensorVersioned* DescribeWithoutOwning(const DLTensor& src, uint64_t flags);
// Owning managed tensor from a DLPack capsule (versioned or legacy); marks it used.
int ManagedFromCapsule(PyObject* capsule, DLManagedTensorVersioned** out);
// A "dltensor_versioned" capsule owning `managed`.
PyObject* CapsuleFromManaged(DLManagedTensorVersioned* managed);

// A new Python Function object around `func` (a new reference is taken).
PyObject* FunctionFromHandle(TPFunctionHandle func, PyObject* name, bool release_gil);
// Python object for a result value; the value's payload is consumed. `function` (the
// kernel's name, may be null) is named in errors about the value.
PyObject* ValueToPython(TPAny* value, AdapterTable* output, PyObject* function = nullptr);
// TPAny for a Python object returned by a Python callback (owning).
int PythonToValue(PyObject* obj, TPAny* out);
// A packed function calling a Python callable (a new reference to it is kept); -1 with
// the TPError set on failure. `caller` and `index` (a tensorplug.Function and the argument
// the callable was passed as, or null and -1) name the argument in errors about the
// callable's return value.
int MakePythonFunction(PyObject* callable, TPFunctionHandle* out, PyObject* caller = nullptr, int index = -1);

// Device/dtype conversions shared with Python helpers.
PyObject* DeviceToPython(DLDevice device);
PyObject* DTypeToPython(DLDataType dtype);
bool DTypeFromString(const char* s, DLDataType* out);
// The TPPlanHandle of a call plan capsule (tensorplug.plans.make), borrowed; nullptr with a
// TypeError naming `caller` for anything else (plan.cc).
TPPlanHandle PlanOfCapsule(PyObject* obj, const char* caller);
// What a dtype argument accepts, for messages: "expected " kDTypeExpected ", got ...".
constexpr const char kDTypeExpected[] =
    "a dtype: bool, int8/16/32/64, uint8/16/32/64, float16/32/64, bfloat16, complex64/128, a float8 kind "
    "(float8_e4m3fn, float8_e5m2, ...) or a framework's dtype (numpy.float32, torch.float32)";
bool DeviceFromString(const char* s, DLDevice* out);
const char* DeviceTypeName(int32_t device_type);
int32_t DeviceTypeFromName(const std::string& name);

}  // namespace tensorplug::py
