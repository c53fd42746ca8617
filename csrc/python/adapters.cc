// The per-type adapter cache and exchange tables built from Python callables.
//
// The Python registry (tensorplug._registry, driven by pluggy) is asked once per exact
// Python type; the answer is cached here so that later arguments of that type are
// converted without any Python-level call. Registering or unregistering an adapter
// clears the cache.
#include <cstring>
#include <string>
#include <unordered_map>

#include "call_env.h"

namespace tensorplug::py {

namespace {

PyObject* g_resolver = nullptr;  // callable(type) -> capsule/table description or None
// type -> table (nullptr: no adapter claims the type). Types are kept alive by a reference.
std::unordered_map<PyTypeObject*, AdapterTable*>* g_cache = nullptr;
PyTypeObject* g_last_type = nullptr;  // one-entry front cache: calls repeat types
AdapterTable* g_last_table = nullptr;

}  // namespace

void ClearAdapterCache() {
  if (!g_cache) return;
  for (auto& entry : *g_cache) Py_DECREF(reinterpret_cast<PyObject*>(entry.first));
  g_cache->clear();
  g_last_type = nullptr;
  g_last_table = nullptr;
}

void SetResolver(PyObject* resolver) {
  Py_XINCREF(resolver);
  Py_XSETREF(g_resolver, resolver);
  ClearAdapterCache();
}

AdapterTable* TableFromCapsule(PyObject* capsule, PyObject* name, ReadOnlyPolicy policy,
                               int (*is_read_only)(PyObject*)) {
  auto* header = static_cast<DLPackExchangeAPIHeader*>(PyCapsule_GetPointer(capsule, "dlpack_exchange_api"));
  if (!header) return nullptr;
  // Use the newest table of a major version we speak.
  while (header && header->version.major != DLPACK_MAJOR_VERSION) header = header->prev_api;
  if (!header) {
    PyErr_Format(PyExc_TypeError, "adapter %R: exchange table has no DLPack %d.x version", name,
                 DLPACK_MAJOR_VERSION);
    return nullptr;
  }
  auto* api = reinterpret_cast<const DLPackExchangeAPI*>(header);
  if (!api->managed_tensor_from_py_object_no_sync || !api->managed_tensor_to_py_object_no_sync) {
    PyErr_Format(PyExc_TypeError,
                 "adapter %R: exchange table lacks managed_tensor_from/to_py_object_no_sync", name);
    return nullptr;
  }
  auto* table = new AdapterTable;
  table->api = api;
  table->owner = Py_NewRef(capsule);
  table->name = Py_NewRef(name);
  table->read_only = policy;
  table->is_read_only = is_read_only;
  return table;
}

AdapterTable* LookupAdapter(PyTypeObject* type) {
  if (type == g_last_type) return g_last_table;
  if (!g_cache) g_cache = new std::unordered_map<PyTypeObject*, AdapterTable*>;
  auto it = g_cache->find(type);
  AdapterTable* table = nullptr;
  if (it != g_cache->end()) {
    table = it->second;
  } else if (type == TensorType) {
    table = CoreTensorTable();
    g_cache->emplace(type, table);
    Py_INCREF(type);
  } else {
    if (!g_resolver) return nullptr;
    // The registry answers with a "tensorplug.adapter_table" capsule, or None.
    PyObject* answer = PyObject_CallOneArg(g_resolver, reinterpret_cast<PyObject*>(type));
    if (!answer) return nullptr;
    if (answer != Py_None) {
      table = static_cast<AdapterTable*>(PyCapsule_GetPointer(answer, "tensorplug.adapter_table"));
      if (!table) {
        Py_DECREF(answer);
        return nullptr;
      }
    }
    Py_DECREF(answer);
    g_cache->emplace(type, table);
    Py_INCREF(type);
  }
  g_last_type = type;
  g_last_table = table;
  return table;
}


}  // namespace tensorplug::py

// ===================================================================================
// Exchange tables built from Python callables: the path any third party can write in
// pure Python. The C functions below read their callables from tls_python_table, which
// the core sets around every use of such a table (PythonTableScope).
// ===================================================================================
namespace tensorplug::py {

struct PythonTable {
  DLPackExchangeAPI api;      // first: a PythonTable* is a DLPackExchangeAPI*
  PyObject* to_dlpack;        // callable(obj) -> capsule or DLPack producer; None: obj itself
  PyObject* from_dlpack;      // callable(tensorplug.Tensor) -> framework tensor
  PyObject* current_stream;   // callable(device_type, device_id) -> int | None; or None
  PyObject* allocate;         // callable(shape, dtype, device) -> framework tensor; or None
};

namespace {

PythonTable* Active() {
  AdapterTable* table = ActivePythonTable();
  return table ? table->python : nullptr;
}

// Owning export through __dlpack__ (asking for a versioned capsule first).
int ExportViaDLPack(PyObject* producer, DLManagedTensorVersioned** out) {
  if (PyCapsule_CheckExact(producer)) return ManagedFromCapsule(producer, out);
  PyObject* method = PyObject_GetAttrString(producer, "__dlpack__");
  if (!method) return -1;
  PyObject* kwargs = Py_BuildValue("{s:(ii)}", "max_version", DLPACK_MAJOR_VERSION, DLPACK_MINOR_VERSION);
  PyObject* empty = PyTuple_New(0);
  PyObject* capsule = (kwargs && empty) ? PyObject_Call(method, empty, kwargs) : nullptr;
  if (!capsule && PyErr_ExceptionMatches(PyExc_TypeError)) {  // producer predates max_version
    PyErr_Clear();
    capsule = PyObject_CallNoArgs(method);
  }
  Py_XDECREF(kwargs);
  Py_XDECREF(empty);
  Py_DECREF(method);
  if (!capsule) return -1;
  int rc = ManagedFromCapsule(capsule, out);
  Py_DECREF(capsule);
  return rc;
}

int PyManagedFromObject(void* py_object, DLManagedTensorVersioned** out) {
  PythonTable* t = Active();
  PyGILState_STATE gil = PyGILState_Ensure();
  int rc = -1;
  auto* obj = static_cast<PyObject*>(py_object);
  if (t->to_dlpack == Py_None) {
    rc = ExportViaDLPack(obj, out);
  } else if (PyObject* producer = PyObject_CallOneArg(t->to_dlpack, obj)) {
    rc = ExportViaDLPack(producer, out);
    Py_DECREF(producer);
  }
  PyGILState_Release(gil);
  return rc;
}

// A tensor allocated through a Python `allocate` callable keeps that framework object,
// so that returning it hands back the very object the framework made.
struct AllocatedCtx {
  DLManagedTensorVersioned* inner;
  PyObject* object;
};
void DeleteAllocated(DLManagedTensorVersioned* self) {
  auto* ctx = static_cast<AllocatedCtx*>(self->manager_ctx);
  if (PythonUsable()) {  // after Py_Finalize the framework tensor is leaked, not touched
    PyGILState_STATE gil = PyGILState_Ensure();
    if (ctx->inner->deleter) ctx->inner->deleter(ctx->inner);
    Py_DECREF(ctx->object);
    PyGILState_Release(gil);
  }
  delete ctx;
  delete self;
}

int PyToObject(DLManagedTensorVersioned* managed, void** out) {
  PythonTable* t = Active();
  PyGILState_STATE gil = PyGILState_Ensure();
  int rc = -1;
  PyObject* allocated = managed->deleter == Guarded<DeleteAllocated> ? static_cast<AllocatedCtx*>(managed->manager_ctx)->object
                                                             : nullptr;
  if (allocated && LookupAdapter(Py_TYPE(allocated)) == ActivePythonTable()) {
    // The framework's own object: hand it back. (An allocator may also return another
    // type, e.g. a framework that allocates CPU memory with another's; that goes through from_dlpack.)
    *out = Py_NewRef(allocated);
    managed->deleter(managed);
    rc = 0;
  } else if (PyObject* tensor = TensorFromManaged(managed)) {
    PyObject* result = PyObject_CallOneArg(t->from_dlpack, tensor);
    Py_DECREF(tensor);
    if (result) {
      *out = result;
      rc = 0;
    }
  }
  PyGILState_Release(gil);
  return rc;
}

int PyCurrentStream(DLDeviceType device_type, int32_t device_id, void** out) {
  PythonTable* t = Active();
  *out = nullptr;
  if (!t || t->current_stream == Py_None) return 0;
  PyGILState_STATE gil = PyGILState_Ensure();
  int rc = -1;
  if (PyObject* r = PyObject_CallFunction(t->current_stream, "ii", int(device_type), int(device_id))) {
    if (r == Py_None) {
      rc = 0;
    } else {
      void* handle = PyLong_AsVoidPtr(r);
      if (!(handle == nullptr && PyErr_Occurred())) {
        *out = handle;
        rc = 0;
      }
    }
    Py_DECREF(r);
  }
  PyGILState_Release(gil);
  return rc;
}

int PyAllocate(DLTensor* prototype, DLManagedTensorVersioned** out, void* error_ctx,
               void (*set_error)(void*, const char*, const char*)) {
  PythonTable* t = Active();
  PyGILState_STATE gil = PyGILState_Ensure();
  int rc = -1;
  PyObject* shape = PyTuple_New(prototype->ndim);
  for (int32_t i = 0; shape && i < prototype->ndim; ++i) {
    PyTuple_SET_ITEM(shape, i, PyLong_FromLongLong(prototype->shape[i]));
  }
  PyObject* dtype = DTypeToPython(prototype->dtype);
  PyObject* device = DeviceToPython(prototype->device);
  PyObject* object = (shape && dtype && device)
                         ? PyObject_CallFunctionObjArgs(t->allocate, shape, dtype, device, nullptr)
                         : nullptr;
  DLManagedTensorVersioned* inner = nullptr;
  if (object && PyManagedFromObject(object, &inner) == 0) {
    if (!CheckTensorLayout(inner->dl_tensor, "the tensor an allocate() callable returned", PyExc_BufferError)) {
      if (inner->deleter) inner->deleter(inner);
      inner = nullptr;
    }
  }
  if (inner) {
    auto* wrapped = new DLManagedTensorVersioned(*inner);
    wrapped->flags &= ~uint64_t(DLPACK_FLAG_BITMASK_READ_ONLY);  // a fresh tensor is the kernel's to fill
    wrapped->manager_ctx = new AllocatedCtx{inner, object};
    wrapped->deleter = Guarded<DeleteAllocated>;
    *out = wrapped;
    object = nullptr;  // owned by the context now
    rc = 0;
  }
  if (rc != 0) {
    // Report through the allocator's error channel, keeping the Python exception.
    TPErrorFromPython();
    const char *kind = "MemoryError", *message = "allocation failed";
    TPErrorGet(&kind, &message);
    set_error(error_ctx, kind, message);
  }
  Py_XDECREF(object);
  Py_XDECREF(shape);
  Py_XDECREF(dtype);
  Py_XDECREF(device);
  PyGILState_Release(gil);
  return rc;
}

int PyAllocateMissing(DLTensor*, DLManagedTensorVersioned**, void* error_ctx,
                      void (*set_error)(void*, const char*, const char*)) {
  std::string msg = "adapter has no allocator: it cannot make new tensors";
  if (AdapterTable* table = ActivePythonTable()) {
    const char* name = PyUnicode_AsUTF8(table->name);
    if (name) msg = std::string("adapter '") + name + "' has no allocator: it cannot make new tensors";
  }
  set_error(error_ctx, "RuntimeError", msg.c_str());
  return -1;
}

}  // namespace

// _core.make_python_table(to_dlpack, from_dlpack, current_stream, allocate, importer=None)
// -> capsule. `importer`, a "tensorplug.importer" capsule, supplies C import functions to
// use instead of the Python export path; export and allocation stay with the callables.
PyObject* MakePythonTable(PyObject* to_dlpack, PyObject* from_dlpack, PyObject* current_stream,
                          PyObject* allocate, PyObject* importer) {
  const Importer* import_functions = nullptr;
  if (importer && importer != Py_None) {
    if (!PyCapsule_IsValid(importer, "tensorplug.importer")) {
      return PyErr_Format(PyExc_TypeError, "ExchangeTable.from_python() argument 'importer': expected None or a "
                          "'tensorplug.importer' capsule, got %R", importer);
    }
    import_functions = static_cast<const Importer*>(PyCapsule_GetPointer(importer, "tensorplug.importer"));
  }
  if (!PyCallable_Check(from_dlpack)) {
    return PyErr_Format(PyExc_TypeError, "from_dlpack must be callable, got %s", Py_TYPE(from_dlpack)->tp_name);
  }
  auto* t = new PythonTable;
  t->api.header.version = {DLPACK_MAJOR_VERSION, DLPACK_MINOR_VERSION};
  t->api.header.prev_api = nullptr;
  // Guarded: C code calls these (no C++ exception may leave them).
  t->api.managed_tensor_allocator = allocate == Py_None ? Guarded<PyAllocateMissing> : Guarded<PyAllocate>;
  t->api.managed_tensor_from_py_object_no_sync = Guarded<PyManagedFromObject>;
  t->api.managed_tensor_to_py_object_no_sync = Guarded<PyToObject>;
  t->api.dltensor_from_py_object_no_sync = nullptr;  // the core uses the owning export
  if (import_functions) {
    t->api.managed_tensor_from_py_object_no_sync = import_functions->managed;
    t->api.dltensor_from_py_object_no_sync = import_functions->view;
  }
  t->api.current_work_stream = Guarded<PyCurrentStream>;
  t->to_dlpack = Py_NewRef(to_dlpack);
  t->from_dlpack = Py_NewRef(from_dlpack);
  t->current_stream = Py_NewRef(current_stream);
  t->allocate = Py_NewRef(allocate);
  // Tables are never freed (cached types and live tensors may point at them).
  return PyCapsule_New(&t->api, "dlpack_exchange_api", nullptr);
}

bool RefuseLazyView(int rc, const char* what) {
  if (rc > 0) PyErr_Format(PyExc_ValueError, "%s%s", kLazyViewExpected, what);
  return false;
}

namespace {

// A write hook that calls a Python callable with the tensor (ExchangeTable(write_hook=fn)):
// an adapter whose framework bumps versions from Python passes its function.
struct PythonWriteHook {
  WriteHook base;
  PyObject* fn;
};

int CallPythonWriteHook(const WriteHook* hook, PyObject* obj) {
  PyObject* r = PyObject_CallOneArg(reinterpret_cast<const PythonWriteHook*>(hook)->fn, obj);
  if (!r) return -1;
  Py_DECREF(r);
  return 0;
}

}  // namespace

// _core.make_adapter_table(capsule, name, read_only, python, lazy_views, negative_strides, write_hook)
// -> "tensorplug.adapter_table".
// `read_only`: False (mutable tensors), True (immutable) or a "tensorplug.read_only_probe"
// capsule asked per tensor.
PyObject* MakeAdapterTable(PyObject* capsule, PyObject* name, PyObject* read_only, bool python,
                           PyObject* lazy_views, bool negative_strides, PyObject* write_hook) {
  ReadOnlyPolicy policy = ReadOnlyPolicy::kNever;
  int (*probe)(PyObject*) = nullptr;
  if (read_only == Py_True) {
    policy = ReadOnlyPolicy::kAlways;
  } else if (PyCapsule_IsValid(read_only, "tensorplug.read_only_probe")) {
    policy = ReadOnlyPolicy::kProbe;
    probe = static_cast<const ReadOnlyProbe*>(PyCapsule_GetPointer(read_only, "tensorplug.read_only_probe"))
                ->is_read_only;
  } else if (read_only != Py_False) {
    return PyErr_Format(PyExc_TypeError, "ExchangeTable argument 'read_only': expected True, False or a "
                        "'tensorplug.read_only_probe' capsule, got %R", read_only);
  }
  const LazyViewProbe* lazy_probe = nullptr;
  if (lazy_views && lazy_views != Py_None) {
    if (!PyCapsule_IsValid(lazy_views, "tensorplug.lazy_view_probe")) {
      return PyErr_Format(PyExc_TypeError, "ExchangeTable argument 'lazy_views': expected None or a "
                          "'tensorplug.lazy_view_probe' capsule, got %R", lazy_views);
    }
    lazy_probe = static_cast<const LazyViewProbe*>(PyCapsule_GetPointer(lazy_views, "tensorplug.lazy_view_probe"));
  }
  const WriteHook* writes = nullptr;
  if (write_hook && write_hook != Py_None) {
    if (PyCapsule_IsValid(write_hook, "tensorplug.write_hook")) {
      writes = static_cast<const WriteHook*>(PyCapsule_GetPointer(write_hook, "tensorplug.write_hook"));
    } else if (PyCallable_Check(write_hook)) {
      writes = &(new PythonWriteHook{{CallPythonWriteHook}, Py_NewRef(write_hook)})->base;  // lives as the table does
    } else {
      return PyErr_Format(PyExc_TypeError, "ExchangeTable argument 'write_hook': expected None, a callable or a "
                          "'tensorplug.write_hook' capsule, got %R", write_hook);
    }
  }
  AdapterTable* table = TableFromCapsule(capsule, name, policy, probe);
  if (!table) return nullptr;
  table->writes = writes;
  if (python) table->python = reinterpret_cast<PythonTable*>(const_cast<DLPackExchangeAPI*>(table->api));
  table->lazy_views = lazy_probe;
  table->negative_strides = negative_strides;
  return PyCapsule_New(table, "tensorplug.adapter_table", nullptr);
}

}  // namespace tensorplug::py
