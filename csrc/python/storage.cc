// tensorplug.storage: the provider storage (TPEnvStorage*) from Python.
//
// A Python object that has no tensorplug value kind (a dict, a class instance) is stored
// as an opaque pointer whose deleter releases the reference; after Py_Finalize the deleter
// leaks it instead (PythonUsable), so the exit cleanup never touches a dead interpreter.
#include "common.h"
#include "handle_object.h"

namespace tensorplug::runtime {
void StorageExitCleanup();  // libtensorplug (runtime/storage.cc)
}

namespace tensorplug::py {

int MakePythonFunction(PyObject* callable, TPFunctionHandle* out);

namespace {

void ReleasePythonObject(void* obj) {
  if (!PythonUsable()) return;
  PyGILState_STATE gil = PyGILState_Ensure();
  Py_DECREF(static_cast<PyObject*>(obj));
  PyGILState_Release(gil);
}

const char* KeyOf(PyObject* key, const char* where) {
  if (!PyUnicode_Check(key)) {
    PyErr_Format(PyExc_TypeError, "storage.%s() argument 'key': expected a str, got %s", where, Py_TYPE(key)->tp_name);
    return nullptr;
  }
  return PyUnicode_AsUTF8(key);
}

// The TPAny (and deleter) storing `obj`; -1 with a Python error set.
int ToStored(PyObject* obj, const char* where, TPAny* out, TPStorageDeleter* deleter) {
  *deleter = nullptr;
  out->type_index = kTPNone;
  out->flags = 0;
  out->v_int64 = 0;
  if (obj == Py_None) {
    PyErr_Format(PyExc_TypeError, "storage.%s() argument 'value': None cannot be stored (use storage.erase)", where);
    return -1;
  }
  if (Py_TYPE(obj) == HandleType) {  // stored as the handle (C code gets a reference), not as an object
    if (!HandleRefOf(obj)) {
      PyErr_Format(PyExc_ValueError, "storage.%s() argument 'value': the handle was closed", where);
      return -1;
    }
    return PythonToValue(obj, out);
  }
  const bool has_kind = PyBool_Check(obj) || PyLong_Check(obj) || PyFloat_Check(obj) || PyUnicode_Check(obj) ||
                        Py_TYPE(obj) == FunctionType || PyFunction_Check(obj) || PyCFunction_Check(obj) ||
                        PyMethod_Check(obj) || LookupAdapter(Py_TYPE(obj)) != nullptr;
  if (PyErr_Occurred()) return -1;
  if (has_kind) return PythonToValue(obj, out);
  // Anything else is kept as the object itself.
  out->type_index = kTPOpaquePtr;
  out->v_ptr = Py_NewRef(obj);
  *deleter = ReleasePythonObject;
  return 0;
}

PyObject* FromStored(TPAny* value, TPStorageDeleter deleter) {
  if (value->type_index == kTPOpaquePtr && deleter == ReleasePythonObject) {
    return Py_NewRef(static_cast<PyObject*>(value->v_ptr));
  }
  return ValueToPython(value, nullptr);
}

// set(key, value)
PyObject* StorageSet(PyObject*, PyObject* args) {
  PyObject *key_obj, *value;
  if (!PyArg_ParseTuple(args, "OO", &key_obj, &value)) return nullptr;
  const char* key = KeyOf(key_obj, "set");
  if (!key) return nullptr;
  TPAny any;
  TPStorageDeleter deleter;
  if (ToStored(value, "set", &any, &deleter) != 0) return nullptr;
  int rc = TPEnvStorageSetValue(key, &any, deleter);  // the old value's deleter may run
  if (rc != 0) {
    if (deleter) deleter(any.v_ptr);
    return RaiseFromTPError();
  }
  Py_RETURN_NONE;
}

// get(key) -> (found, value)
PyObject* StorageGet(PyObject*, PyObject* key_obj) {
  const char* key = KeyOf(key_obj, "get");
  if (!key) return nullptr;
  TPAny value;
  TPStorageDeleter deleter = nullptr;
  if (TPEnvStorageGetValue(key, &value, &deleter) != 0) return RaiseFromTPError();
  if (value.type_index == kTPNone) return Py_BuildValue("(OO)", Py_False, Py_None);
  PyObject* obj = FromStored(&value, deleter);
  if (!obj) return nullptr;
  return Py_BuildValue("(ON)", Py_True, obj);
}

PyObject* StorageErase(PyObject*, PyObject* key_obj) {
  const char* key = KeyOf(key_obj, "erase");
  if (!key) return nullptr;
  TPEnvStorageErase(key);
  Py_RETURN_NONE;
}

PyObject* StorageContains(PyObject*, PyObject* key_obj) {
  const char* key = KeyOf(key_obj, "contains");
  if (!key) return nullptr;
  return PyBool_FromLong(TPEnvStorageContains(key));
}

void AppendKey(void* ctx, const char* key) {
  if (PyObject* s = PyUnicode_FromString(key)) {
    PyList_Append(static_cast<PyObject*>(ctx), s);
    Py_DECREF(s);
  }
}

PyObject* StorageKeys(PyObject*, PyObject*) {
  PyObject* keys = PyList_New(0);
  if (keys && TPEnvStorageListKeys(Guarded<AppendKey>, keys) != 0) {
    Py_DECREF(keys);
    return RaiseFromTPError();
  }
  return keys;
}

// create() of get_or_create: runs on the creating thread, which released the GIL while
// it waited for the storage; takes it back to call the factory.
int CreateFromFactory(void* ctx, TPAny* value, TPStorageDeleter* deleter) {
  if (!PythonUsable()) {
    TPErrorSet("RuntimeError", "storage.get_or_create(): the interpreter is shutting down");
    return -1;
  }
  PyGILState_STATE gil = PyGILState_Ensure();
  int rc = -1;
  PyObject* obj = PyObject_CallNoArgs(static_cast<PyObject*>(ctx));
  if (obj && ToStored(obj, "get_or_create", value, deleter) == 0) rc = 0;
  Py_XDECREF(obj);
  if (rc != 0) TPErrorFromPython();  // the factory's exception reaches the caller unchanged
  PyGILState_Release(gil);
  return rc;
}

// get_or_create(key, factory) -> value
PyObject* StorageGetOrCreate(PyObject*, PyObject* args) {
  PyObject *key_obj, *factory;
  if (!PyArg_ParseTuple(args, "OO", &key_obj, &factory)) return nullptr;
  const char* key = KeyOf(key_obj, "get_or_create");
  if (!key) return nullptr;
  if (!PyCallable_Check(factory)) {
    return PyErr_Format(PyExc_TypeError, "storage.get_or_create() argument 'factory': expected a callable, got %s",
                        Py_TYPE(factory)->tp_name);
  }
  TPAny value;
  int rc;
  Py_BEGIN_ALLOW_THREADS  // another thread may be creating this key and need the GIL to finish
  rc = TPEnvStorageGetOrCreate(key, Guarded<CreateFromFactory>, factory, &value);
  Py_END_ALLOW_THREADS
  if (rc != 0) return RaiseFromTPError();
  // The deleter tells a Python object from a C pointer: read it back (same value).
  TPStorageDeleter deleter = nullptr;
  if (value.type_index == kTPOpaquePtr) {
    TPAny again;
    if (TPEnvStorageGetValue(key, &again, &deleter) != 0) return RaiseFromTPError();
    if (again.type_index != kTPOpaquePtr || again.v_ptr != value.v_ptr) deleter = nullptr;
    TPAnyRelease(&again);
  }
  return FromStored(&value, deleter);
}

// workspace(device_type, device_id, nbytes) -> address (tests and diagnostics)
PyObject* Workspace(PyObject*, PyObject* args) {
  int device_type, device_id;
  unsigned long long nbytes;
  if (!PyArg_ParseTuple(args, "iiK", &device_type, &device_id, &nbytes)) return nullptr;
  void* out = nullptr;
  int rc;
  Py_BEGIN_ALLOW_THREADS
  rc = TPEnvWorkspace(device_type, device_id, size_t(nbytes), &out);
  Py_END_ALLOW_THREADS
  if (rc != 0) return RaiseFromTPError();
  return PyLong_FromVoidPtr(out);
}

}  // namespace

// storage_exit_cleanup(): destroy every stored value (Python's atexit runs it, before the
// static destructors of any library a deleter may use).
PyObject* StorageExitCleanupPy(PyObject*, PyObject*) {
  tensorplug::runtime::StorageExitCleanup();
  Py_RETURN_NONE;
}

PyMethodDef kStorageMethods[] = {
    {"storage_exit_cleanup", GuardedMethod<StorageExitCleanupPy>(), METH_NOARGS, "destroy every stored value (exit)"},
    {"storage_set", GuardedMethod<StorageSet>(), METH_VARARGS, "storage_set(key, value)"},
    {"storage_get", GuardedMethod<StorageGet>(), METH_O, "storage_get(key) -> (found, value)"},
    {"storage_erase", GuardedMethod<StorageErase>(), METH_O, "storage_erase(key)"},
    {"storage_contains", GuardedMethod<StorageContains>(), METH_O, "storage_contains(key) -> bool"},
    {"storage_keys", GuardedMethod<StorageKeys>(), METH_NOARGS, "sorted storage keys"},
    {"storage_get_or_create", GuardedMethod<StorageGetOrCreate>(), METH_VARARGS,
     "storage_get_or_create(key, factory) -> value"},
    {"workspace", GuardedMethod<Workspace>(), METH_VARARGS, "workspace(device_type, device_id, nbytes) -> address"},
    {nullptr, nullptr, 0, nullptr},
};

}  // namespace tensorplug::py
