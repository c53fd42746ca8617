// Python callables as tensorplug functions (TPFunctionHandle): arguments to Python
// objects, the result back to a TPAny.
#include "arguments.h"
#include "handle_object.h"

namespace tensorplug::py {

namespace {

// What a Python-callable function holds: the callable and, when it was passed as a kernel's
// argument, that kernel and the argument's index (named in errors about its return value).
struct PythonCallback {
  PyObject* callable;
  PyObject* caller;  // a tensorplug.Function, or null
  int index;
};

// A borrowed view becomes a tensorplug.Tensor that does not own the data: valid for the
// duration of the callback only. CallPythonCallable invalidates it when the callback
// returns, so a view the callback kept raises instead of reading freed memory.
PyObject* ArgToPython(const TPAny& arg, bool* lent) {
  *lent = false;
  if (arg.type_index == kTPDLTensorPtr) {
    if (!CheckTensorLayout(*arg.v_dltensor, "a tensor passed to a Python callback", PyExc_BufferError)) return nullptr;
    uint64_t flags = (arg.flags & TP_ANY_FLAG_READ_ONLY) ? DLPACK_FLAG_BITMASK_READ_ONLY : 0;
    DLManagedTensorVersioned* managed = DescribeWithoutOwning(*arg.v_dltensor, flags);
    if (!managed) return PyErr_NoMemory();
    *lent = true;
    return TensorFromManaged(managed);
  }
  if (arg.type_index == kTPFunction) {
    PyObject* name = PyUnicode_FromString("<function>");
    PyObject* f = name ? FunctionFromHandle(arg.v_func, name, true) : nullptr;
    Py_XDECREF(name);
    return f;
  }
  if (arg.type_index == kTPHandle && arg.v_handle) {  // lent: the Python object takes a reference of its own
    TPHandleRetain(arg.v_handle);
    return HandleFromRef(arg.v_handle);
  }
  if (arg.type_index == kTPStr) return PyUnicode_FromStringAndSize(arg.v_str->data, Py_ssize_t(arg.v_str->size));
  if (arg.type_index == kTPTuple) {
    PyErr_SetString(PyExc_TypeError, "tuples cannot be passed as arguments");
    return nullptr;
  }
  TPAny copy = arg;  // scalars; a moved kTPTensor becomes an owning tensorplug.Tensor
  return ValueToPython(&copy, nullptr);
}

int CallPythonCallable(void* self, const TPAny* args, int32_t nargs, TPAny* result) {
  const auto* callback = static_cast<const PythonCallback*>(self);
  if (!PythonUsable()) {
    TPErrorSet("RuntimeError", "a Python callback was called after the interpreter shut down");
    return -1;
  }
  PyGILState_STATE gil = PyGILState_Ensure();
  int rc = -1;
  PyObject* tuple = PyTuple_New(nargs);
  int32_t converted = 0;
  bool any_lent = false;
  for (; tuple && converted < nargs; ++converted) {
    bool lent = false;
    PyObject* item = ArgToPython(args[converted], &lent);
    if (!item) break;
    any_lent |= lent;
    PyTuple_SET_ITEM(tuple, converted, item);
  }
  // Owning tensor arguments are ours even when conversion stopped early.
  for (int32_t i = converted + 1; i < nargs; ++i) {
    if (args[i].type_index == kTPTensor) TPAnyRelease(const_cast<TPAny*>(&args[i]));
  }
  if (tuple && converted == nargs) {
    PyObject* r = PyObject_Call(callback->callable, tuple, nullptr);
    if (r) {
      rc = PythonToValue(r, result);
      Py_DECREF(r);
      // The callback ran; what it returned is wrong: say which kernel argument it was.
      if (rc != 0 && callback->caller) {
        PyObject* label =
            ArgumentLabel(reinterpret_cast<FunctionObject*>(callback->caller), callback->index, nullptr);
        PrefixError(label);
        Py_XDECREF(label);
      }
    }
  }
  if (tuple && any_lent) {
    for (int32_t i = 0; i < converted; ++i) {
      if (args[i].type_index == kTPDLTensorPtr) InvalidateLentTensor(PyTuple_GET_ITEM(tuple, i));
    }
  }
  Py_XDECREF(tuple);
  if (rc != 0) TPErrorFromPython();
  PyGILState_Release(gil);
  return rc;
}

void DeletePythonCallable(void* self) {
  if (!PythonUsable()) return;  // a static Function destroyed after Py_Finalize: leak the callable
  auto* callback = static_cast<PythonCallback*>(self);
  PyGILState_STATE gil = PyGILState_Ensure();
  Py_DECREF(callback->callable);
  Py_XDECREF(callback->caller);
  PyGILState_Release(gil);
  delete callback;
}

}  // namespace

// A packed function calling a Python callable (for the global registry).
int MakePythonFunction(PyObject* callable, TPFunctionHandle* out, PyObject* caller, int index) {
  auto* callback = new PythonCallback{Py_NewRef(callable), Py_XNewRef(caller), index};
  if (TPFunctionCreate(callback, Guarded<CallPythonCallable>, Guarded<DeletePythonCallable>, nullptr, out) != 0) {
    Py_DECREF(callback->callable);
    Py_XDECREF(callback->caller);
    delete callback;
    return -1;
  }
  return 0;
}
}  // namespace tensorplug::py
