// The _core extension module: entry points the Python package builds on.
#include <new>
#include <string>
#include <utility>
#include <vector>

#include "call_env.h"
#include "converters.h"
#include "function_object.h"
#include "handle_object.h"
#include "tensorplug/vocabulary.h"

namespace tensorplug::py {

bool InitPlan(PyObject* module);  // plan.cc
bool InitOpCallType(PyObject* module);  // op_call.cc
extern PyMethodDef kStorageMethods[];  // storage.cc
PyObject* FunctionFromPointer(PyObject*, PyObject* args);  // native_function.cc

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
  PyObject* capsule = PyCapsule_New(module, kLibraryCapsule, Guarded<LibraryCapsuleDestructor>);
  if (!capsule) {
    TPModuleRelease(module);
    return nullptr;
  }
  PyObject* names = PyList_New(0);
  if (names && TPModuleListFunctions(module, Guarded<AppendName>, names) != 0) {
    Py_DECREF(names);
    Py_DECREF(capsule);
    return RaiseFromTPError();
  }
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
  if (names) TPGlobalFuncListNames(Guarded<AppendName>, names);
  return names;
}

PyObject* SetResolverPy(PyObject*, PyObject* fn) {
  SetResolver(fn == Py_None ? nullptr : fn);
  Py_RETURN_NONE;
}

PyObject* SetScalarResolverPy(PyObject*, PyObject* fn) {
  if (!PyCallable_Check(fn)) return PyErr_Format(PyExc_TypeError, "set_scalar_resolver(): expected a callable");
  SetScalarResolver(fn);
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
  PyObject *lazy_views = Py_None, *write_hook = Py_None;
  if (!PyArg_ParseTuple(args, "OUO|pOpO", &capsule, &name, &read_only, &python, &lazy_views, &negative_strides,
                        &write_hook)) {
    return nullptr;
  }
  return MakeAdapterTable(capsule, name, read_only, python != 0, lazy_views, negative_strides != 0, write_hook);
}

// call_scratch() -> "tensorplug.call_scratch" capsule (tensorplug/python.h): the call's
// scratch arena, for adapters' exchange functions whose views need storage.
const TPCallScratch kCallScratch{ScratchAlloc};

PyObject* CallScratchPy(PyObject*, PyObject*) {
  return PyCapsule_New(const_cast<TPCallScratch*>(&kCallScratch), TP_CALL_SCRATCH_CAPSULE, nullptr);
}

PyObject* GetStreamPy(PyObject*, PyObject* args) {
  int device_type, device_id;
  if (!PyArg_ParseTuple(args, "ii", &device_type, &device_id)) return nullptr;
  void* stream = TPEnvGetStream(device_type, device_id);
  if (!stream) Py_RETURN_NONE;
  return PyLong_FromVoidPtr(stream);
}

// live_overrides(delta) -> int: tensorplug._context counts the override contexts entered
// and not yet left (all threads and tasks); calls read the ContextVar only while it is > 0.
PyObject* LiveOverridesPy(PyObject*, PyObject* arg) {
  long delta = PyLong_AsLong(arg);
  if (delta == -1 && PyErr_Occurred()) return nullptr;
  if (delta < -1 || delta > 1) return PyErr_Format(PyExc_ValueError, "live_overrides(): delta must be -1, 0 or 1");
  return PyLong_FromLongLong(g_live_overrides.fetch_add(delta) + delta);
}

PyObject* PackOverridesPy(PyObject*, PyObject* args) {
  PyObject *streams, *output;
  if (!PyArg_ParseTuple(args, "OO", &streams, &output)) return nullptr;
  return PackOverrides(streams, output);
}

// Tests of the C++ exception barrier: throws the named C++ exception inside a guarded
// entry point, as a bug in the binding would.
PyObject* ThrowForTestPy(PyObject*, PyObject* arg) {
  const char* kind = PyUnicode_AsUTF8(arg);
  if (!kind) return nullptr;
  std::string name(kind);
  if (name == "bad_alloc") throw std::bad_alloc();
  if (name == "stoi") return PyLong_FromLong(std::stoi(name));  // std::invalid_argument
  if (name == "out_of_range") return PyLong_FromLong(std::stoi("99999999999"));
  if (name == "string") return PyUnicode_FromString(std::string().substr(1).c_str());  // std::out_of_range
  if (name == "int") throw 42;
  return PyErr_Format(PyExc_ValueError, "unknown exception kind '%s'", kind);
}

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
  if (!HoldsItsValues(table, obj)) {
    PyObject* label = PyUnicode_FromString("from_dlpack() argument 'obj'");
    PrefixError(label);
    Py_XDECREF(label);
    return nullptr;
  }
  PythonTableScope scope(table);
  DLManagedTensorVersioned* managed = nullptr;
  if (table->api->managed_tensor_from_py_object_no_sync(obj, &managed) != 0) return nullptr;
  if (!CheckTensorLayout(managed->dl_tensor, "from_dlpack() argument 'obj': the tensor", PyExc_BufferError)) {
    if (managed->deleter) managed->deleter(managed);
    return nullptr;
  }
  if (managed->dl_tensor.ndim > 0 && !managed->dl_tensor.strides && !(managed = WithExplicitStrides(managed))) {
    return nullptr;
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
  if (!ok) return PyErr_Format(PyExc_TypeError, "empty() argument 'dtype': expected %s, got %R", kDTypeExpected, dtype_obj);
  prototype.device = {kDLCPU, 0};
  if (device_obj && device_obj != Py_None) {
    PyObject* text = PyObject_Str(device_obj);
    const char* s = text ? PyUnicode_AsUTF8(text) : nullptr;
    ok = s && DeviceFromString(s, &prototype.device);
    Py_XDECREF(text);
    if (!ok) return PyErr_Format(PyExc_ValueError, "empty() argument 'device': expected a device such as 'cpu', got %R", device_obj);
  }
  if (shape.size() > TP_MAX_NDIM) {
    return PyErr_Format(PyExc_ValueError, "empty() argument 'shape': %zu dimensions; tensorplug supports at most %d",
                        shape.size(), TP_MAX_NDIM);
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
    {"load_library", GuardedMethod<LoadLibrary>(), METH_VARARGS, "load_library(path, flags=0) -> (handle, names)"},
    {"get_function", GuardedMethod<GetFunction>(), METH_VARARGS, "get_function(handle, name, release_gil=True) -> Function"},
    {"function_from_pointer", GuardedMethod<FunctionFromPointer>(), METH_VARARGS,
     "function_from_pointer(address, signature, name, owner, release_gil=True) -> Function"},
    {"register_global_func", GuardedMethod<RegisterGlobalFunc>(), METH_VARARGS, "register_global_func(name, f, override=False)"},
    {"get_global_func", GuardedMethod<GetGlobalFunc>(), METH_O, "get_global_func(name) -> Function | None"},
    {"remove_global_func", GuardedMethod<RemoveGlobalFunc>(), METH_O, "remove_global_func(name)"},
    {"list_global_func_names", GuardedMethod<ListGlobalFuncNames>(), METH_NOARGS, "sorted names of global functions"},
    {"set_resolver", GuardedMethod<SetResolverPy>(), METH_O, "set_resolver(fn): fn(type) -> adapter table capsule | None"},
    {"set_scalar_resolver", GuardedMethod<SetScalarResolverPy>(), METH_O,
     "set_scalar_resolver(fn): fn(type) -> 'bool' | None (tensorplug_scalar_kind)"},
    {"clear_adapter_cache", GuardedMethod<ClearCachePy>(), METH_NOARGS, "forget every per-type adapter"},
    {"make_python_table", GuardedMethod<MakePythonTablePy>(), METH_VARARGS,
     "make_python_table(to_dlpack, from_dlpack, current_stream, allocate, importer=None) -> exchange API capsule"},
    {"make_adapter_table", GuardedMethod<MakeAdapterTablePy>(), METH_VARARGS,
     "make_adapter_table(capsule, name, read_only: bool | probe capsule, python=False, lazy_views=None, negative_strides=True, write_hook=None) -> adapter table capsule"},
    {"call_scratch", GuardedMethod<CallScratchPy>(), METH_NOARGS, "the call scratch capsule (tensorplug/python.h)"},
    {"get_stream", GuardedMethod<GetStreamPy>(), METH_VARARGS, "get_stream(device_type, device_id) -> int | None"},
    {"pack_overrides", GuardedMethod<PackOverridesPy>(), METH_VARARGS, "pack_overrides(streams, output) -> bytes a call applies"},
    {"live_overrides", GuardedMethod<LiveOverridesPy>(), METH_O, "live_overrides(delta) -> count of live override contexts"},
    {"_throw_for_test", GuardedMethod<ThrowForTestPy>(), METH_O, "throw a C++ exception (tests of the barrier)"},
    {"bound_allocator", GuardedMethod<BoundAllocatorPy>(), METH_NOARGS, "the thread's bound allocator address (0: default)"},
    {"from_dlpack", GuardedMethod<FromDLPackPy>(), METH_O, "from_dlpack(obj) -> Tensor"},
    {"to_framework", GuardedMethod<ToFrameworkPy>(), METH_VARARGS, "to_framework(tensor, adapter_table) -> framework tensor"},
    {"empty", GuardedMethod<EmptyPy>(), METH_VARARGS, "empty(shape, dtype, device='cpu') -> Tensor (default CPU allocator)"},
    {"set_device_class", GuardedMethod<SetDeviceClassPy>(), METH_O, nullptr},
    {"set_signature_builder", GuardedMethod<SetSignatureBuilderPy>(), METH_O, nullptr},
    {"abi_version", GuardedMethod<ABIVersionPy>(), METH_NOARGS, "TENSORPLUG_ABI_VERSION of libtensorplug"},
    {nullptr, nullptr, 0, nullptr},
};

// _core.VOCABULARY: every list of tensorplug/vocabulary.h and c_api.h's error kinds, as
// tuples, for the Python package and the conformance kit (tests/test_vocabulary.py checks
// them against the headers).
// A tuple of `items` (references taken); nullptr if any item is.
PyObject* TupleOf(const std::vector<PyObject*>& items) {
  PyObject* tuple = PyTuple_New(Py_ssize_t(items.size()));
  for (size_t i = 0; i < items.size(); ++i) {
    if (tuple && items[i]) {
      PyTuple_SET_ITEM(tuple, Py_ssize_t(i), items[i]);
    } else {
      Py_XDECREF(items[i]);
      Py_CLEAR(tuple);
    }
  }
  return tuple;
}

PyObject* MakeVocabulary() {
  const std::pair<const char*, PyObject*> lists[] = {
#define TP_X(type, name) Py_BuildValue("(si)", name, int(type)),
      {"device_types", TupleOf({TP_DEVICE_TYPES(TP_X)})},
      {"device_aliases", TupleOf({TP_DEVICE_ALIASES(TP_X)})},
#undef TP_X
#define TP_X(name, code, bits) Py_BuildValue("(sii)", name, int(code), int(bits)),
      {"dtypes", TupleOf({TP_DTYPES(TP_X)})},
      {"dtype_aliases", TupleOf({TP_DTYPE_ALIASES(TP_X)})},
#undef TP_X
#define TP_X(code, stem, sized) Py_BuildValue("(isO)", int(code), stem, (sized) ? Py_True : Py_False),
      {"dtype_codes", TupleOf({TP_DTYPE_CODES(TP_X)})},
#undef TP_X
#define TP_X(id, name) PyUnicode_FromString(name),
      {"param_kinds", TupleOf({TP_PARAM_KINDS(TP_X)})},
      {"result_kinds", TupleOf({TP_RESULT_KINDS(TP_X)})},
#undef TP_X
#define TP_X(name) PyUnicode_FromString(#name),
      {"error_kinds", TupleOf({TP_ERROR_KINDS(TP_X)})},
#undef TP_X
  };
  PyObject* vocab = PyDict_New();
  for (const auto& [key, value] : lists) {
    if (vocab && (!value || PyDict_SetItemString(vocab, key, value) < 0)) Py_CLEAR(vocab);
    Py_XDECREF(value);
  }
  return vocab;
}

PyModuleDef kModule = {PyModuleDef_HEAD_INIT, "tensorplug._core", "tensorplug's compiled core.", -1, kMethods};

}  // namespace
}  // namespace tensorplug::py

namespace tensorplug::py {
namespace {
PyObject* CreateModule() {
  PyObject* module = PyModule_Create(&kModule);
  if (!module) return nullptr;
#ifdef Py_GIL_DISABLED
  // Single-phase init's form of the Py_mod_gil slot: the core's global caches rely on the
  // GIL (docs/decisions.md, "Free-threaded Python"), so a free-threaded interpreter keeps
  // the GIL enabled while this module is loaded.
  PyUnstable_Module_SetGIL(module, Py_MOD_GIL_USED);
#endif
  PyObject* overrides = OverrideVar();
  PyObject* vocabulary = MakeVocabulary();
  const bool vocabulary_added = vocabulary && PyModule_AddObjectRef(module, "VOCABULARY", vocabulary) == 0;
  Py_XDECREF(vocabulary);
  if (!vocabulary_added || !overrides || !InitTensorType(module) || !InitFunctionType(module) || !InitPlan(module) ||
      !InitHandleType(module) || !InitOpCallType(module) ||
      PyModule_AddObjectRef(module, "overrides", overrides) < 0 || PyModule_AddFunctions(module, kStorageMethods) < 0 ||
      PyModule_AddIntConstant(module, "MAX_NDIM", TP_MAX_NDIM) < 0) {
    Py_DECREF(module);
    return nullptr;
  }
  return module;
}
}  // namespace
}  // namespace tensorplug::py

PyMODINIT_FUNC PyInit__core(void) { return tensorplug::py::Guarded<tensorplug::py::CreateModule>(); }
