// tensorplug.Handle: the Python object around one reference to an opaque handle.
#pragma once
#include "common.h"

namespace tensorplug::py {

extern PyTypeObject* HandleType;
// Register the type on the module as "Handle".
bool InitHandleType(PyObject* module);
// A new tensorplug.Handle taking over one reference to `ref` (released on failure too).
PyObject* HandleFromRef(TPHandleRef ref);
// A new non-owning, untyped tensorplug.Handle for `ptr` (a kernel's void* result).
PyObject* HandleFromPointer(void* ptr);
// The reference a tensorplug.Handle holds (borrowed); nullptr once it was closed.
TPHandleRef HandleRefOf(PyObject* handle);

}  // namespace tensorplug::py
