// torch's autograd version counters, bumped for each torch tensor a direct call writes.
//
// autograd saves a tensor for backward with its version counter's value and refuses the
// backward ("one of the variables needed for gradient computation has been modified by an
// inplace operation") when the counter moved; torch's own in-place ops bump it. A kernel
// that writes a tensor through tensorplug must bump it too, or the backward silently reads
// the new values. The op path does (the native kernel, kernel.cc); a direct call (`mod.fn(t)`) does through this hook, which the torch
// adapter gives its exchange table (a "tensorplug.write_hook" capsule, tensorplug/python.h: any
// adapter can give one). The core tells it of each tensor an "mview" argument or item will
// write, once the tensor is accepted, before the call (a refusal leaves nothing written).
//
// Directly: torch::autograd::impl::bump_version(const at::Tensor&), exported by
// libtorch_cpu, called with the object's at::Tensor (right after its header;
// lazy_views.cc says why that is checked). It throws for an inference tensor outside
// InferenceMode, which torch's in-place ops refuse too: the call is refused with torch's
// text. Checked when the hook is made: the TensorImpl pointer against Tensor._cdata, and a
// bump moves Tensor._version by one. Otherwise the hook calls
// torch.autograd.graph.increment_version(x) (a Python call; it skips inference tensors).
#include <dlfcn.h>

#include <exception>
#include <string>

#include "native.h"

namespace tensorplug_adapters::torch {

namespace {

using WriteHook = TPWriteHook;

using BumpVersion = void (*)(const void* tensor);  // void f(const at::Tensor&)

BumpVersion g_bump_version = nullptr;
PyTypeObject* g_tensor_type = nullptr;       // torch.Tensor (a reference is kept)
PyObject* g_increment_version = nullptr;     // torch.autograd.graph.increment_version

const void* AtTensorOf(PyObject* obj) { return reinterpret_cast<const char*>(obj) + sizeof(PyObject); }

int BumpDirectly(const WriteHook*, PyObject* obj) {
  if (!PyObject_TypeCheck(obj, g_tensor_type)) return 0;
  try {
    g_bump_version(AtTensorOf(obj));
  } catch (const std::exception& e) {
    std::string text = e.what();
    const size_t backtrace = text.find("\nException raised from ");  // c10::Error's, when it keeps one
    if (backtrace != std::string::npos) text.resize(backtrace);
    PyErr_SetString(PyExc_RuntimeError, text.c_str());
    return -1;
  }
  return 0;
}

int BumpByPython(const WriteHook*, PyObject* obj) {
  if (!PyObject_TypeCheck(obj, g_tensor_type)) return 0;
  PyObject* r = PyObject_CallOneArg(g_increment_version, obj);
  if (!r) return -1;
  Py_DECREF(r);
  return 0;
}

const WriteHook kDirectHook{BumpDirectly};
const WriteHook kPythonHook{BumpByPython};

// Tensor._version of `tensor`, -1 on failure (no error left set).
long long VersionOf(PyObject* tensor) {
  PyObject* v = PyObject_GetAttrString(tensor, "_version");
  if (!v) return PyErr_Clear(), -1;
  const long long n = PyLong_AsLongLong(v);
  Py_DECREF(v);
  if (PyErr_Occurred()) return PyErr_Clear(), -1;
  return n;
}

// Whether a direct bump of a new tensor of `torch` moves its _version by exactly one.
bool DirectBumpWorks(PyObject* torch) {
  PyObject* tensor = PyObject_CallMethod(torch, "zeros", "i", 1);
  bool ok = false;
  if (tensor && Py_TYPE(tensor)->tp_basicsize >= Py_ssize_t(sizeof(PyObject) + sizeof(void*))) {
    PyObject* cdata = PyObject_GetAttrString(tensor, "_cdata");  // the TensorImpl's address
    void* impl = cdata ? PyLong_AsVoidPtr(cdata) : nullptr;
    Py_XDECREF(cdata);
    const long long before = VersionOf(tensor);
    if (impl != nullptr && !PyErr_Occurred() && *static_cast<void* const*>(AtTensorOf(tensor)) == impl &&
        before >= 0 && BumpDirectly(nullptr, tensor) == 0) {
      ok = VersionOf(tensor) == before + 1;
    }
  }
  Py_XDECREF(tensor);
  PyErr_Clear();  // a torch without these: the Python hook
  return ok;
}

}  // namespace

// write_hook(torch, libraries) -> (capsule, direct): the write hook for torch.Tensor
// (made once; `libraries`, the already-loaded libtorch paths to find bump_version in).
// `direct`: whether it calls bump_version directly (else increment_version, in Python).
PyObject* WriteHookPy(PyObject*, PyObject* args) {
  PyObject *torch, *libraries;
  if (!PyArg_ParseTuple(args, "OO", &torch, &libraries)) return nullptr;
  static const WriteHook* hook = nullptr;
  if (!hook) {
    PyObject* tensor_type = PyObject_GetAttrString(torch, "Tensor");
    if (!tensor_type) return nullptr;
    if (!PyType_Check(tensor_type)) {
      Py_DECREF(tensor_type);
      return PyErr_Format(PyExc_TypeError, "write_hook() argument 'torch': torch.Tensor is not a type");
    }
    PyObject* graph = PyImport_ImportModule("torch.autograd.graph");
    PyObject* increment = graph ? PyObject_GetAttrString(graph, "increment_version") : nullptr;
    Py_XDECREF(graph);
    if (!increment) {
      Py_DECREF(tensor_type);
      return nullptr;
    }
    PyObject* seq = PySequence_Fast(libraries, "write_hook() argument 'libraries': expected a sequence");
    if (!seq) {
      Py_DECREF(tensor_type);
      Py_DECREF(increment);
      return nullptr;
    }
    BumpVersion bump = nullptr;
    for (Py_ssize_t i = 0; i < PySequence_Fast_GET_SIZE(seq) && !bump; ++i) {
      const char* path = PyUnicode_AsUTF8(PySequence_Fast_GET_ITEM(seq, i));
      if (!path) {
        Py_DECREF(seq);
        Py_DECREF(tensor_type);
        Py_DECREF(increment);
        return nullptr;
      }
      void* lib = dlopen(path, RTLD_NOW | RTLD_NOLOAD | RTLD_LOCAL);  // never loads one
      if (!lib) continue;
      bump = reinterpret_cast<BumpVersion>(dlsym(lib, "_ZN5torch8autograd4impl12bump_versionERKN2at6TensorE"));
    }
    Py_DECREF(seq);
    g_tensor_type = reinterpret_cast<PyTypeObject*>(tensor_type);  // both kept for the process
    g_increment_version = increment;
    g_bump_version = bump;
    hook = bump && DirectBumpWorks(torch) ? &kDirectHook : &kPythonHook;
  }
  PyObject* capsule = PyCapsule_New(const_cast<WriteHook*>(hook), TP_WRITE_HOOK_CAPSULE, nullptr);
  if (!capsule) return nullptr;
  return Py_BuildValue("(NO)", capsule, hook == &kDirectHook ? Py_True : Py_False);
}

}  // namespace tensorplug_adapters::torch
