// Native entry points as tensorplug functions: a compiler that produces code in-process
// (Numba, an LLVM JIT) hands over the address of a TPPackedFunc, and Python calls it like
// an exported function.
#include "function_object.h"

namespace tensorplug::py {

namespace {

// The function's closure when an owner keeps the code alive: the entry receives it as
// `self` and, like an exported function, does not look at it.
struct NativeOwner {
  PyObject* owner;
};

void DropNativeOwner(void* self) {
  if (!PythonUsable()) return;  // released after Py_Finalize: leak the owner
  auto* keeper = static_cast<NativeOwner*>(self);
  PyGILState_STATE gil = PyGILState_Ensure();
  Py_DECREF(keeper->owner);
  PyGILState_Release(gil);
  delete keeper;
}

}  // namespace

// function_from_pointer(address, signature, name, owner, release_gil) -> Function
PyObject* FunctionFromPointer(PyObject*, PyObject* args) {
  PyObject* address_obj;
  const char* signature;
  PyObject* name;
  PyObject* owner;
  int release_gil = 1;
  if (!PyArg_ParseTuple(args, "OsUO|p", &address_obj, &signature, &name, &owner, &release_gil)) return nullptr;
  void* address = PyLong_AsVoidPtr(address_obj);
  if (!address) {
    if (PyErr_Occurred()) return nullptr;
    return PyErr_Format(PyExc_ValueError, "function_from_pointer() argument 'pointer': the address of %U is 0",
                        name);
  }
  // Parse before the handle exists, so a bad signature leaves no owner reference behind.
  Signature parsed;
  if (!ParseSignature(signature, &parsed)) {
    return PyErr_Format(PyExc_ValueError, "function_from_pointer() argument 'signature': malformed signature '%s' "
                        "for %U (see docs/capi.md, \"Signatures\")", signature, name);
  }
  NativeOwner* keeper = owner == Py_None ? nullptr : new NativeOwner{Py_NewRef(owner)};
  TPFunctionHandle func = nullptr;
  if (TPFunctionCreate(keeper, reinterpret_cast<TPPackedFunc>(address), keeper ? DropNativeOwner : nullptr,
                       signature, &func) != 0) {
    if (keeper) {
      Py_DECREF(keeper->owner);
      delete keeper;
    }
    return RaiseFromTPError();
  }
  PyObject* f = FunctionFromHandle(func, name, release_gil != 0);
  TPFunctionRelease(func);  // f holds its own reference (or, on failure, the keeper goes now)
  return f;
}

}  // namespace tensorplug::py
