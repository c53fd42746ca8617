// tensorplug.Function: the Python object around a TPFunctionHandle.
#pragma once
#include "common.h"
#include "signature.h"

namespace tensorplug::py {

struct FunctionObject {
  PyObject_HEAD
  vectorcallfunc vectorcall;
  TPFunctionHandle handle;
  TPPackedFunc entry;
  void* self;
  Signature* sig;
  PyObject* name;
  PyObject* py_signature;  // cached inspect.Signature
  bool release_gil;
};

// Register the type on the module as "Function".
bool InitFunctionType(PyObject* module);
// tensorplug._signature.build(name, text), used for __signature__.
void SetSignatureBuilder(PyObject* builder);
// The handle of a tensorplug.Function, nullptr for any other object.
TPFunctionHandle FunctionHandleOf(PyObject* obj);

}  // namespace tensorplug::py
