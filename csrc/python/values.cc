// Result values: TPAny -> Python objects, and Python callbacks' results -> TPAny.
#include "call_env.h"
#include "function_object.h"
#include "handle_object.h"

namespace tensorplug::py {

PyObject* ValueToPython(TPAny* value, AdapterTable* output, PyObject* function) {
  switch (value->type_index) {
    case kTPNone: Py_RETURN_NONE;
    case kTPInt: return PyLong_FromLongLong(value->v_int64);
    case kTPFloat: return PyFloat_FromDouble(value->v_float64);
    case kTPBool: return PyBool_FromLong(value->v_int64 != 0);
    case kTPDevice: return DeviceToPython(value->v_device);
    case kTPDataType: return DTypeToPython(value->v_dtype);
    case kTPOpaquePtr:  // a bare pointer: a non-owning handle (NULL: None)
      if (!value->v_ptr) Py_RETURN_NONE;
      return HandleFromPointer(value->v_ptr);
    case kTPHandle: {
      TPHandleRef ref = value->v_handle;
      value->type_index = kTPNone;  // the reference moves to the Python object
      if (!ref) Py_RETURN_NONE;
      return HandleFromRef(ref);
    }
    case kTPRawStr: return PyUnicode_FromString(value->v_c_str);
    case kTPStr: {
      PyObject* s = PyUnicode_FromStringAndSize(value->v_str->data, Py_ssize_t(value->v_str->size));
      TPAnyRelease(value);
      return s;
    }
    case kTPTensor: {
      DLManagedTensorVersioned* managed = value->v_tensor;
      value->type_index = kTPNone;
      if (!managed) return PyErr_Format(PyExc_RuntimeError, "a kernel returned a NULL tensor");
      // Nothing past the version may be read from a tensor of another major version (its
      // layout may differ), except the deleter DLPack keeps in place for this case.
      if (managed->version.major != DLPACK_MAJOR_VERSION) {
        const unsigned major = managed->version.major, minor = managed->version.minor;
        if (managed->deleter) managed->deleter(managed);
        if (function) {
          return PyErr_Format(PyExc_ValueError,
                              "%U() returned a tensor of DLPack version %u.%u; tensorplug supports DLPack %d.x",
                              function, major, minor, DLPACK_MAJOR_VERSION);
        }
        return PyErr_Format(PyExc_ValueError, "a kernel handed over a tensor of DLPack version %u.%u; "
                            "tensorplug supports DLPack %d.x", major, minor, DLPACK_MAJOR_VERSION);
      }
      if (!CheckTensorLayout(managed->dl_tensor, "the returned tensor", PyExc_ValueError)) {
        if (managed->deleter) managed->deleter(managed);
        return nullptr;
      }
      // DLPack lets compact tensors leave strides NULL; every consumer below reads them.
      if (managed->dl_tensor.ndim > 0 && !managed->dl_tensor.strides) {
        managed = WithExplicitStrides(managed);
        if (!managed) return nullptr;
      }
      if (!output) return TensorFromManaged(managed);
      if (!output->negative_strides) {
        const DLTensor& t = managed->dl_tensor;
        for (int32_t i = 0; i < t.ndim; ++i) {
          if (t.strides[i] < 0) {
            const long long stride = static_cast<long long>(t.strides[i]);  // read before the deleter frees it
            if (managed->deleter) managed->deleter(managed);
            return PyErr_Format(PyExc_ValueError,
                                "%U cannot import a tensor with negative strides (stride %lld of dim %d); "
                                "return a contiguous tensor or use output_framework() with another framework",
                                output->name, stride, int(i));
          }
        }
      }
      PythonTableScope scope(output);
      void* obj = nullptr;
      if (output->api->managed_tensor_to_py_object_no_sync(managed, &obj) != 0) return nullptr;
      return static_cast<PyObject*>(obj);
    }
    case kTPTuple: {
      TPTuple* t = value->v_tuple;
      PyObject* tuple = PyTuple_New(t->size);
      for (int32_t i = 0; i < t->size; ++i) {
        PyObject* item = tuple ? ValueToPython(&t->items[i], output, function) : nullptr;
        if (!item) {
          Py_CLEAR(tuple);
          continue;  // keep releasing the remaining items
        }
        PyTuple_SET_ITEM(tuple, i, item);
      }
      TPAnyRelease(value);
      return tuple;
    }
    case kTPFunction: {
      PyObject* name = PyUnicode_FromString("<function>");
      PyObject* f = name ? FunctionFromHandle(value->v_func, name, true) : nullptr;
      Py_XDECREF(name);
      TPAnyRelease(value);
      return f;
    }
    case kTPDLTensorPtr: {
      TPAnyRelease(value);
      return PyErr_Format(PyExc_TypeError, "a function may not return a borrowed tensor view");
    }
    default: {
      int kind = value->type_index;
      TPAnyRelease(value);
      return PyErr_Format(PyExc_TypeError, "unknown result type index %d", kind);
    }
  }
}

int PythonToValue(PyObject* obj, TPAny* out) {
  out->flags = 0;
  out->v_int64 = 0;
  if (obj == Py_None) {
    out->type_index = kTPNone;
  } else if (PyBool_Check(obj)) {
    out->type_index = kTPBool;
    out->v_int64 = obj == Py_True;
  } else if (PyLong_Check(obj)) {
    out->type_index = kTPInt;
    out->v_int64 = PyLong_AsLongLong(obj);
    if (out->v_int64 == -1 && PyErr_Occurred()) {
      if (!PyErr_ExceptionMatches(PyExc_OverflowError)) return -1;
      PyErr_Clear();
      PyObject* digits = PyObject_Repr(obj);  // fails past sys.get_int_max_str_digits()
      if (!digits) {
        PyErr_Clear();
        digits = PyUnicode_FromString("an int too long to print");
      }
      if (digits) {
        PyErr_Format(PyExc_OverflowError, "a Python callback returned %U, which does not fit int64", digits);
        Py_DECREF(digits);
      }
      return -1;
    }
  } else if (PyFloat_Check(obj)) {
    out->type_index = kTPFloat;
    out->v_float64 = PyFloat_AsDouble(obj);
  } else if (PyUnicode_Check(obj)) {
    Py_ssize_t size = 0;
    const char* data = PyUnicode_AsUTF8AndSize(obj, &size);
    if (!data) return -1;
    out->type_index = kTPStr;
    out->v_str = TPStringCreate(data, size_t(size));
    if (!out->v_str) return PyErr_NoMemory(), -1;
  } else if (PyTuple_Check(obj)) {
    Py_ssize_t n = PyTuple_GET_SIZE(obj);
    if (n > INT32_MAX) {
      PyErr_Format(PyExc_OverflowError, "a Python callback returned a tuple of %zd items; at most %d fit", n,
                   int(INT32_MAX));
      return -1;
    }
    TPTuple* t = TPTupleCreate(int32_t(n));
    if (!t) return PyErr_NoMemory(), -1;
    out->type_index = kTPTuple;
    out->v_tuple = t;
    for (Py_ssize_t i = 0; i < n; ++i) {
      if (PythonToValue(PyTuple_GET_ITEM(obj, i), &t->items[i]) != 0) {
        TPAnyRelease(out);
        return -1;
      }
    }
  } else if (Py_TYPE(obj) == HandleType) {
    TPHandleRef ref = HandleRefOf(obj);
    if (!ref) {
      PyErr_SetString(PyExc_ValueError, "a Python callback returned a closed tensorplug.Handle");
      return -1;
    }
    TPHandleRetain(ref);
    out->type_index = kTPHandle;
    out->v_handle = ref;
  } else if (Py_TYPE(obj) == FunctionType) {
    out->type_index = kTPFunction;
    out->v_func = reinterpret_cast<FunctionObject*>(obj)->handle;
    TPFunctionRetain(out->v_func);
  } else if (AdapterTable* table = LookupAdapter(Py_TYPE(obj))) {
    if (!HoldsItsValues(table, obj)) {
      PyObject* label = PyUnicode_FromString("a Python callback returned a tensor its kernel cannot read");
      PrefixError(label);
      Py_XDECREF(label);
      return -1;
    }
    PythonTableScope scope(table);
    DLManagedTensorVersioned* managed = nullptr;
    if (table->api->managed_tensor_from_py_object_no_sync(obj, &managed) != 0) return -1;
    if (!CheckTensorLayout(managed->dl_tensor, "a tensor returned by a Python callback", PyExc_BufferError)) {
      if (managed->deleter) managed->deleter(managed);
      return -1;
    }
    out->type_index = kTPTensor;
    out->v_tensor = managed;
  } else {
    if (PyErr_Occurred()) return -1;
    if (PyCallable_Check(obj)) {
      TPFunctionHandle handle = nullptr;
      if (MakePythonFunction(obj, &handle) != 0) return -1;
      out->type_index = kTPFunction;
      out->v_func = handle;
      return 0;
    }
    PyErr_Format(PyExc_TypeError, "a Python callback returned %s, which has no tensorplug value kind",
                 Py_TYPE(obj)->tp_name);
    return -1;
  }
  return 0;
}
}  // namespace tensorplug::py
