// Argument conversion of numbers: int, float and bool parameters (Python's own numbers on
// the fast paths; frameworks' scalars, numbers.Integral/Real and 0-d CPU arrays by the rule of
// docs/calling.md, "Numbers"), and int arrays ("ints").
#include <cstring>
#include <string>
#include <unordered_map>

#include "call_env.h"
#include "converters.h"
#include "tensorplug/dtype.h"

namespace tensorplug::py {

// Python's own int/float/bool take the fast paths; everything else a scalar parameter
// accepts is decided in the slow paths below.

// Python's own int/float/bool take the fast paths; everything else a scalar parameter
// accepts (frameworks' scalars, numbers.Integral/Real, 0-d CPU arrays) is decided in the slow
// paths below, by the rule of docs/calling.md ("Numbers").

namespace {

const char* Expected(ScalarKind kind) {
  return kind == ScalarKind::kInt ? "an int" : kind == ScalarKind::kFloat ? "a float" : "a bool";
}

}  // namespace

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

namespace {
PyObject* g_scalar_resolver = nullptr;  // callable(type) -> "bool" or None (tensorplug_scalar_kind)
}  // namespace

void SetScalarResolver(PyObject* resolver) {
  Py_XINCREF(resolver);
  Py_XSETREF(g_scalar_resolver, resolver);
}

bool IsDeclaredBool(PyObject* obj) {
  PyTypeObject* type = Py_TYPE(obj);
  if (type == &PyLong_Type || type == &PyFloat_Type || g_scalar_resolver == nullptr) return false;
  // The answer per type, kept with a reference to the type (its address is never reused).
  static auto* answers = new std::unordered_map<PyTypeObject*, bool>();
  if (auto it = answers->find(type); it != answers->end()) return it->second;
  PyObject* kind = PyObject_CallOneArg(g_scalar_resolver, reinterpret_cast<PyObject*>(type));
  if (kind == nullptr) {
    PyErr_Clear();  // a failing adapter: the value is not a declared bool (its own error shows no better)
    return false;
  }
  const bool is_bool = PyUnicode_Check(kind) && PyUnicode_CompareWithASCIIString(kind, "bool") == 0;
  Py_DECREF(kind);
  Py_INCREF(type);
  answers->emplace(type, is_bool);
  return is_bool;
}

namespace {

union ScalarValue {
  int64_t i;
  double f;
};

// The value of a 0-d CPU tensor whose dtype suits `kind` (docs/calling.md, "Numbers").
bool ReadZeroDim(AdapterTable* table, FunctionObject* f, int i, PyObject* obj, const Param* param, ScalarKind kind,
                 ScalarValue* out) {
  if (!HoldsItsValues(table, obj)) return AnnotateError(f, i, param), false;
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

}  // namespace

[[gnu::noinline]] bool ConvertNumberSlow(FunctionObject* f, CallFrame& frame, int i, PyObject* obj,
                                          const Param* param, ScalarKind kind) {
  TPAny& out = frame.packed[i];
  const bool is_bool = Py_TYPE(obj) == &PyBool_Type || IsDeclaredBool(obj);
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

// ---------------------------------------------------------------- int arrays ----

namespace {

// One item of an int array: a Python int, or a numbers.Integral (a framework's integer scalar); not a bool.
bool ItemToInt64(FunctionObject* f, int i, const Param* param, int item, PyObject* e, int64_t* out) {
  PyObject* index = nullptr;
  if (PyLong_Check(e) && Py_TYPE(e) != &PyBool_Type) {
    *out = PyLong_AsLongLong(e);
  } else {
    if (Py_TYPE(e) == &PyBool_Type || IsDeclaredBool(e)) return ArgError(f, i, param, "an int", e, item), false;
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

}  // namespace

// An int64 array ("ints"): a list or tuple of ints (a framework's size type may be a tuple), or a 1-d integer
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
    // Items are read by index each time: a scalar's __index__ cannot shrink a tuple, and
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
    if (!HoldsItsValues(table, obj)) return AnnotateError(f, i, param), false;
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

}  // namespace tensorplug::py
