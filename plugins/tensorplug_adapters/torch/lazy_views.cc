// torch's lazy conjugate and negative bits, read per tensor argument without a Python call.
//
// x.conj() of a complex tensor, x.conj().imag and torch._neg_view(x) are views whose values
// are conjugated or negated on read: their memory holds the plain values, and DLPack (so
// torch's exchange table) has no bit to say so. A kernel given their memory reads the wrong
// sign. The core refuses them, asking this probe (a "tensorplug.lazy_view_probe" capsule,
// tensorplug/python.h) per tensor.
//
// Calling x.is_neg() costs about 1,000 instructions, 60% of an eager call. torch keeps a
// Python tensor's at::Tensor (one TensorImpl pointer) right after the object's header
// (THPVariable, torch/csrc/autograd/python_variable.h) and exports the bit readers
// at::compositeimplicitautograd::is_conj/is_neg(const at::Tensor&) from libtorch_cpu as
// plain functions (two reads of the key set, no dispatcher). The probe calls those with
// the object's at::Tensor: about 20 instructions. Neither fact is a promise of torch, so
// both are checked when the probe is made, on tensors with known bits (the TensorImpl
// pointer against Tensor._cdata, the answers against the bits); when a check fails the
// probe calls x.is_conj() / x.is_neg() instead, correct at the Python call's cost.
#include <dlfcn.h>

#include "native.h"

namespace tensorplug_adapters::torch {

namespace {

using LazyViewProbe = TPLazyViewProbe;

using BitReader = bool (*)(const void* tensor);  // bool f(const at::Tensor&)

constexpr const char* kConjugate = kTorchConjugateView;
constexpr const char* kNegative = kTorchNegativeView;

BitReader g_is_conj = nullptr;
BitReader g_is_neg = nullptr;
PyTypeObject* g_tensor_type = nullptr;  // torch.Tensor (a reference is kept)
PyObject* g_is_conj_name = nullptr;
PyObject* g_is_neg_name = nullptr;

const void* AtTensorOf(PyObject* obj) { return reinterpret_cast<const char*>(obj) + sizeof(PyObject); }

int ReadDirectly(PyObject* obj, const char** what) {
  if (!PyObject_TypeCheck(obj, g_tensor_type)) return 0;  // not a torch tensor: no such bits
  if (g_is_conj(AtTensorOf(obj))) return *what = kConjugate, 1;
  if (g_is_neg(AtTensorOf(obj))) return *what = kNegative, 1;
  return 0;
}

// -1 with the error set, else the method's truth.
int CallBit(PyObject* obj, PyObject* name) {
  PyObject* r = PyObject_CallMethodNoArgs(obj, name);
  if (!r) return -1;
  const int bit = PyObject_IsTrue(r);
  Py_DECREF(r);
  return bit;
}

int ReadByPython(PyObject* obj, const char** what) {
  if (!PyObject_TypeCheck(obj, g_tensor_type)) return 0;
  int bit = CallBit(obj, g_is_conj_name);
  if (bit != 0) return bit < 0 ? -1 : (*what = kConjugate, 1);
  bit = CallBit(obj, g_is_neg_name);
  if (bit != 0) return bit < 0 ? -1 : (*what = kNegative, 1);
  return 0;
}

const LazyViewProbe kDirectProbe{ReadDirectly};
const LazyViewProbe kPythonProbe{ReadByPython};

// Whether the direct reads give `conj` and `neg` for `tensor` (a torch.Tensor).
bool DirectReadAgrees(PyObject* tensor, bool conj, bool neg) {
  if (Py_TYPE(tensor)->tp_basicsize < Py_ssize_t(sizeof(PyObject) + sizeof(void*))) return false;
  PyObject* cdata = PyObject_GetAttrString(tensor, "_cdata");  // the TensorImpl's address
  if (!cdata) return PyErr_Clear(), false;
  void* impl = PyLong_AsVoidPtr(cdata);
  Py_DECREF(cdata);
  if (PyErr_Occurred()) return PyErr_Clear(), false;
  if (impl == nullptr || *static_cast<void* const*>(AtTensorOf(tensor)) != impl) return false;
  return g_is_conj(AtTensorOf(tensor)) == conj && g_is_neg(AtTensorOf(tensor)) == neg;
}

// Tensors with known bits, from `torch`; true when the direct reads agree on each.
bool DirectReadsWork(PyObject* torch) {
  PyObject* plain = PyObject_CallMethod(torch, "zeros", "i", 1);  // float32
  PyObject* dtype = PyObject_GetAttrString(torch, "complex64");
  PyObject* complex = plain && dtype ? PyObject_CallMethod(plain, "to", "O", dtype) : nullptr;
  Py_XDECREF(dtype);
  PyObject* conj = complex ? PyObject_CallMethod(complex, "conj", nullptr) : nullptr;
  PyObject* neg = plain ? PyObject_CallMethod(torch, "_neg_view", "O", plain) : nullptr;
  const bool ok = plain && complex && conj && neg && DirectReadAgrees(plain, false, false) &&
                  DirectReadAgrees(complex, false, false) && DirectReadAgrees(conj, true, false) &&
                  DirectReadAgrees(neg, false, true);
  Py_XDECREF(plain);
  Py_XDECREF(complex);
  Py_XDECREF(conj);
  Py_XDECREF(neg);
  PyErr_Clear();  // a torch without these functions: the Python probe
  return ok;
}

}  // namespace

// lazy_view_probe(torch, libraries) -> (capsule, direct): the probe for torch.Tensor
// (made once; `libraries`, the already-loaded libtorch paths to find the bit readers in).
// `direct`: whether it reads the bits directly (else it calls x.is_conj() / x.is_neg()).
PyObject* LazyViewProbePy(PyObject*, PyObject* args) {
  PyObject *torch, *libraries;
  if (!PyArg_ParseTuple(args, "OO", &torch, &libraries)) return nullptr;
  static const LazyViewProbe* probe = nullptr;
  if (!probe) {
    PyObject* tensor_type = PyObject_GetAttrString(torch, "Tensor");
    if (!tensor_type) return nullptr;
    if (!PyType_Check(tensor_type)) {
      Py_DECREF(tensor_type);
      return PyErr_Format(PyExc_TypeError, "lazy_view_probe() argument 'torch': torch.Tensor is not a type");
    }
    g_is_conj_name = PyUnicode_InternFromString("is_conj");
    g_is_neg_name = PyUnicode_InternFromString("is_neg");
    if (!g_is_conj_name || !g_is_neg_name) {
      Py_DECREF(tensor_type);
      return nullptr;
    }
    PyObject* seq = PySequence_Fast(libraries, "lazy_view_probe() argument 'libraries': expected a sequence");
    if (!seq) {
      Py_DECREF(tensor_type);
      return nullptr;
    }
    for (Py_ssize_t i = 0; i < PySequence_Fast_GET_SIZE(seq) && !(g_is_conj && g_is_neg); ++i) {
      const char* path = PyUnicode_AsUTF8(PySequence_Fast_GET_ITEM(seq, i));
      if (!path) {
        Py_DECREF(seq);
        Py_DECREF(tensor_type);
        return nullptr;
      }
      void* lib = dlopen(path, RTLD_NOW | RTLD_NOLOAD | RTLD_LOCAL);  // never loads one
      if (!lib) continue;
      g_is_conj = reinterpret_cast<BitReader>(dlsym(lib, "_ZN2at25compositeimplicitautograd7is_conjERKNS_6TensorE"));
      g_is_neg = reinterpret_cast<BitReader>(dlsym(lib, "_ZN2at25compositeimplicitautograd6is_negERKNS_6TensorE"));
    }
    Py_DECREF(seq);
    g_tensor_type = reinterpret_cast<PyTypeObject*>(tensor_type);  // kept for the process
    probe = g_is_conj && g_is_neg && DirectReadsWork(torch) ? &kDirectProbe : &kPythonProbe;
  }
  PyObject* capsule = PyCapsule_New(const_cast<LazyViewProbe*>(probe), TP_LAZY_VIEW_PROBE_CAPSULE, nullptr);
  if (!capsule) return nullptr;
  return Py_BuildValue("(NO)", capsule, probe == &kDirectProbe ? Py_True : Py_False);
}

}  // namespace tensorplug_adapters::torch
