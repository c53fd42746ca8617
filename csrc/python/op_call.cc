// tensorplug._core.OpCall: the call of a tensorplug.Op, in C.
//
// tensorplug.Op (core/tensorplug/ops.py) subclasses this type and keeps its `_impls` and
// `function` here. Its Python `__call__` is the call as graph tracers read it (a framework's
// compiler inlines it to find the framework's operator); a plain call runs the same loop here, without a
// Python frame, a tuple for *args and a dict for **kwargs (about 1,500 instructions per
// call, benchmarks/README.md). A `__call__` in a class body makes CPython run it for every
// call, so `op_call_install(Op)` points the class's call slot back here once Python has
// made the class; `Op.__call__` stays what tracers and `inspect` see.
//
// The loop, the same as Op.__call__'s: the arguments, positional then keyword, in order;
// a list or tuple (exactly) stands for its first item, and an empty one is skipped. The
// first argument whose type maps to a callable in `_impls` decides: that callable gets the
// call. A type not in `_impls` is looked up by `self.resolve(type)` (the adapters' hook,
// Python), which caches its answer there; None means no framework claims it. When no
// argument decides, the kernel function gets the call.
#include "common.h"  // Python.h first

#include <structmember.h>

#include <cstddef>

namespace tensorplug::py {
namespace {

struct OpCallObject {
  PyObject_HEAD
  vectorcallfunc vectorcall;
  PyObject* impls;     // Op._impls: argument type -> the callable that runs the op, or None
  PyObject* function;  // Op.function: the kernel function
};

PyTypeObject* OpCallType = nullptr;
PyObject* g_resolve = nullptr;  // "resolve", interned

PyObject* OpVectorcall(PyObject* self, PyObject* const* args, size_t nargsf, PyObject* kwnames) {
  auto* op = reinterpret_cast<OpCallObject*>(self);
  if (op->impls == nullptr || !PyDict_CheckExact(op->impls) || op->function == nullptr) {
    return PyErr_Format(PyExc_TypeError, "%s object called before its __init__ set '_impls' (a dict) and 'function'",
                        Py_TYPE(self)->tp_name);
  }
  const Py_ssize_t n = PyVectorcall_NARGS(nargsf) + (kwnames != nullptr ? PyTuple_GET_SIZE(kwnames) : 0);
  for (Py_ssize_t i = 0; i < n; ++i) {
    PyObject* arg = args[i];
    if (PyList_CheckExact(arg) || PyTuple_CheckExact(arg)) {
      if (Py_SIZE(arg) == 0) continue;
      arg = PyList_CheckExact(arg) ? PyList_GET_ITEM(arg, 0) : PyTuple_GET_ITEM(arg, 0);
    }
    // Held: resolve() runs Python, which may change `_impls` or the argument.
    PyObject* type = Py_NewRef(reinterpret_cast<PyObject*>(Py_TYPE(arg)));
    PyObject* impl = PyDict_GetItemWithError(op->impls, type);
    if (impl != nullptr) {
      Py_INCREF(impl);
    } else if (!PyErr_Occurred()) {
      impl = PyObject_CallMethodOneArg(self, g_resolve, type);
    }
    Py_DECREF(type);
    if (impl == nullptr) return nullptr;
    if (impl != Py_None) {
      PyObject* result = PyObject_Vectorcall(impl, args, nargsf, kwnames);
      Py_DECREF(impl);
      return result;
    }
    Py_DECREF(impl);
  }
  return PyObject_Vectorcall(op->function, args, nargsf, kwnames);
}

PyObject* OpCallNew(PyTypeObject* type, PyObject*, PyObject*) {
  PyObject* self = type->tp_alloc(type, 0);
  if (self != nullptr) reinterpret_cast<OpCallObject*>(self)->vectorcall = Guarded<OpVectorcall>;
  return self;
}

int OpCallTraverse(PyObject* self, visitproc visit, void* arg) {
  auto* op = reinterpret_cast<OpCallObject*>(self);
  Py_VISIT(op->impls);
  Py_VISIT(op->function);
  Py_VISIT(Py_TYPE(self));  // a heap type's instances keep it alive
  return 0;
}

int OpCallClear(PyObject* self) {
  auto* op = reinterpret_cast<OpCallObject*>(self);
  Py_CLEAR(op->impls);
  Py_CLEAR(op->function);
  return 0;
}

void OpCallDealloc(PyObject* self) {
  PyTypeObject* type = Py_TYPE(self);
  PyObject_GC_UnTrack(self);
  OpCallClear(self);
  type->tp_free(self);
  Py_DECREF(type);
}

PyMemberDef kOpCallMembers[] = {
    {"_impls", T_OBJECT_EX, offsetof(OpCallObject, impls), 0,
     "argument type -> the callable that runs the op for it, or None (filled by resolve())"},
    {"function", T_OBJECT_EX, offsetof(OpCallObject, function), 0, "the kernel function the op calls"},
    {"__vectorcalloffset__", T_PYSSIZET, offsetof(OpCallObject, vectorcall), READONLY, nullptr},
    {nullptr, 0, 0, 0, nullptr},
};

PyType_Slot kOpCallSlots[] = {
    {Py_tp_new, GuardedSlot<OpCallNew>()},
    {Py_tp_dealloc, GuardedSlot<OpCallDealloc>()},
    {Py_tp_traverse, GuardedSlot<OpCallTraverse>()},
    {Py_tp_clear, GuardedSlot<OpCallClear>()},
    {Py_tp_call, reinterpret_cast<void*>(PyVectorcall_Call)},
    {Py_tp_members, kOpCallMembers},
    {Py_tp_doc, const_cast<char*>("The call of a tensorplug.Op, in C (tensorplug.Op is its one subclass).")},
    {0, nullptr},
};

PyType_Spec kOpCallSpec = {"tensorplug._core.OpCall", sizeof(OpCallObject), 0,
                           Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE | Py_TPFLAGS_HAVE_GC |
                               Py_TPFLAGS_HAVE_VECTORCALL,
                           kOpCallSlots};

// op_call_install(cls): calls of cls's instances run OpVectorcall (cls subclasses OpCall and
// defines __call__ in Python, which set its call slot to that method's).
PyObject* OpCallInstall(PyObject*, PyObject* cls) {
  if (!PyType_Check(cls) || !PyType_IsSubtype(reinterpret_cast<PyTypeObject*>(cls), OpCallType)) {
    return PyErr_Format(PyExc_TypeError, "op_call_install(): expected a subclass of OpCall, got %R", cls);
  }
  auto* type = reinterpret_cast<PyTypeObject*>(cls);
  type->tp_call = PyVectorcall_Call;
  type->tp_vectorcall_offset = offsetof(OpCallObject, vectorcall);
  type->tp_flags |= Py_TPFLAGS_HAVE_VECTORCALL;
  PyType_Modified(type);
  Py_RETURN_NONE;
}

PyMethodDef kOpCallMethods[] = {
    {"op_call_install", GuardedMethod<OpCallInstall>(), METH_O,
     "op_call_install(cls): calls of cls's instances (an OpCall subclass) run the C loop, not cls.__call__"},
    {nullptr, nullptr, 0, nullptr},
};

}  // namespace

bool InitOpCallType(PyObject* module) {
  g_resolve = PyUnicode_InternFromString("resolve");
  if (g_resolve == nullptr) return false;
  OpCallType = reinterpret_cast<PyTypeObject*>(PyType_FromSpec(&kOpCallSpec));
  if (OpCallType == nullptr) return false;
  return PyModule_AddObjectRef(module, "OpCall", reinterpret_cast<PyObject*>(OpCallType)) == 0 &&
         PyModule_AddFunctions(module, kOpCallMethods) == 0;
}

}  // namespace tensorplug::py
