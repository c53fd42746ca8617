// Shared declarations of the Python extension (_core).
#pragma once
#include <Python.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "tensorplug/c_api.h"

namespace tensorplug::py {

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
  // Called with each complex-valued tensor before it enters a kernel; raises to refuse it
  // (torch's exporter drops the conjugate bit, which only complex tensors carry).
  PyObject* complex_check = nullptr;
  // False for frameworks that cannot import negative strides (torch aborts the
  // process): the core refuses such tensors before handing them over.
  bool negative_strides = true;
  // Set for tables built from Python callables: their C functions find the callables
  // through tls_python_table, set by the core before each use.
  struct PythonTable* python = nullptr;
};

// Adapter of an object's exact type; nullptr (no Python error) when no adapter claims it,
// nullptr with a Python error set when resolution failed.
AdapterTable* LookupAdapter(PyTypeObject* type);
// Wrap a "dlpack_exchange_api" capsule, checking its version (walks prev_api).
AdapterTable* TableFromCapsule(PyObject* capsule, PyObject* name, ReadOnlyPolicy policy,
                               int (*is_read_only)(PyObject*));
// The table the python trampolines use; set around each call into a python table.
inline AdapterTable*& ActivePythonTable();
// Scoped selection of the active python table (no-op for C tables).
struct ThreadState;
struct PythonTableScope {
  AdapterTable* saved;
  bool active;
  explicit PythonTableScope(AdapterTable* table)
      : saved(nullptr), active(table && table->python) {
    if (active) {
      saved = ActivePythonTable();
      ActivePythonTable() = table;
    }
  }
  ~PythonTableScope() {
    if (active) ActivePythonTable() = saved;
  }
};

// ------------------------------------------------------------------ errors ----
// Raise the calling thread's TPError as the matching Python exception; returns nullptr.
PyObject* RaiseFromTPError();
// Record the current Python exception as the thread's TPError (kind = exception type
// name) and keep the exception object so the outer boundary re-raises it unchanged.
void TPErrorFromPython();
// Used by C callbacks that receive an error_ctx/SetError pair.
void SetErrorViaTP(void* ctx, const char* kind, const char* message);

// ----------------------------------------------------------- tensors/values ----
extern PyTypeObject* TensorType;
extern PyTypeObject* FunctionType;
// A new tensorplug.Tensor owning `managed` (taken even on failure).
PyObject* TensorFromManaged(DLManagedTensorVersioned* managed);
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

// A managed tensor describing `src` (own copies of shape and strides) that does not own
// the data; nullptr when out of memory.
DLManagedTensorVersioned* DescribeWithoutOwning(const DLTensor& src, uint64_t flags);
// Owning managed tensor from a DLPack capsule (versioned or legacy); marks it used.
int ManagedFromCapsule(PyObject* capsule, DLManagedTensorVersioned** out);
// A "dltensor_versioned" capsule owning `managed`.
PyObject* CapsuleFromManaged(DLManagedTensorVersioned* managed);

// A new Python Function object around `func` (a new reference is taken).
PyObject* FunctionFromHandle(TPFunctionHandle func, PyObject* name, bool release_gil);
// Python object for a result value; the value's payload is consumed.
PyObject* ValueToPython(TPAny* value, AdapterTable* output);
// TPAny for a Python object returned by a Python callback (owning).
int PythonToValue(PyObject* obj, TPAny* out);

// Device/dtype conversions shared with Python helpers.
PyObject* DeviceToPython(DLDevice device);
PyObject* DTypeToPython(DLDataType dtype);
bool DTypeFromString(const char* s, DLDataType* out);
bool DeviceFromString(const char* s, DLDevice* out);
const char* DeviceTypeName(int32_t device_type);
int32_t DeviceTypeFromName(const std::string& name);

// ------------------------------------------------------------ thread state ----
// Everything the extension keeps per thread, behind one initial-exec TLS pointer: a call
// touches it several times, and each general-dynamic TLS access costs a function call.
struct StreamOverride {
  int32_t device_type;
  int32_t device_id;
  void* previous;
};
struct ThreadState {
  // Scratch arena (see ScratchAlloc): blocks of int64, never freed while the thread lives.
  std::vector<std::unique_ptr<int64_t[]>> scratch_blocks;
  int32_t scratch_block = 0;
  int32_t scratch_offset = 0;
  std::vector<StreamOverride> stream_overrides;  // use_stream / use_raw_stream
  std::vector<AdapterTable*> output_overrides;   // output_framework
  AdapterTable* python_table = nullptr;          // see ActivePythonTable
  // The Python exception behind the thread's TPError, when a Python callback raised it.
  PyObject* pending_exception = nullptr;
  std::string pending_kind, pending_message;
};
ThreadState* NewThreadState();
extern thread_local ThreadState* tls_thread_state __attribute__((tls_model("initial-exec")));
inline ThreadState& TS() {
  ThreadState* state = tls_thread_state;
  return state ? *state : *NewThreadState();
}

inline AdapterTable*& ActivePythonTable() { return TS().python_table; }

// ------------------------------------------------- per-thread call scratch ----
// Stack-like arena for data that must live until the current call returns (element
// strides of numpy views). The call frame records a mark and rewinds to it.
struct ScratchMark {
  int32_t block;
  int32_t offset;
};
ScratchMark ScratchSave();
void ScratchRestore(ScratchMark mark);
int64_t* ScratchAlloc(int32_t count);

// ------------------------------------------------------ call overrides (TLS) ----
// Explicit use_stream/use_raw_stream/output_framework contexts of the calling thread.
bool HasStreamOverride(int32_t device_type, int32_t device_id);
AdapterTable* OutputOverride();

}  // namespace tensorplug::py
