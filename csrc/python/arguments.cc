// Argument conversion: Python objects -> TPAny, per the parameter's kind.
#include <cstring>

#include "arguments.h"
#include "call_env.h"

namespace tensorplug::py {

PyObject* ArgError(FunctionObject* f, int index, const Param* param, const char* expected, PyObject* obj) {
  if (param) {
    PyErr_Format(PyExc_TypeError, "%U() argument %d '%s': expected %s, got %s", f->name, index + 1,
                 param->name.c_str(), expected, Py_TYPE(obj)->tp_name);
  } else {
    PyErr_Format(PyExc_TypeError, "%U() argument %d: expected %s, got %s", f->name, index + 1, expected,
                 Py_TYPE(obj)->tp_name);
  }
  return nullptr;
}

PyObject* ArgumentLabel(FunctionObject* f, int index, const Param* param) {
  if (!param && f->sig->known && size_t(index) < f->sig->params.size()) param = &f->sig->params[size_t(index)];
  if (param) return PyUnicode_FromFormat("%U() argument %d '%s'", f->name, index + 1, param->name.c_str());
  return PyUnicode_FromFormat("%U() argument %d", f->name, index + 1);
}

// Prefix a conversion error (already set) with the argument it concerns.
void AnnotateError(FunctionObject* f, int index, const Param* param) {
  PyObject *type, *value, *tb;
  PyErr_Fetch(&type, &value, &tb);  // kept aside while the label is built
  PyObject* label = ArgumentLabel(f, index, param);
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

int ToDevice(PyObject* obj, DLDevice* out) {
  if (PyTuple_Check(obj) && PyTuple_GET_SIZE(obj) == 2) {  // (device_type, device_id)
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
  PyObject* text = PyObject_Str(obj);  // tensorplug.Device, "cuda:0", torch.device, ...
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
    } else if (digits > 0 && colon[1 + digits] == '\0') {  // "<type>:<digits>" whose index does not fit
      PyErr_Format(PyExc_ValueError, "device index %s of '%s' is out of range (at most %d)", colon + 1, s,
                   int(INT32_MAX));
      rc = -1;
    }
  }
  Py_DECREF(text);
  return rc;
}

int ToDType(PyObject* obj, DLDataType* out) {
  PyObject* text = PyObject_Str(obj);  // "float32", numpy.dtype, torch.float32, ...
  if (!text) return -1;
  const char* s = PyUnicode_AsUTF8(text);
  bool ok = s && DTypeFromString(s, out);
  Py_DECREF(text);
  return ok ? 0 : -1;
}

namespace {

// ---------------------------------------------------------------- converters ----
// One per parameter kind; each starts from frame.packed[i] = kTPNone (set by the call
// loop), so a failed conversion leaves nothing for the frame to release.

bool ConvertNone(TPAny& out) {
  out.type_index = kTPNone;
  out.v_int64 = 0;
  return true;
}

bool ConvertInt(FunctionObject* f, CallFrame& frame, int i, PyObject* obj, const Param* param) {
  TPAny& out = frame.packed[i];
  if (Py_TYPE(obj) == &PyBool_Type || !PyLong_Check(obj)) return ArgError(f, i, param, "an int", obj), false;
  out.type_index = kTPInt;
  out.v_int64 = PyLong_AsLongLong(obj);
  if (out.v_int64 == -1 && PyErr_Occurred()) return AnnotateError(f, i, param), false;
  return true;
}

bool ConvertFloat(FunctionObject* f, CallFrame& frame, int i, PyObject* obj, const Param* param) {
  TPAny& out = frame.packed[i];
  if (!PyFloat_Check(obj) && !(PyLong_Check(obj) && Py_TYPE(obj) != &PyBool_Type)) {
    return ArgError(f, i, param, "a float", obj), false;
  }
  out.type_index = kTPFloat;
  out.v_float64 = PyFloat_AsDouble(obj);
  if (out.v_float64 == -1.0 && PyErr_Occurred()) return AnnotateError(f, i, param), false;
  return true;
}

bool ConvertBool(FunctionObject* f, CallFrame& frame, int i, PyObject* obj, const Param* param) {
  TPAny& out = frame.packed[i];
  if (Py_TYPE(obj) != &PyBool_Type) return ArgError(f, i, param, "a bool", obj), false;
  out.type_index = kTPBool;
  out.v_int64 = obj == Py_True;
  return true;
}

bool ConvertStr(FunctionObject* f, CallFrame& frame, int i, PyObject* obj, const Param* param) {
  TPAny& out = frame.packed[i];
  if (!PyUnicode_Check(obj)) return ArgError(f, i, param, "a str", obj), false;
  out.type_index = kTPRawStr;
  out.v_c_str = PyUnicode_AsUTF8(obj);  // owned by obj, which outlives the call
  if (!out.v_c_str) return AnnotateError(f, i, param), false;
  return true;
}

bool ConvertDevice(FunctionObject* f, CallFrame& frame, int i, PyObject* obj, const Param* param) {
  TPAny& out = frame.packed[i];
  out.type_index = kTPDevice;
  if (int rc = ToDevice(obj, &out.v_device); rc != 0) {
    if (rc == -1) return AnnotateError(f, i, param), false;
    PyErr_Clear();
    return ArgError(f, i, param, "a device such as 'cpu', 'cuda:0' or (device_type, device_id)", obj), false;
  }
  return true;
}

bool ConvertDType(FunctionObject* f, CallFrame& frame, int i, PyObject* obj, const Param* param) {
  TPAny& out = frame.packed[i];
  out.type_index = kTPDataType;
  if (ToDType(obj, &out.v_dtype) != 0) {
    PyErr_Clear();
    return ArgError(f, i, param, "a dtype such as 'float32'", obj), false;
  }
  return true;
}

// A Python callable other than a tensorplug.Function: a function made for the call.
bool ConvertCallable(FunctionObject* f, CallFrame& frame, int i, PyObject* obj, const Param*) {
  TPFunctionHandle handle = nullptr;
  if (MakePythonFunction(obj, &handle, reinterpret_cast<PyObject*>(f), i) != 0) return RaiseFromTPError(), false;
  frame.funcs[frame.num_funcs++] = handle;
  frame.packed[i].type_index = kTPFunction;
  frame.packed[i].v_func = handle;
  return true;
}

bool ConvertFunc(FunctionObject* f, CallFrame& frame, int i, PyObject* obj, const Param* param) {
  if (Py_TYPE(obj) == FunctionType) {  // tensorplug functions pass their handle, lent for the call
    frame.packed[i].type_index = kTPFunction;
    frame.packed[i].v_func = reinterpret_cast<FunctionObject*>(obj)->handle;
    return true;
  }
  if (PyCallable_Check(obj)) return ConvertCallable(f, frame, i, obj, param);
  return ArgError(f, i, param, "a callable", obj), false;
}

// A tensor through the adapter of its exact type: a view (kTPDLTensorPtr) unless `owning`.
bool ConvertTensorWith(AdapterTable* table, bool owning, FunctionObject* f, CallFrame& frame, int i, PyObject* obj,
                       const Param* param) {
  TPAny& out = frame.packed[i];
  const DLPackExchangeAPI* api = table->api;
  PythonTableScope scope(table);
  DLTensor* view;
  if (!owning && api->dltensor_from_py_object_no_sync) {
    view = &frame.views[i];
    if (api->dltensor_from_py_object_no_sync(obj, view) != 0) return AnnotateError(f, i, param), false;
    bool read_only = table->read_only == ReadOnlyPolicy::kAlways ||
                     (table->read_only == ReadOnlyPolicy::kProbe && table->is_read_only(obj));
    out.type_index = kTPDLTensorPtr;
    out.flags = read_only ? TP_ANY_FLAG_READ_ONLY : 0;
    out.v_dltensor = view;
  } else {
    DLManagedTensorVersioned* managed = nullptr;
    if (api->managed_tensor_from_py_object_no_sync(obj, &managed) != 0) return AnnotateError(f, i, param), false;
    bool read_only = (managed->flags & DLPACK_FLAG_BITMASK_READ_ONLY) || table->read_only == ReadOnlyPolicy::kAlways;
    view = &managed->dl_tensor;
    if (owning) {
      if (read_only) managed->flags |= DLPACK_FLAG_BITMASK_READ_ONLY;
      out.type_index = kTPTensor;  // moved to the callee
      out.v_tensor = managed;
    } else {
      frame.owned[frame.num_owned++] = managed;
      out.type_index = kTPDLTensorPtr;
      out.flags = read_only ? TP_ANY_FLAG_READ_ONLY : 0;
      out.v_dltensor = view;
    }
  }
  if (!CheckTensorLayout(*view, "tensor", PyExc_BufferError)) {
    return AnnotateError(f, i, param), false;  // the frame releases the export
  }
  if (table->complex_check && view->dtype.code == kDLComplex) {
    PyObject* ok = PyObject_CallOneArg(table->complex_check, obj);
    if (!ok) return AnnotateError(f, i, param), false;  // the frame releases the export
    Py_DECREF(ok);
  }
  // Primary: the first tensor on a non-CPU device, else the first tensor.
  if (frame.primary < 0 || (frame.primary_device.device_type == kDLCPU && view->device.device_type != kDLCPU)) {
    frame.primary = i;
    frame.primary_device = view->device;
    frame.primary_table = table;
  }
  return true;
}

template <bool kOwning>
bool ConvertTensorKind(FunctionObject* f, CallFrame& frame, int i, PyObject* obj, const Param* param) {
  if (AdapterTable* table = LookupAdapter(Py_TYPE(obj))) return ConvertTensorWith(table, kOwning, f, frame, i, obj, param);
  if (PyErr_Occurred()) return AnnotateError(f, i, param), false;
  return ArgError(f, i, param, "a tensor", obj), false;
}

bool ConvertView(FunctionObject* f, CallFrame& frame, int i, PyObject* obj, const Param* param) {
  return ConvertTensorKind<false>(f, frame, i, obj, param);
}

bool ConvertTensor(FunctionObject* f, CallFrame& frame, int i, PyObject* obj, const Param* param) {
  return ConvertTensorKind<true>(f, frame, i, obj, param);
}

}  // namespace

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
  if (AdapterTable* table = LookupAdapter(type)) return ConvertTensorWith(table, false, f, frame, i, obj, param);
  if (PyErr_Occurred()) return AnnotateError(f, i, param), false;
  if (PyCallable_Check(obj)) return ConvertCallable(f, frame, i, obj, param);
  return ArgError(f, i, param, "a tensor, scalar, str, device, dtype, None or callable", obj), false;
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
