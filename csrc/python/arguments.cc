// Argument conversion: Python objects -> TPAny, per the parameter's kind. This file: the
// labels and errors every converter uses, strings, devices, dtypes, callables, handles, the
// untyped "any" kind and the converter table; numbers in number_arguments.cc, tensors in
// tensor_arguments.cc (converters.h).
#include <cctype>
#include <cstring>
#include <string>

#include "call_env.h"
#include "converters.h"
#include "handle_object.h"
#include "tensorplug/dtype.h"

namespace tensorplug::py {

// "argument 2 'y'" or "argument 1 'xs' item 3" (items of lists counted from 0, like Python's own messages).
std::string ArgLabel(int index, const Param* param, int item) {
  std::string label = "argument " + std::to_string(index + 1);
  if (param) label += " '" + param->name + "'";
  if (item >= 0) label += " item " + std::to_string(item);
  return label;
}

PyObject* ArgError(FunctionObject* f, int index, const Param* param, const char* expected, PyObject* obj, int item) {
  PyErr_Format(PyExc_TypeError, "%U() %s: expected %s, got %s", f->name, ArgLabel(index, param, item).c_str(),
               expected, Py_TYPE(obj)->tp_name);
  return nullptr;
}

PyObject* ArgumentLabel(FunctionObject* f, int index, const Param* param) {
  if (!param && f->sig->known && size_t(index) < f->sig->params.size()) param = &f->sig->params[size_t(index)];
  if (param) return PyUnicode_FromFormat("%U() argument %d '%s'", f->name, index + 1, param->name.c_str());
  return PyUnicode_FromFormat("%U() argument %d", f->name, index + 1);
}

// Prefix a conversion error (already set) with the argument it concerns.
void AnnotateError(FunctionObject* f, int index, const Param* param, int item) {
  PyObject *type, *value, *tb;
  PyErr_Fetch(&type, &value, &tb);  // kept aside while the label is built
  PyObject* label = ArgumentLabel(f, index, param);
  if (label && item >= 0) Py_SETREF(label, PyUnicode_FromFormat("%U item %d", label, item));
  if (!label) {
    Py_XDECREF(type);
    Py_XDECREF(value);
    Py_XDECREF(tb);
    return;
  }
  PyErr_Restore(type, value, tb);
  PrefixError(label);
  Py_DECREF(label);
}

namespace {

// "<letters>" or "<letters>:<digits>": what the str() of a framework's device object is.
bool IsDeviceLike(const char* s, const char* colon) {
  const size_t name_length = colon ? size_t(colon - s) : std::strlen(s);
  if (name_length == 0) return false;
  for (size_t k = 0; k < name_length; ++k) {
    if (!(std::islower(static_cast<unsigned char>(s[k])) || s[k] == '_')) return false;
  }
  return !colon || (colon[1] != '\0' && std::strspn(colon + 1, "0123456789") == std::strlen(colon + 1));
}

}  // namespace

int ToDevice(PyObject* obj, DLDevice* out) {
  // (device_type, device_id) with a DLPack code; tensorplug.Device, a (name, index) named
  // tuple, takes the string path below through its str() ("cuda:0").
  if (PyTuple_Check(obj) && PyTuple_GET_SIZE(obj) == 2 && !PyUnicode_Check(PyTuple_GET_ITEM(obj, 0))) {
    int type = 0, id = 0;
    if (!PyArg_ParseTuple(obj, "ii", &type, &id)) return PyErr_ExceptionMatches(PyExc_OverflowError) ? -1 : -2;
    // Kernels index device tables with these: only the vocabulary's types, no negative id.
    if (!DeviceTypeName(type)) {
      PyErr_Format(PyExc_ValueError, "device type %d of %R is not a DLPack device type tensorplug knows", type, obj);
      return -1;
    }
    if (id < 0) {
      PyErr_Format(PyExc_ValueError, "device id %d of %R is negative", id, obj);
      return -1;
    }
    *out = {static_cast<DLDeviceType>(type), id};
    return 0;
  }
  PyObject* text = nullptr;
  if (PyTuple_Check(obj) && PyTuple_GET_SIZE(obj) == 2 && PyUnicode_Check(PyTuple_GET_ITEM(obj, 0)) &&
      (PyLong_Check(PyTuple_GET_ITEM(obj, 1)) || PyTuple_GET_ITEM(obj, 1) == Py_None)) {
    // ("cuda", 0), the pair adapters' stream hooks return and use_raw_stream takes: as "cuda:0"
    // (None is index 0, as tensorplug.Device reads it).
    PyObject* index = PyTuple_GET_ITEM(obj, 1);
    text = index == Py_None ? PyUnicode_FromFormat("%U", PyTuple_GET_ITEM(obj, 0))
                            : PyUnicode_FromFormat("%U:%S", PyTuple_GET_ITEM(obj, 0), index);
  } else {
    text = PyObject_Str(obj);  // tensorplug.Device, "cuda:0", a framework's device, ...
  }
  if (!text) return -2;
  const char* s = PyUnicode_AsUTF8(text);
  int rc = s && DeviceFromString(s, out) ? 0 : -2;
  if (rc != 0 && s) {
    const char* colon = std::strchr(s, ':');
    const bool negative = colon && colon[1] == '-';
    size_t digits = colon ? std::strspn(colon + 1 + negative, "0123456789") : 0;
    if (negative && digits > 0 && colon[2 + digits] == '\0') {  // "<type>:-<digits>"
      PyErr_Format(PyExc_ValueError, "device index %s of '%s' is negative", colon + 1, s);
      rc = -1;
    } else if (digits > 0 && colon[1 + digits] == '\0' &&
               DeviceTypeFromName(std::string(s, size_t(colon - s))) >= 0) {  // "<type>:<digits>", index too big
      PyErr_Format(PyExc_ValueError, "device index %s of '%s' is out of range (at most %d)", colon + 1, s,
                   int(INT32_MAX));
      rc = -1;
    } else if (!PyUnicode_Check(obj) && IsDeviceLike(s, colon)) {
      // A framework's device object of a type DLPack has no code for (a "meta" device):
      // a device, but not one a kernel can be given.
      const std::string type_name = colon ? std::string(s, size_t(colon - s)) : std::string(s);
      PyErr_Format(PyExc_ValueError, "%s '%s' is a device tensorplug cannot pass: '%s' is not a DLPack device type",
                   Py_TYPE(obj)->tp_name, s, type_name.c_str());
      rc = -1;
    }
  }
  Py_DECREF(text);
  return rc;
}

int ToDType(PyObject* obj, DLDataType* out) {
  PyObject* text = PyObject_Str(obj);  // "float32", a framework's dtype object, ...
  if (!text) return -1;
  const char* s = PyUnicode_AsUTF8(text);
  bool ok = s && DTypeFromString(s, out);
  Py_DECREF(text);
  return ok ? 0 : -1;
}

namespace {

// Each converter starts from frame.packed[i] = kTPNone (set by the call loop), so a failed
// conversion leaves nothing for the frame to release.
bool ConvertNone(TPAny& out) {
  out.type_index = kTPNone;
  out.v_int64 = 0;
  return true;
}

}  // namespace

// ------------------------------------------------------- strings, devices, callables ----

bool ConvertStr(FunctionObject* f, CallFrame& frame, int i, PyObject* obj, const Param* param) {
  TPAny& out = frame.packed[i];
  if (!PyUnicode_Check(obj)) return ArgError(f, i, param, "a str", obj), false;
  out.type_index = kTPRawStr;
  out.v_c_str = PyUnicode_AsUTF8(obj);  // owned by obj, which outlives the call
  if (!out.v_c_str) return AnnotateError(f, i, param), false;
  return true;
}

// A device or dtype argument that is none: a string or number typed in is shown ("got
// 'cpux' (str)"), since its value is what was wrong; other objects by their type, as usual.
static PyObject* ArgErrorShowingValue(FunctionObject* f, int i, const Param* param, const char* expected,
                                      PyObject* obj) {
  PyErr_Clear();
  if (!PyUnicode_Check(obj) && !PyLong_Check(obj) && !PyFloat_Check(obj)) return ArgError(f, i, param, expected, obj);
  PyObject* shown = PyObject_Repr(obj);
  if (!shown) return nullptr;
  PyErr_Format(PyExc_TypeError, "%U() %s: expected %s, got %U (%s)", f->name, ArgLabel(i, param, -1).c_str(), expected,
               shown, Py_TYPE(obj)->tp_name);
  Py_DECREF(shown);
  return nullptr;
}

bool ConvertDevice(FunctionObject* f, CallFrame& frame, int i, PyObject* obj, const Param* param) {
  TPAny& out = frame.packed[i];
  out.type_index = kTPDevice;
  if (int rc = ToDevice(obj, &out.v_device); rc != 0) {
    if (rc == -1) return AnnotateError(f, i, param), false;
    return ArgErrorShowingValue(f, i, param, "a device such as 'cpu', 'cuda:0' or (device_type, device_id)", obj), false;
  }
  return true;
}

bool ConvertDType(FunctionObject* f, CallFrame& frame, int i, PyObject* obj, const Param* param) {
  TPAny& out = frame.packed[i];
  out.type_index = kTPDataType;
  if (ToDType(obj, &out.v_dtype) != 0) return ArgErrorShowingValue(f, i, param, kDTypeExpected, obj), false;
  return true;
}

namespace {

// A Python callable other than a tensorplug.Function: a function made for the call.
bool ConvertCallable(FunctionObject* f, CallFrame& frame, int i, PyObject* obj, const Param*) {
  TPFunctionHandle handle = nullptr;
  if (MakePythonFunction(obj, &handle, reinterpret_cast<PyObject*>(f), i) != 0) return RaiseFromTPError(), false;
  frame.funcs[frame.num_funcs++] = handle;
  frame.packed[i].type_index = kTPFunction;
  frame.packed[i].v_func = handle;
  return true;
}

}  // namespace

bool ConvertFunc(FunctionObject* f, CallFrame& frame, int i, PyObject* obj, const Param* param) {
  if (Py_TYPE(obj) == FunctionType) {  // tensorplug functions pass their handle, lent for the call
    frame.packed[i].type_index = kTPFunction;
    frame.packed[i].v_func = reinterpret_cast<FunctionObject*>(obj)->handle;
    return true;
  }
  if (PyCallable_Check(obj)) return ConvertCallable(f, frame, i, obj, param);
  return ArgError(f, i, param, "a callable", obj), false;
}

// ------------------------------------------------------------------ handles ----

namespace {

// The reference of an open tensorplug.Handle, retained for the call (released by the frame):
// nullptr with ValueError set for a closed one.
TPHandleRef HandleForCall(FunctionObject* f, CallFrame& frame, int i, PyObject* obj, const Param* param) {
  TPHandleRef ref = HandleRefOf(obj);
  if (!ref) {
    PyErr_Format(PyExc_ValueError, "%U() %s: the handle was closed", f->name, ArgLabel(i, param, -1).c_str());
    return nullptr;
  }
  TPHandleRetain(ref);
  frame.handles[frame.num_handles++] = ref;
  return ref;
}

}  // namespace

// A handle: "handle" (a void* parameter) takes any handle and gets its pointer
// (kTPOpaquePtr); "handle<T>" takes a handle of type name T only, lent as a kTPHandle.
bool ConvertHandle(FunctionObject* f, CallFrame& frame, int i, PyObject* obj, const Param* param) {
  const std::string& want = param->handle_type;
  if (Py_TYPE(obj) != HandleType) {
    return ArgError(f, i, param, want.empty() ? "a tensorplug.Handle" : ("a handle of type " + want).c_str(), obj), false;
  }
  TPHandleRef ref = HandleForCall(f, frame, i, obj, param);
  if (!ref) return false;
  TPAny& out = frame.packed[i];
  if (want.empty()) {
    out.type_index = kTPOpaquePtr;
    out.v_ptr = TPHandleGetPointer(ref);
    return true;
  }
  const char* type = TPHandleGetTypeName(ref);
  if (!type || want != type) {
    PyErr_Format(PyExc_TypeError, "%U() %s: expected a handle of type %s, got %s%s", f->name,
                 ArgLabel(i, param, -1).c_str(), want.c_str(), type ? "a handle of type " : "an untyped handle",
                 type ? type : "");
    return false;
  }
  out.type_index = kTPHandle;
  out.v_handle = ref;
  return true;
}

// ------------------------------------------------------------------ any ----

bool ConvertAny(FunctionObject* f, CallFrame& frame, int i, PyObject* obj, const Param* param) {
  if (obj == Py_None) return ConvertNone(frame.packed[i]);
  PyTypeObject* type = Py_TYPE(obj);
  if (type == &PyBool_Type) return ConvertBool(f, frame, i, obj, param);
  if (type == &PyLong_Type) return ConvertInt(f, frame, i, obj, param);
  if (type == &PyFloat_Type) return ConvertFloat(f, frame, i, obj, param);
  if (type == &PyUnicode_Type) return ConvertStr(f, frame, i, obj, param);
  if (g_device_class && PyObject_TypeCheck(obj, reinterpret_cast<PyTypeObject*>(g_device_class))) {
    frame.packed[i].type_index = kTPDevice;
    if (ToDevice(obj, &frame.packed[i].v_device) != 0) {
      if (!PyErr_Occurred()) PyErr_Format(PyExc_ValueError, "%R is not a device tensorplug knows", obj);
      return AnnotateError(f, i, param), false;
    }
    return true;
  }
  if (type == FunctionType) return ConvertFunc(f, frame, i, obj, param);
  if (type == HandleType) {  // the handle itself, typed or not: the callee reads its kind
    TPHandleRef ref = HandleForCall(f, frame, i, obj, param);
    if (!ref) return false;
    frame.packed[i].type_index = kTPHandle;
    frame.packed[i].v_handle = ref;
    return true;
  }
  if (AdapterTable* table = LookupAdapter(type)) return ConvertTensorWith(table, false, f, frame, i, obj, param);
  if (PyErr_Occurred()) return AnnotateError(f, i, param), false;
  if (PyCallable_Check(obj)) return ConvertCallable(f, frame, i, obj, param);
  // Other numbers (frameworks' scalars): a bool, an int or a float, as their typed parameters take them.
  if (PyFloat_Check(obj)) return ConvertFloat(f, frame, i, obj, param);
  if (PyLong_Check(obj)) return ConvertInt(f, frame, i, obj, param);
  if (IsDeclaredBool(obj)) return ConvertBool(f, frame, i, obj, param);
  for (ScalarKind kind : {ScalarKind::kInt, ScalarKind::kFloat}) {
    PyObject* abc = NumbersAbc(kind);
    int is_number = abc ? PyObject_IsInstance(obj, abc) : -1;
    if (is_number < 0) return AnnotateError(f, i, param), false;
    if (is_number) return ConvertNumberSlow(f, frame, i, obj, param, kind);
  }
  return ArgError(f, i, param, "a tensor, scalar, str, device, dtype, handle, None or callable", obj), false;
}

namespace {

// An optional parameter ("?kind"): None, or what the kind's converter accepts.
template <ArgConverter kConvert>
bool ConvertOptional(FunctionObject* f, CallFrame& frame, int i, PyObject* obj, const Param* param) {
  if (obj == Py_None) return ConvertNone(frame.packed[i]);
  return kConvert(f, frame, i, obj, param);
}

// The converter table, indexed by Kind: one row per entry of TP_PARAM_KINDS.
struct KindConverters {
  ArgConverter required, optional;
};
constexpr KindConverters kConverters[] = {
#define TP_X(id, name) {Convert##id, ConvertOptional<Convert##id>},
    TP_PARAM_KINDS(TP_X)
#undef TP_X
};

}  // namespace

ArgConverter ConverterFor(Kind kind, bool optional) {
  const KindConverters& c = kConverters[static_cast<int>(kind)];
  return optional ? c.optional : c.required;
}

}  // namespace tensorplug::py
