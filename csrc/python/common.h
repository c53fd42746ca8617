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
#include "tensorplug/python.h"

namespace tensorplug::py {

// The exception barrier and the shutdown check, as every adapter module has them
// (tensorplug/python.h).
using python::Guarded;
using python::GuardedMethod;
using python::GuardedSlot;
using python::PlanOfCapsule;
using python::PythonUsable;
using python::SetErrorFromCxxException;

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

// ---------------------------------------------------------------- adapters ----
// How the core tells whether an imported tensor may be written.
enum class ReadOnlyPolicy : int32_t {
  kNever = 0,   // the framework's tensors are mutable
  kAlways = 1,  // immutable arrays
  kProbe = 2,   // ask is_read_only(obj) per object (a writeable flag)
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
  // memory does not hold its values (a framework's lazy conjugate and negative bits, which DLPack
  // cannot carry) is refused. nullptr: the framework has no such tensors.
  const TPLazyViewProbe* lazy_views = nullptr;
  // Told of each tensor a kernel will write (an "mview" argument or item), after its checks,
  // before the call: a framework bumps the tensor's autograd version counter, as its own in-place
  // ops do. nullptr: nothing to tell.
  const TPWriteHook* writes = nullptr;
  // False for frameworks that cannot import negative strides (some abort the
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

// What an adapter can hand the core in capsules (tensorplug/python.h, docs/adapters.md).
using ReadOnlyProbe = TPReadOnlyProbe;
using Importer = TPImporter;
using LazyViewProbe = TPLazyViewProbe;
using WriteHook = TPWriteHook;

// A lazy view's refusal: kLazyViewExpected, then what the probe said (tensorplug/python.h).
constexpr const char kLazyViewExpected[] = TP_LAZY_VIEW_EXPECTED;
// The refusal of a tensor a LazyViewProbe reported (probe result `rc`, 1 or -1): a
// ValueError "expected a tensor whose memory holds its values ..., got <what>" (callers
// prefix the argument), or the probe's own error. Always false.
bool RefuseLazyView(int rc, const char* what);
// True when `obj` may enter a kernel as its memory: a flag read for tables without a
// probe, one C call for those with one. False
// with a Python error set otherwise.
inline bool HoldsItsValues(const AdapterTable* table, PyObject* obj) {
  if (!table->lazy_views) return true;
  const char* what = nullptr;
  const int rc = table->lazy_views->is_lazy(obj, &what);
  return rc == 0 || RefuseLazyView(rc, what);
}

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

// What a dtype argument accepts, for messages: "expected " kDTypeExpected ", got ...".
constexpr const char kDTypeExpected[] =
    "a dtype: bool, int8/16/32/64, uint8/16/32/64, float16/32/64, bfloat16, complex64/128, a float8 kind "
    "(float8_e4m3fn, float8_e5m2, ...) or a framework's dtype whose str() ends in one of them";
bool DeviceFromString(const char* s, DLDevice* out);
const char* DeviceTypeName(int32_t device_type);
int32_t DeviceTypeFromName(const std::string& name);

}  // namespace tensorplug::py
