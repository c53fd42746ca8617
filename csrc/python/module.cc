// The _core extension module: entry points the Python package builds on.
#include <string>
#include <vector>

#include "common.h"

namespace tensorplug::py {

// Defined in the other translation units.
bool InitTensorType(PyObject* module);
bool InitFunctionType(PyObject* module);
void SetResolver(PyObject* resolver);
void ClearAdapterCache();
void SetSignatureBuilder(PyObject* builder);
PyObject* MakePythonTable(PyObject*, PyObject*, PyObject*, PyObject*, PyObject* importer);
PyObject* MakeAdapterTable(PyObject* capsule, PyObject* name, PyObject* read_only, bool python,
                           PyObject* complex_check, bool negative_strides);
PyObject* PushStream(int32_t device_type, int32_t device_id, void* handle);
PyObject* PopStream();
PyObject* PushOutput(AdapterTable* table);
PyObject* PopOutput();
int MakePythonFunction(PyObject* callable, TPFunctionHandle* out);
TPFunctionHandle FunctionHandleOf(PyObject* obj);
extern PyObject* g_device_class;

namespace {

constexpr char kLibraryCapsule[] = "tensorplug.library";

void LibraryCapsuleDestructor(PyObject* capsule) {
  TPModuleRelease(static_cast<TPModuleHandle>(PyCapsule_GetPointer(capsule, kLibraryCapsule)));
}

void AppendName(void* ctx, const char* name) {
  auto* list = static_cast<PyObject*>(ctx);
  if (PyObject* s = PyUnicode_FromString(name)) {
    PyList_Append(list, s);
    Py_DECREF(s);
  }
}

// load_library(path, flags=0) -> (handle, [names]); flags: TP_MODULE_LOAD_*
PyObject* LoadLibrary(PyObject*, PyObject* args) {
  PyObject* arg;
  unsigned int flags = 0;
  if (!PyArg_ParseTuple(args, "O|I", &arg, &flags)) return nullptr;
  PyObject* path = nullptr;
  if (!PyUnicode_FSConverter(arg, &path)) return nullptr;
  TPModuleHandle module = nullptr;
  int rc;
  Py_BEGIN_ALLOW_THREADS  // static initialisers of the library may take a while
  rc = TPModuleLoadEx(PyBytes_AS_STRING(path), flags, &module);
  Py_END_ALLOW_THREADS
  Py_DECREF(path);
  if (rc != 0) return RaiseFromTPError();
  PyObject* capsule = PyCapsule_New(module, kLibraryCapsule, LibraryCapsuleDestructor);
  if (!capsule) {
    TPModuleRelease(module);
    return nullptr;
  }
  PyObject* names = PyList_New(0);
  if (names) TPModuleListFunctions(module, AppendName, names);
  return Py_BuildValue("(NN)", capsule, names);
}

// get_function(handle, name, release_gil) -> Function
PyObject* GetFunction(PyObject*, PyObject* args) {
  PyObject *capsule, *name;
  int release_gil = 1;
  if (!PyArg_ParseTuple(args, "OU|p", &capsule, &name, &release_gil)) return nullptr;
  auto* module = static_cast<TPModuleHandle>(PyCapsule_GetPointer(capsule, kLibraryCapsule));
  if (!module) return nullptr;
  const char* cname = PyUnicode_AsUTF8(name);
  if (!cname) return nullptr;
  TPFunctionHandle func = nullptr;
  if (TPModuleGetFunction(module, cname, &func) != 0) return RaiseFromTPError();
  if (!func) return PyErr_Format(PyExc_AttributeError, "no function %R", name);
  PyObject* f = FunctionFromHandle(func, name, release_gil != 0);
  TPFunctionRelease(func);
  return f;
}

PyObject* RegisterGlobalFunc(PyObject*, PyObject* args) {
  const char* name;
  PyObject* callable;
  int allow_override = 0;
  if (!PyArg_ParseTuple(args, "sO|p", &name, &callable, &allow_override)) return nullptr;
  TPFunctionHandle func = FunctionHandleOf(callable);
  if (func) {
    TPFunctionRetain(func);
  } else {
    if (!PyCallable_Check(callable)) {
      return PyErr_Format(PyExc_TypeError, "register_global_func() argument 'f': expected a callable, got %s",
                          Py_TYPE(callable)->tp_name);
    }
    if (MakePythonFunction(callable, &func) != 0) return RaiseFromTPError();
  }
  int rc = TPGlobalFuncRegister(name, func, allow_override);
  TPFunctionRelease(func);
  if (rc != 0) return RaiseFromTPError();
  Py_RETURN_NONE;
}

PyObject* GetGlobalFunc(PyObject*, PyObject* arg) {
  const char* name = PyUnicode_AsUTF8(arg);
  if (!name) return nullptr;
  TPFunctionHandle func = nullptr;
  TPGlobalFuncGet(name, &func);
  if (!func) Py_RETURN_NONE;
  PyObject* f = FunctionFromHandle(func, arg, true);
  TPFunctionRelease(func);
  return f;
}

PyObject* RemoveGlobalFunc(PyObject*, PyObject* arg) {
  const char* name = PyUnicode_AsUTF8(arg);
  if (!name) return nullptr;
  TPGlobalFuncRemove(name);
  Py_RETURN_NONE;
}

PyObject* ListGlobalFuncNames(PyObject*, PyObject*) {
  PyObject* names = PyList_New(0);
  if (names) TPGlobalFuncListNames(AppendName, names);
  return names;
}

PyObject* SetResolverPy(PyObject*, PyObject* fn) {
  SetResolver(fn == Py_None ? nullptr : fn);
  Py_RETURN_NONE;
}

PyObject* ClearCachePy(PyObject*, PyObject*) {
  ClearAdapterCache();
  Py_RETURN_NONE;
}

PyObject* MakePythonTablePy(PyObject*, PyObject* args) {
  PyObject *to_dlpack, *from_dlpack, *current_stream, *allocate;
  PyObject* importer = Py_None;
  if (!PyArg_ParseTuple(args, "OOOO|O", &to_dlpack, &from_dlpack, &current_stream, &allocate, &importer)) {
    return nullptr;
  }
  return MakePythonTable(to_dlpack, from_dlpack, current_stream, allocate, importer);
}

PyObject* MakeAdapterTablePy(PyObject*, PyObject* args) {
  PyObject *capsule, *name;
  PyObject* read_only;
  int python = 0, negative_strides = 1;
  PyObject* complex_check = Py_None;
  if (!PyArg_ParseTuple(args, "OUO|pOp", &capsule, &name, &read_only, &python, &complex_check, &negative_strides)) {
    return nullptr;
  }
  return MakeAdapterTable(capsule, name, read_only, python != 0, complex_check, negative_strides != 0);
}

PyObject* NumpyExchangeAPIPy(PyObject*, PyObject*) {
  const DLPackExchangeAPI* api = NumpyExchangeAPI();
  if (!api) return nullptr;
  return PyCapsule_New(const_cast<DLPackExchangeAPI*>(api), "dlpack_exchange_api", nullptr);
}

// C functions compiled into the core for the first-party numpy and jax adapters, handed
// out as the capsules any adapter can supply (tensorplug.exchange).
const ReadOnlyProbe kNumpyReadOnlyProbe{NumpyIsReadOnly};
const Importer kJaxImporter{JaxManaged, JaxView};

PyObject* NumpyReadOnlyProbePy(PyObject*, PyObject*) {
  return PyCapsule_New(const_cast<ReadOnlyProbe*>(&kNumpyReadOnlyProbe), "tensorplug.read_only_probe", nullptr);
}

PyObject* JaxImporterPy(PyObject*, PyObject*) {
  return PyCapsule_New(const_cast<Importer*>(&kJaxImporter), "tensorplug.importer", nullptr);
}

PyObject* PushStreamPy(PyObject*, PyObject* args) {
  int device_type, device_id;
  PyObject* handle;
  if (!PyArg_ParseTuple(args, "iiO", &device_type, &device_id, &handle)) return nullptr;
  void* stream = handle == Py_None ? nullptr : PyLong_AsVoidPtr(handle);
  if (!stream && PyErr_Occurred()) return nullptr;
  return PushStream(device_type, device_id, stream);
}

PyObject* PopStreamPy(PyObject*, PyObject*) { return PopStream(); }

PyObject* GetStreamPy(PyObject*, PyObject* args) {
  int device_type, device_id;
  if (!PyArg_ParseTuple(args, "ii", &device_type, &device_id)) return nullptr;
  void* stream = TPEnvGetStream(device_type, device_id);
  if (!stream) Py_RETURN_NONE;
  return PyLong_FromVoidPtr(stream);
}

PyObject* PushOutputPy(PyObject*, PyObject* capsule) {
  auto* table = static_cast<AdapterTable*>(PyCapsule_GetPointer(capsule, "tensorplug.adapter_table"));
  if (!table) return nullptr;
  return PushOutput(table);
}

PyObject* PopOutputPy(PyObject*, PyObject*) { return PopOutput(); }

// The bound allocator as an int (0: the default): lets tests check it is restored.
PyObject* BoundAllocatorPy(PyObject*, PyObject*) {
  return PyLong_FromVoidPtr(reinterpret_cast<void*>(TPEnvGetAllocator()));
}

PyObject* FromDLPackPy(PyObject*, PyObject* obj) {
  if (Py_TYPE(obj) == TensorType) return Py_NewRef(obj);
  if (PyCapsule_CheckExact(obj)) {
    DLManagedTensorVersioned* managed = nullptr;
    if (ManagedFromCapsule(obj, &managed) != 0) return nullptr;
    return TensorFromManaged(managed);
  }
  AdapterTable* table = LookupAdapter(Py_TYPE(obj));
  if (!table) {
    if (PyErr_Occurred()) return nullptr;
    return PyErr_Format(PyExc_TypeError,
                        "from_dlpack() argument 'obj': expected a tensor of an installed adapter or a "
                        "DLPack capsule, got %s",
                        Py_TYPE(obj)->tp_name);
  }
  PythonTableScope scope(table);
  DLManagedTensorVersioned* managed = nullptr;
  if (table->api->managed_tensor_from_py_object_no_sync(obj, &managed) != 0) return nullptr;
  if (table->complex_check && managed->dl_tensor.dtype.code == kDLComplex) {
    PyObject* ok = PyObject_CallOneArg(table->complex_check, obj);
    if (!ok) {
      if (managed->deleter) managed->deleter(managed);
      return nullptr;
    }
    Py_DECREF(ok);
  }
  if (table->read_only == ReadOnlyPolicy::kAlways) managed->flags |= DLPACK_FLAG_BITMASK_READ_ONLY;
  return TensorFromManaged(managed);
}

// to_framework(tensor, adapter_table) -> the framework's tensor (zero copy)
PyObject* ToFrameworkPy(PyObject*, PyObject* args) {
  PyObject *tensor, *capsule;
  if (!PyArg_ParseTuple(args, "O!O", TensorType, &tensor, &capsule)) return nullptr;
  auto* table = static_cast<AdapterTable*>(PyCapsule_GetPointer(capsule, "tensorplug.adapter_table"));
  if (!table) return nullptr;
  DLManagedTensorVersioned* managed = nullptr;
  if (CoreTensorTable()->api->managed_tensor_from_py_object_no_sync(tensor, &managed) != 0) return nullptr;
  TPAny value;
  value.type_index = kTPTensor;
  value.flags = 0;
  value.v_tensor = managed;
  return ValueToPython(&value, table);
}

// empty(shape, dtype, device) -> Tensor from libtensorplug's default CPU allocator.
PyObject* EmptyPy(PyObject*, PyObject* args) {
  PyObject *shape_obj, *dtype_obj, *device_obj = nullptr;
  if (!PyArg_ParseTuple(args, "OO|O", &shape_obj, &dtype_obj, &device_obj)) return nullptr;
  PyObject* seq = PySequence_Fast(shape_obj, "empty() argument 'shape': expected a sequence of ints");
  if (!seq) return nullptr;
  std::vector<int64_t> shape(size_t(PySequence_Fast_GET_SIZE(seq)));
  for (size_t i = 0; i < shape.size(); ++i) {
    shape[i] = PyLong_AsLongLong(PySequence_Fast_GET_ITEM(seq, Py_ssize_t(i)));
    if (shape[i] == -1 && PyErr_Occurred()) {
      Py_DECREF(seq);
      return nullptr;
    }
  }
  Py_DECREF(seq);
  DLTensor prototype{};
  PyObject* dtype_text = PyObject_Str(dtype_obj);
  if (!dtype_text) return nullptr;
  const char* dtype_str = PyUnicode_AsUTF8(dtype_text);
  bool ok = dtype_str && DTypeFromString(dtype_str, &prototype.dtype);
  Py_DECREF(dtype_text);
  if (!ok) return PyErr_Format(PyExc_TypeError, "empty() argument 'dtype': expected a dtype such as 'float32', got %R", dtype_obj);
  prototype.device = {kDLCPU, 0};
  if (device_obj && device_obj != Py_None) {
    PyObject* text = PyObject_Str(device_obj);
    const char* s = text ? PyUnicode_AsUTF8(text) : nullptr;
    ok = s && DeviceFromString(s, &prototype.device);
    Py_XDECREF(text);
    if (!ok) return PyErr_Format(PyExc_ValueError, "empty() argument 'device': expected a device such as 'cpu', got %R", device_obj);
  }
  prototype.ndim = int32_t(shape.size());
  prototype.shape = shape.data();
  DLPackManagedTensorAllocator previous = TPEnvSetAllocator(nullptr);
  DLManagedTensorVersioned* managed = nullptr;
  int rc = TPEnvAllocTensor(&prototype, &managed);
  TPEnvSetAllocator(previous);
  if (rc != 0) return RaiseFromTPError();
  return TensorFromManaged(managed);
}

PyObject* SetDeviceClassPy(PyObject*, PyObject* cls) {
  Py_INCREF(cls);
  Py_XSETREF(g_device_class, cls);
  Py_RETURN_NONE;
}

PyObject* SetSignatureBuilderPy(PyObject*, PyObject* fn) {
  SetSignatureBuilder(fn);
  Py_RETURN_NONE;
}

PyObject* ABIVersionPy(PyObject*, PyObject*) { return PyLong_FromLong(TPGetABIVersion()); }

PyMethodDef kMethods[] = {
    {"load_library", LoadLibrary, METH_VARARGS, "load_library(path, flags=0) -> (handle, names)"},
    {"get_function", GetFunction, METH_VARARGS, "get_function(handle, name, release_gil=True) -> Function"},
    {"register_global_func", RegisterGlobalFunc, METH_VARARGS, "register_global_func(name, f, override=False)"},
    {"get_global_func", GetGlobalFunc, METH_O, "get_global_func(name) -> Function | None"},
    {"remove_global_func", RemoveGlobalFunc, METH_O, "remove_global_func(name)"},
    {"list_global_func_names", ListGlobalFuncNames, METH_NOARGS, "sorted names of global functions"},
    {"set_resolver", SetResolverPy, METH_O, "set_resolver(fn): fn(type) -> adapter table capsule | None"},
    {"clear_adapter_cache", ClearCachePy, METH_NOARGS, "forget every per-type adapter"},
    {"make_python_table", MakePythonTablePy, METH_VARARGS,
     "make_python_table(to_dlpack, from_dlpack, current_stream, allocate, importer=None) -> exchange API capsule"},
    {"make_adapter_table", MakeAdapterTablePy, METH_VARARGS,
     "make_adapter_table(capsule, name, read_only: bool | probe capsule, python=False, complex_check=None, negative_strides=True) -> adapter table capsule"},
    {"numpy_exchange_api", NumpyExchangeAPIPy, METH_NOARGS, "the core's numpy exchange API capsule"},
    {"numpy_read_only_probe", NumpyReadOnlyProbePy, METH_NOARGS, "the numpy WRITEABLE-flag read-only probe capsule"},
    {"jax_importer", JaxImporterPy, METH_NOARGS, "the C importer capsule for jax arrays"},
    {"push_stream", PushStreamPy, METH_VARARGS, "push_stream(device_type, device_id, handle)"},
    {"pop_stream", PopStreamPy, METH_NOARGS, "leave the innermost stream context"},
    {"get_stream", GetStreamPy, METH_VARARGS, "get_stream(device_type, device_id) -> int | None"},
    {"push_output", PushOutputPy, METH_O, "push_output(adapter_table)"},
    {"pop_output", PopOutputPy, METH_NOARGS, "leave the innermost output_framework context"},
    {"bound_allocator", BoundAllocatorPy, METH_NOARGS, "the thread's bound allocator address (0: default)"},
    {"from_dlpack", FromDLPackPy, METH_O, "from_dlpack(obj) -> Tensor"},
    {"to_framework", ToFrameworkPy, METH_VARARGS, "to_framework(tensor, adapter_table) -> framework tensor"},
    {"empty", EmptyPy, METH_VARARGS, "empty(shape, dtype, device='cpu') -> Tensor (default CPU allocator)"},
    {"set_device_class", SetDeviceClassPy, METH_O, nullptr},
    {"set_signature_builder", SetSignatureBuilderPy, METH_O, nullptr},
    {"abi_version", ABIVersionPy, METH_NOARGS, "TENSORPLUG_ABI_VERSION of libtensorplug"},
    {nullptr, nullptr, 0, nullptr},
};

PyModuleDef kModule = {PyModuleDef_HEAD_INIT, "tensorplug._core", "tensorplug's compiled core.", -1, kMethods};

}  // namespace
}  // namespace tensorplug::py

PyMODINIT_FUNC PyInit__core(void) {
  using namespace tensorplug::py;
  PyObject* module = PyModule_Create(&kModule);
  if (!module) return nullptr;
  if (!InitTensorType(module) || !InitFunctionType(module)) {
    Py_DECREF(module);
    return nullptr;
  }
  return module;
}
