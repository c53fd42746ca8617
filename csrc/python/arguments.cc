// Argument conversion: Python objects -> TPAny, per the parameter's kind.
#include <cstring>
#include <string>

#include "arguments.h"
#include "call_env.h"
#include "handle_object.h"
#include "tensorplug/dtype.h"

namespace tensorplug::py {

namespace {

// "argument 2 'y'" or "argument 1 'xs' item 3" (items of lists counted from 0, like Python's own messages).
std::string ArgLabel(int index, const Param* param, int item) {
  std::string label = "argument " + std::to_string(index + 1);
  if (param) label += " '" + param->name + "'";
  if (item >= 0) label += " item " + std::to_string(item);
  return label;
}

}  // namespace

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

// ------------------------------------------------------------------ numbers ----
// Python's own int/float/bool take the fast paths; everything else a scalar parameter
// accepts (numpy scalars, numbers.Integral/Real, 0-d CPU arrays) is decided in the slow
// paths below, by the rule of docs/calling.md ("Numbers").

enum class ScalarKind { kInt, kFloat, kBool };

const char* Expected(ScalarKind kind) {
  return kind == ScalarKind::kInt ? "an int" : kind == ScalarKind::kFloat ? "a float" : "a bool";
}

// numbers.Integral / numbers.Real (stdlib; imported on the first non-builtin number).
PyObject* NumbersAbc(ScalarKind kind) {
  static PyObject* integral = nullptr;
  static PyObject* real = nullptr;
  if (!integral) {
    PyObject* numbers = PyImport_ImportModule("numbers");
    if (!numbers) return nullptr;
    integral = PyObject_GetAttrString(numbers, "Integral");
    real = integral ? PyObject_GetAttrString(numbers, "Real") : nullptr;
    Py_DECREF(numbers);
    if (!real) {
      Py_CLEAR(integral);
      return nullptr;
    }
  }
  return kind == ScalarKind::kInt ? integral : real;
}

// numpy.bool_, found only when numpy is already imported (a numpy bool implies it is).
bool IsNumpyBool(PyObject* obj) {
  static PyTypeObject* numpy_bool = nullptr;
  if (!numpy_bool) {
    if (std::strncmp(Py_TYPE(obj)->tp_name, "numpy.", 6) != 0) return false;
    static PyObject* const name = PyUnicode_InternFromString("numpy");
    PyObject* numpy = PyImport_GetModule(name);
    if (!numpy) return PyErr_Clear(), false;
    PyObject* type = PyObject_GetAttrString(numpy, "bool_");
    Py_DECREF(numpy);
    if (!type || !PyType_Check(type)) return Py_XDECREF(type), PyErr_Clear(), false;
    numpy_bool = reinterpret_cast<PyTypeObject*>(type);  // kept for the process
  }
  return Py_TYPE(obj) == numpy_bool;
}

union ScalarValue {
  int64_t i;
  double f;
};

// The value of a 0-d CPU tensor whose dtype suits `kind` (docs/calling.md, "Numbers").
bool ReadZeroDim(AdapterTable* table, FunctionObject* f, int i, PyObject* obj, const Param* param, ScalarKind kind,
                 ScalarValue* out) {
  const DLPackExchangeAPI* api = table->api;
  PythonTableScope scope(table);
  DLTensor local;
  DLTensor* view = &local;
  DLManagedTensorVersioned* managed = nullptr;
  if (api->dltensor_from_py_object_no_sync) {
    if (api->dltensor_from_py_object_no_sync(obj, &local) != 0) return AnnotateError(f, i, param), false;
  } else {
    if (api->managed_tensor_from_py_object_no_sync(obj, &managed) != 0) return AnnotateError(f, i, param), false;
    view = &managed->dl_tensor;
  }
  std::string problem;
  const DLDataType dt = view->dtype;
  const bool is_int = (dt.code == kDLInt || dt.code == kDLUInt) && dt.lanes == 1 &&
                      (dt.bits == 8 || dt.bits == 16 || dt.bits == 32 || dt.bits == 64);
  const bool is_float = (dt.code == kDLFloat && (dt.bits == 16 || dt.bits == 32 || dt.bits == 64) && dt.lanes == 1) ||
                        (dt.code == kDLBfloat && dt.bits == 16 && dt.lanes == 1);
  const bool is_bool = dt.code == kDLBool && dt.bits == 8 && dt.lanes == 1;
  const bool suits = kind == ScalarKind::kInt ? is_int : kind == ScalarKind::kFloat ? (is_int || is_float) : is_bool;
  if (view->ndim != 0) {
    problem = "a " + std::to_string(view->ndim) + "-d array (only 0-d arrays are read as scalars)";
  } else if (!suits) {
    problem = "a 0-d array of dtype " + DataTypeToString(dt);
  } else if (view->device.device_type != kDLCPU && view->device.device_type != kDLCUDAHost &&
             view->device.device_type != kDLROCMHost) {
    problem = "a 0-d array on " + DeviceToString(view->device) + " (only CPU arrays are read as scalars)";
  }
  bool ok = problem.empty();
  if (ok) {
    const char* p = static_cast<const char*>(view->data) + view->byte_offset;
    int64_t iv = 0;
    double fv = 0;
    bool overflow = false;
    switch (dt.code) {
      case kDLInt:
        iv = dt.bits == 8 ? *reinterpret_cast<const int8_t*>(p) : dt.bits == 16 ? *reinterpret_cast<const int16_t*>(p)
             : dt.bits == 32 ? *reinterpret_cast<const int32_t*>(p) : *reinterpret_cast<const int64_t*>(p);
        fv = double(iv);
        break;
      case kDLUInt: {
        uint64_t u = dt.bits == 8 ? *reinterpret_cast<const uint8_t*>(p) : dt.bits == 16
                     ? *reinterpret_cast<const uint16_t*>(p) : dt.bits == 32
                     ? *reinterpret_cast<const uint32_t*>(p) : *reinterpret_cast<const uint64_t*>(p);
        overflow = u > uint64_t(INT64_MAX);
        iv = int64_t(u);
        fv = double(u);
        break;
      }
      case kDLFloat:
        fv = dt.bits == 16 ? float(Half::FromBits(*reinterpret_cast<const uint16_t*>(p)))
             : dt.bits == 32 ? *reinterpret_cast<const float*>(p) : *reinterpret_cast<const double*>(p);
        break;
      case kDLBfloat:
        fv = float(BFloat16::FromBits(*reinterpret_cast<const uint16_t*>(p)));
        break;
      default:  // bool
        iv = *reinterpret_cast<const uint8_t*>(p) != 0;
        break;
    }
    if (kind == ScalarKind::kFloat) {
      out->f = fv;
    } else if (overflow) {
      PyErr_SetString(PyExc_OverflowError, "value does not fit in int64");
      AnnotateError(f, i, param);
      ok = false;
    } else {
      out->i = iv;
    }
  }
  if (managed && managed->deleter) managed->deleter(managed);
  if (!problem.empty()) {
    if (param) {
      PyErr_Format(PyExc_TypeError, "%U() argument %d '%s': expected %s, got %s", f->name, i + 1,
                   param->name.c_str(), Expected(kind), problem.c_str());
    } else {
      PyErr_Format(PyExc_TypeError, "%U() argument %d: expected %s, got %s", f->name, i + 1, Expected(kind),
                   problem.c_str());
    }
  }
  return ok;
}

// What a scalar parameter accepts beyond Python's own numbers.
[[gnu::noinline]] bool ConvertNumberSlow(FunctionObject* f, CallFrame& frame, int i, PyObject* obj,
                                          const Param* param, ScalarKind kind) {
  TPAny& out = frame.packed[i];
  const bool is_bool = Py_TYPE(obj) == &PyBool_Type || IsNumpyBool(obj);
  if (kind == ScalarKind::kBool) {
    if (is_bool) {
      out.type_index = kTPBool;
      out.v_int64 = PyObject_IsTrue(obj) == 1;
      return true;
    }
  } else if (is_bool) {  // a bool is not a number here, whatever Python says
    return ArgError(f, i, param, Expected(kind), obj), false;
  }
  if (AdapterTable* table = LookupAdapter(Py_TYPE(obj))) {
    ScalarValue value;
    if (!ReadZeroDim(table, f, i, obj, param, kind, &value)) return false;
    out.type_index = kind == ScalarKind::kInt ? kTPInt : kind == ScalarKind::kFloat ? kTPFloat : kTPBool;
    if (kind == ScalarKind::kFloat) {
      out.v_float64 = value.f;
    } else {
      out.v_int64 = value.i;
    }
    return true;
  }
  if (PyErr_Occurred()) return AnnotateError(f, i, param), false;
  if (kind != ScalarKind::kBool) {
    PyObject* abc = NumbersAbc(kind);
    int is_number = abc ? PyObject_IsInstance(obj, abc) : -1;
    if (is_number < 0) return AnnotateError(f, i, param), false;
    if (is_number) {
      if (kind == ScalarKind::kInt) {
        PyObject* index = PyNumber_Index(obj);
        if (!index) return AnnotateError(f, i, param), false;
        out.type_index = kTPInt;
        out.v_int64 = PyLong_AsLongLong(index);
        Py_DECREF(index);
        if (out.v_int64 == -1 && PyErr_Occurred()) return AnnotateError(f, i, param), false;
      } else {
        out.type_index = kTPFloat;
        out.v_float64 = PyFloat_AsDouble(obj);
        if (out.v_float64 == -1.0 && PyErr_Occurred()) return AnnotateError(f, i, param), false;
      }
      return true;
    }
  }
  return ArgError(f, i, param, Expected(kind), obj), false;
}

bool ConvertInt(FunctionObject* f, CallFrame& frame, int i, PyObject* obj, const Param* param) {
  TPAny& out = frame.packed[i];
  if (Py_TYPE(obj) == &PyBool_Type || !PyLong_Check(obj)) return ConvertNumberSlow(f, frame, i, obj, param, ScalarKind::kInt);
  out.type_index = kTPInt;
  out.v_int64 = PyLong_AsLongLong(obj);
  if (out.v_int64 == -1 && PyErr_Occurred()) return AnnotateError(f, i, param), false;
  return true;
}

bool ConvertFloat(FunctionObject* f, CallFrame& frame, int i, PyObject* obj, const Param* param) {
  TPAny& out = frame.packed[i];
  if (!PyFloat_Check(obj) && !(PyLong_Check(obj) && Py_TYPE(obj) != &PyBool_Type)) {
    return ConvertNumberSlow(f, frame, i, obj, param, ScalarKind::kFloat);
  }
  out.type_index = kTPFloat;
  out.v_float64 = PyFloat_AsDouble(obj);
  if (out.v_float64 == -1.0 && PyErr_Occurred()) return AnnotateError(f, i, param), false;
  return true;
}

bool ConvertBool(FunctionObject* f, CallFrame& frame, int i, PyObject* obj, const Param* param) {
  TPAny& out = frame.packed[i];
  if (Py_TYPE(obj) != &PyBool_Type) return ConvertNumberSlow(f, frame, i, obj, param, ScalarKind::kBool);
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

// "axpy() argument 3 'out': expected a writable tensor (the kernel writes it), got a
// read-only numpy array" (the adapter's name, when the table has one).
bool RefuseReadOnly(FunctionObject* f, int i, const Param* param, int item, const AdapterTable* table) {
  const std::string label = ArgLabel(i, param, item);
  if (table && table->name) {
    PyErr_Format(PyExc_ValueError, "%U() %s: expected a writable tensor (the kernel writes it), got a read-only %U array",
                 f->name, label.c_str(), table->name);
  } else {
    PyErr_Format(PyExc_ValueError, "%U() %s: expected a writable tensor (the kernel writes it), got a read-only tensor",
                 f->name, label.c_str());
  }
  return false;
}

// A tensor the kernel writes ("mview"): a view, refused before the call when the caller
// lent it read-only (a jax array, a numpy array without WRITEABLE). The frame releases the
// export on failure.
bool ConvertMView(FunctionObject* f, CallFrame& frame, int i, PyObject* obj, const Param* param) {
  AdapterTable* table = LookupAdapter(Py_TYPE(obj));
  if (!table) {
    if (PyErr_Occurred()) return AnnotateError(f, i, param), false;
    return ArgError(f, i, param, "a tensor", obj), false;
  }
  if (!ConvertTensorWith(table, false, f, frame, i, obj, param)) return false;
  if (frame.packed[i].flags & TP_ANY_FLAG_READ_ONLY) return RefuseReadOnly(f, i, param, -1, table);
  return true;
}

// A list or tuple of tensors ("views"): each item exported as a view into the call's
// scratch arena (no allocation per item), passed as one kTPArray.
bool ConvertViews(FunctionObject* f, CallFrame& frame, int i, PyObject* obj, const Param* param) {
  if (!PyList_Check(obj) && !PyTuple_Check(obj)) return ArgError(f, i, param, "a list of tensors", obj), false;
  PyObject* seq = obj;
  if (PyList_Check(obj)) {  // a snapshot: code run during the call may change the list
    seq = PyList_AsTuple(obj);
    if (!seq) return AnnotateError(f, i, param), false;
    frame.kept[frame.num_kept++] = seq;
  }
  const Py_ssize_t n = PyTuple_GET_SIZE(seq);
  if (n > kMaxListItems) {
    PyErr_Format(PyExc_ValueError, "a list of %zd tensors is longer than the limit of %d", n, kMaxListItems);
    return AnnotateError(f, i, param), false;
  }
  constexpr int32_t kAnyWords = sizeof(TPAny) / sizeof(int64_t), kViewWords = sizeof(DLTensor) / sizeof(int64_t);
  static_assert(sizeof(TPArray) == 2 * sizeof(int64_t) && sizeof(TPAny) % 8 == 0 && sizeof(DLTensor) % 8 == 0);
  int64_t* head = ScratchAlloc(int32_t(2 + kAnyWords * n));
  int64_t* view_words = n ? ScratchAlloc(int32_t(kViewWords * n)) : head;
  if (!head || !view_words) return PyErr_NoMemory(), AnnotateError(f, i, param), false;
  auto* array = reinterpret_cast<TPArray*>(head);
  auto* items = reinterpret_cast<TPAny*>(head + 2);
  auto* views = reinterpret_cast<DLTensor*>(view_words);
  for (Py_ssize_t k = 0; k < n; ++k) {
    const int item = int(k);
    PyObject* e = PyTuple_GET_ITEM(seq, k);
    items[k].type_index = kTPNone;
    items[k].flags = 0;
    AdapterTable* table = LookupAdapter(Py_TYPE(e));
    if (!table) {
      if (PyErr_Occurred()) return AnnotateError(f, i, param, item), false;
      return ArgError(f, i, param, "a tensor", e, item), false;
    }
    const DLPackExchangeAPI* api = table->api;
    PythonTableScope scope(table);
    DLTensor* view = &views[k];
    bool read_only;
    if (api->dltensor_from_py_object_no_sync) {
      if (api->dltensor_from_py_object_no_sync(e, view) != 0) return AnnotateError(f, i, param, item), false;
      read_only = table->read_only == ReadOnlyPolicy::kAlways ||
                  (table->read_only == ReadOnlyPolicy::kProbe && table->is_read_only(e));
    } else {
      DLManagedTensorVersioned* managed = nullptr;
      if (api->managed_tensor_from_py_object_no_sync(e, &managed) != 0) return AnnotateError(f, i, param, item), false;
      if (!frame.item_owned) frame.item_owned = new std::vector<DLManagedTensorVersioned*>;
      frame.item_owned->push_back(managed);
      read_only = (managed->flags & DLPACK_FLAG_BITMASK_READ_ONLY) || table->read_only == ReadOnlyPolicy::kAlways;
      view = &managed->dl_tensor;
    }
    if (!CheckTensorLayout(*view, "tensor", PyExc_BufferError)) return AnnotateError(f, i, param, item), false;
    if (view->dtype.code == kDLComplex && table->complex_check) {  // as for single tensors
      PyObject* ok = PyObject_CallOneArg(table->complex_check, e);
      if (!ok) return AnnotateError(f, i, param, item), false;
      Py_DECREF(ok);
    }
    items[k].type_index = kTPDLTensorPtr;
    items[k].flags = read_only ? TP_ANY_FLAG_READ_ONLY : 0;
    items[k].v_dltensor = view;
    // The primary rule looks inside lists, in order (the same rule as for single tensors).
    if (frame.primary < 0 || (view->device.device_type != kDLCPU && frame.primary_device.device_type == kDLCPU)) {
      frame.primary = i;
      frame.primary_device = view->device;
      frame.primary_table = table;
    }
  }
  array->size = n;
  array->items = items;
  frame.packed[i].type_index = kTPArray;
  frame.packed[i].v_array = array;
  return true;
}

// A list of tensors the kernel writes ("mviews"): as "views", each read-only item refused.
bool ConvertMViews(FunctionObject* f, CallFrame& frame, int i, PyObject* obj, const Param* param) {
  if (!ConvertViews(f, frame, i, obj, param)) return false;
  const TPArray* array = frame.packed[i].v_array;
  for (int64_t k = 0; k < array->size; ++k) {
    if (array->items[k].flags & TP_ANY_FLAG_READ_ONLY) {
      PyObject* seq = PyList_Check(obj) ? frame.kept[frame.num_kept - 1] : obj;  // the snapshot ConvertViews took
      return RefuseReadOnly(f, i, param, int(k), LookupAdapter(Py_TYPE(PyTuple_GET_ITEM(seq, k))));
    }
  }
  return true;
}

// One item of an int array: a Python int, or a numbers.Integral (numpy integer scalar); not a bool.
bool ItemToInt64(FunctionObject* f, int i, const Param* param, int item, PyObject* e, int64_t* out) {
  PyObject* index = nullptr;
  if (PyLong_Check(e) && Py_TYPE(e) != &PyBool_Type) {
    *out = PyLong_AsLongLong(e);
  } else {
    if (Py_TYPE(e) == &PyBool_Type || IsNumpyBool(e)) return ArgError(f, i, param, "an int", e, item), false;
    PyObject* abc = NumbersAbc(ScalarKind::kInt);
    int is_int = abc ? PyObject_IsInstance(e, abc) : -1;
    if (is_int < 0) return AnnotateError(f, i, param, item), false;
    if (!is_int) return ArgError(f, i, param, "an int", e, item), false;
    index = PyNumber_Index(e);
    if (!index) return AnnotateError(f, i, param, item), false;
    *out = PyLong_AsLongLong(index);
    Py_DECREF(index);
  }
  if (*out == -1 && PyErr_Occurred()) return AnnotateError(f, i, param, item), false;
  return true;
}

// An int64 array ("ints"): a list or tuple of ints (torch.Size is a tuple), or a 1-d integer
// array on the CPU. A contiguous int64 array is passed in place; anything else is copied
// into the call's scratch arena.
bool ConvertInts(FunctionObject* f, CallFrame& frame, int i, PyObject* obj, const Param* param) {
  int64_t* head = ScratchAlloc(2);
  if (!head) return PyErr_NoMemory(), AnnotateError(f, i, param), false;
  auto* array = reinterpret_cast<TPIntArray*>(head);
  if (PyList_Check(obj) || PyTuple_Check(obj)) {
    const Py_ssize_t n = PySequence_Fast_GET_SIZE(obj);
    if (n > kScratchInts) {
      PyErr_Format(PyExc_ValueError, "a list of %zd ints is longer than the limit of %d", n, kScratchInts);
      return AnnotateError(f, i, param), false;
    }
    int64_t* data = n ? ScratchAlloc(int32_t(n)) : head;
    if (!data) return PyErr_NoMemory(), AnnotateError(f, i, param), false;
    // Items are read by index each time: a numpy scalar's __index__ cannot shrink a tuple, and
    // a list is re-checked for its size.
    for (Py_ssize_t k = 0; k < n; ++k) {
      if (k >= PySequence_Fast_GET_SIZE(obj)) {
        PyErr_SetString(PyExc_RuntimeError, "the list changed size during the conversion");
        return AnnotateError(f, i, param), false;
      }
      PyObject* e = PySequence_Fast_GET_ITEM(obj, k);
      Py_INCREF(e);
      bool ok = ItemToInt64(f, i, param, int(k), e, &data[k]);
      Py_DECREF(e);
      if (!ok) return false;
    }
    array->size = n;
    array->data = data;
  } else if (AdapterTable* table = LookupAdapter(Py_TYPE(obj))) {
    const DLPackExchangeAPI* api = table->api;
    PythonTableScope scope(table);
    DLTensor local;
    DLTensor* view = &local;
    if (api->dltensor_from_py_object_no_sync) {
      if (api->dltensor_from_py_object_no_sync(obj, &local) != 0) return AnnotateError(f, i, param), false;
    } else {
      DLManagedTensorVersioned* managed = nullptr;
      if (api->managed_tensor_from_py_object_no_sync(obj, &managed) != 0) return AnnotateError(f, i, param), false;
      if (!frame.item_owned) frame.item_owned = new std::vector<DLManagedTensorVersioned*>;
      frame.item_owned->push_back(managed);
      view = &managed->dl_tensor;
    }
    const DLDataType dt = view->dtype;
    const bool is_int = (dt.code == kDLInt || dt.code == kDLUInt) && dt.lanes == 1 &&
                        (dt.bits == 8 || dt.bits == 16 || dt.bits == 32 || dt.bits == 64);
    std::string problem;
    if (view->ndim != 1) {
      problem = "a " + std::to_string(view->ndim) + "-d array (int arrays are 1-d)";
    } else if (!is_int) {
      problem = "an array of dtype " + DataTypeToString(dt);
    } else if (view->device.device_type != kDLCPU && view->device.device_type != kDLCUDAHost &&
               view->device.device_type != kDLROCMHost) {
      problem = "an array on " + DeviceToString(view->device) + " (int arrays are read on the CPU)";
    } else if (view->shape[0] > kScratchInts) {
      problem = "an array of " + std::to_string(view->shape[0]) + " ints (the limit is " +
                std::to_string(kScratchInts) + ")";
    }
    if (!problem.empty()) {
      PyErr_Format(PyExc_TypeError, "%U() %s: expected a list of ints, got %s", f->name,
                   ArgLabel(i, param, -1).c_str(), problem.c_str());
      return false;
    }
    const int64_t n = view->shape[0];
    const int64_t stride = view->strides ? view->strides[0] : 1;
    const char* base = static_cast<const char*>(view->data) + view->byte_offset;
    if (dt.code == kDLInt && dt.bits == 64 && (stride == 1 || n <= 1)) {
      array->data = reinterpret_cast<const int64_t*>(base);  // in place: the array outlives the call
    } else {
      int64_t* data = n ? ScratchAlloc(int32_t(n)) : head;
      if (!data) return PyErr_NoMemory(), AnnotateError(f, i, param), false;
      const int64_t step = stride * (dt.bits / 8);
      for (int64_t k = 0; k < n; ++k) {
        const char* p = base + k * step;
        if (dt.code == kDLInt) {
          data[k] = dt.bits == 8 ? *reinterpret_cast<const int8_t*>(p) : dt.bits == 16 ? *reinterpret_cast<const int16_t*>(p)
                    : dt.bits == 32 ? *reinterpret_cast<const int32_t*>(p) : *reinterpret_cast<const int64_t*>(p);
        } else {
          uint64_t u = dt.bits == 8 ? *reinterpret_cast<const uint8_t*>(p) : dt.bits == 16
                       ? *reinterpret_cast<const uint16_t*>(p) : dt.bits == 32
                       ? *reinterpret_cast<const uint32_t*>(p) : *reinterpret_cast<const uint64_t*>(p);
          if (u > uint64_t(INT64_MAX)) {
            PyErr_SetString(PyExc_OverflowError, "value does not fit in int64");
            return AnnotateError(f, i, param, int(k)), false;
          }
          data[k] = int64_t(u);
        }
      }
      array->data = data;
    }
    array->size = n;
  } else {
    if (PyErr_Occurred()) return AnnotateError(f, i, param), false;
    return ArgError(f, i, param, "a list of ints", obj), false;
  }
  frame.packed[i].type_index = kTPIntArray;
  frame.packed[i].v_int_array = array;
  return true;
}

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
  // Other numbers (numpy scalars): a bool, an int or a float, as their typed parameters take them.
  if (PyFloat_Check(obj)) return ConvertFloat(f, frame, i, obj, param);
  if (PyLong_Check(obj)) return ConvertInt(f, frame, i, obj, param);
  if (IsNumpyBool(obj)) return ConvertBool(f, frame, i, obj, param);
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
