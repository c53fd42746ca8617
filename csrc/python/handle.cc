// tensorplug.Handle: the Python object around one reference to an opaque handle
// (TPHandleRef, c_api.h "Handles").
#include "handle_object.h"

#include <cstdint>
#include <utility>

namespace tensorplug::py {

PyTypeObject* HandleType = nullptr;

namespace {

struct HandleObject {
  PyObject_HEAD
  TPHandleRef ref;     // nullptr once closed
  void* address;       // the pointer, kept for repr, hash and equality after close()
  PyObject* type_name;  // str, or None for an untyped handle
  bool owning;
};

HandleObject* AsHandle(PyObject* obj) { return reinterpret_cast<HandleObject*>(obj); }

void HandleDealloc(PyObject* self) {
  HandleObject* h = AsHandle(self);
  // The deleter is the library's C code: it needs no Python, so it may run at shutdown too.
  if (h->ref) TPHandleRelease(std::exchange(h->ref, nullptr));
  Py_XDECREF(h->type_name);
  PyTypeObject* type = Py_TYPE(self);
  type->tp_free(self);
  Py_DECREF(type);
}

PyObject* HandleRepr(PyObject* self) {
  HandleObject* h = AsHandle(self);
  PyObject* type = h->type_name == Py_None ? nullptr : h->type_name;
  const char* state = !h->ref ? ", closed" : h->owning ? "" : ", non-owning";
  if (type) return PyUnicode_FromFormat("<tensorplug.Handle %U at %p%s>", type, h->address, state);
  return PyUnicode_FromFormat("<tensorplug.Handle void* at %p%s>", h->address, state);
}

// Equal: the same object of the same type name. A closed handle equals only itself (its
// address may belong to a new object by now).
PyObject* HandleRichCompare(PyObject* a, PyObject* b, int op) {
  if ((op != Py_EQ && op != Py_NE) || Py_TYPE(b) != HandleType) Py_RETURN_NOTIMPLEMENTED;
  HandleObject *x = AsHandle(a), *y = AsHandle(b);
  bool equal = a == b;
  if (!equal && x->ref && y->ref && x->address == y->address) {
    int same = PyObject_RichCompareBool(x->type_name, y->type_name, Py_EQ);
    if (same < 0) return nullptr;
    equal = same == 1;
  }
  return PyBool_FromLong(equal == (op == Py_EQ));
}

Py_hash_t HandleHash(PyObject* self) {
  const uintptr_t bits = reinterpret_cast<uintptr_t>(AsHandle(self)->address);
  const Py_hash_t hash = Py_hash_t((bits >> 4) | (bits << (8 * sizeof(uintptr_t) - 4)));  // low bits: alignment
  return hash == -1 ? -2 : hash;
}

PyObject* HandleClose(PyObject* self, PyObject*) {
  HandleObject* h = AsHandle(self);
  if (h->ref) TPHandleRelease(std::exchange(h->ref, nullptr));
  Py_RETURN_NONE;
}

PyObject* HandleEnter(PyObject* self, PyObject*) { return Py_NewRef(self); }

PyObject* HandleExit(PyObject* self, PyObject*) { return HandleClose(self, nullptr); }

PyObject* HandleGetTypeName(PyObject* self, void*) { return Py_NewRef(AsHandle(self)->type_name); }

PyObject* HandleGetAddress(PyObject* self, void*) { return PyLong_FromVoidPtr(AsHandle(self)->address); }

PyObject* HandleGetOwning(PyObject* self, void*) { return PyBool_FromLong(AsHandle(self)->owning); }

PyObject* HandleGetClosed(PyObject* self, void*) { return PyBool_FromLong(AsHandle(self)->ref == nullptr); }

PyMethodDef kHandleMethods[] = {
    {"close", GuardedMethod<HandleClose>(), METH_NOARGS,
     "Drop this object's reference now: the deleter runs if it was the last one (it never runs twice). "
     "Passing the handle to a function afterwards raises ValueError."},
    {"__enter__", GuardedMethod<HandleEnter>(), METH_NOARGS, "The handle itself."},
    {"__exit__", GuardedMethod<HandleExit>(), METH_VARARGS, "close()."},
    {nullptr, nullptr, 0, nullptr},
};

PyGetSetDef kHandleGetSet[] = {
    {"type_name", Guarded<HandleGetTypeName>, nullptr,
     "The declared type name (``'mylib.Plan'``), or None for an untyped handle (a ``void*``).", nullptr},
    {"address", Guarded<HandleGetAddress>, nullptr, "The pointer, as an int.", nullptr},
    {"_as_parameter_", Guarded<HandleGetAddress>, nullptr,
     "The pointer, as ctypes reads it: a handle passes to a ctypes function's ``void*`` parameter.", nullptr},
    {"owning", Guarded<HandleGetOwning>, nullptr,
     "Whether the handle owns its object (has a deleter); a ``void*`` result does not.", nullptr},
    {"closed", Guarded<HandleGetClosed>, nullptr, "Whether :meth:`close` was called.", nullptr},
    {nullptr, nullptr, nullptr, nullptr, nullptr},
};

PyType_Slot kHandleSlots[] = {
    {Py_tp_dealloc, GuardedSlot<HandleDealloc>()},
    {Py_tp_repr, GuardedSlot<HandleRepr>()},
    {Py_tp_richcompare, GuardedSlot<HandleRichCompare>()},
    {Py_tp_hash, GuardedSlot<HandleHash>()},
    {Py_tp_methods, kHandleMethods},
    {Py_tp_getset, kHandleGetSet},
    {Py_tp_doc, const_cast<char*>(
                    "An opaque handle to state a kernel library keeps (a plan, a workspace, a communicator): "
                    "returned by a function whose C++ result is a ``tensorplug::Handle<T>`` or a ``void*``, "
                    "and passed back to functions that take one. Only kernels make handles. An owning handle "
                    "runs its library's deleter once, when the last reference (here or in C++) goes; a "
                    "``void*`` result is a non-owning handle. A handle is refused where any other kind of "
                    "argument is expected, and a typed handle where another type is expected.")},
    {0, nullptr},
};

PyType_Spec kHandleSpec = {"tensorplug.Handle", sizeof(HandleObject), 0,
                           Py_TPFLAGS_DEFAULT | Py_TPFLAGS_DISALLOW_INSTANTIATION, kHandleSlots};

}  // namespace

PyObject* HandleFromRef(TPHandleRef ref) {
  const char* type = TPHandleGetTypeName(ref);
  PyObject* type_name = type ? PyUnicode_FromString(type) : Py_NewRef(Py_None);
  auto* h = type_name ? PyObject_New(HandleObject, HandleType) : nullptr;
  if (!h) {
    Py_XDECREF(type_name);
    TPHandleRelease(ref);
    return nullptr;
  }
  h->ref = ref;
  h->address = TPHandleGetPointer(ref);
  h->type_name = type_name;
  h->owning = TPHandleIsOwning(ref) != 0;
  return reinterpret_cast<PyObject*>(h);
}

PyObject* HandleFromPointer(void* ptr) {
  TPHandleRef ref = nullptr;
  if (TPHandleCreate(ptr, nullptr, nullptr, nullptr, &ref) != 0) return RaiseFromTPError();
  return HandleFromRef(ref);
}

TPHandleRef HandleRefOf(PyObject* handle) { return AsHandle(handle)->ref; }

bool InitHandleType(PyObject* module) {
  HandleType = reinterpret_cast<PyTypeObject*>(PyType_FromSpec(&kHandleSpec));
  if (!HandleType) return false;
  return PyModule_AddObjectRef(module, "Handle", reinterpret_cast<PyObject*>(HandleType)) == 0;
}

}  // namespace tensorplug::py
