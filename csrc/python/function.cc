// tensorplug.Function and the call path:
//   resolve arguments -> pick the primary tensor -> set stream and allocator ->
//   call -> restore -> convert the result.
#include <memory>
#include <string>
#include <vector>

#include "arguments.h"
#include "call_env.h"

#include <structmember.h>

namespace tensorplug::py {

PyTypeObject* FunctionType = nullptr;

namespace {

PyObject* g_signature_builder = nullptr;  // tensorplug._signature.build(name, text)

PyObject* TooManyArgs(FunctionObject* f, Py_ssize_t nargs) {
  return PyErr_Format(PyExc_TypeError, "%U() takes at most %d arguments, got %zd", f->name, kMaxArgs, nargs);
}

PyObject* ArityError(FunctionObject* f, Py_ssize_t nargs) {
  std::string names;
  for (const auto& p : f->sig->params) {
    names += (names.empty() ? "" : ", ") + p.name;
    if (p.default_value) names += "=" + p.default_text;
  }
  size_t n = f->sig->params.size();
  size_t required = f->sig->required;
  std::string count = required == n ? std::to_string(n) : std::to_string(required) + " to " + std::to_string(n);
  return PyErr_Format(PyExc_TypeError, "%U() takes %s argument%s (%s), got %zd", f->name, count.c_str(),
                      n == 1 ? "" : "s", names.c_str(), nargs);
}

PyObject* CallWithKeywords(FunctionObject* f, PyObject* const* args, Py_ssize_t nargs, PyObject* kwnames);

PyObject* CallInFrame(FunctionObject* f, PyObject* const* args, Py_ssize_t nargs, CallFrame& frame);

// Run the kernel, the GIL released around it unless the function keeps it.
__attribute__((always_inline)) inline int Invoke(FunctionObject* f, TPAny* packed, int32_t nargs, TPAny* result) {
  if (!f->release_gil) return f->entry(f->self, packed, nargs, result);
  PyThreadState* state = PyEval_SaveThread();
  int rc = f->entry(f->self, packed, nargs, result);
  PyEval_RestoreThread(state);
  return rc;
}

// After the env is restored: the kernel's error as a Python exception, or its result.
__attribute__((always_inline)) inline PyObject* Finish(FunctionObject* f, ThreadState& ts, int rc, TPAny& result,
                                                       AdapterTable* output) {
  if (rc != 0) {
    TPAnyRelease(&result);
    return RaiseFromTPError();
  }
  // A callback exception the kernel caught must not outlive the call (it holds frames).
  if (ts.pending_exception && ts.call_depth == 0) Py_CLEAR(ts.pending_exception);
  if (result.type_index == kTPNone) Py_RETURN_NONE;  // the common in-place kernel
  PyObject* value = ValueToPython(&result, output, f->name);
  if (__builtin_expect(f->sig->result_is_list, 0) && value && PyTuple_CheckExact(value)) {
    Py_SETREF(value, PySequence_List(value));
  }
  return value;
}

PyObject* Call(FunctionObject* f, PyObject* const* args, Py_ssize_t nargs) {
  const Signature* sig = f->sig;
  if (sig->known && size_t(nargs) != sig->params.size()) {
    // Omitted trailing arguments with defaults: bound by the keyword path.
    if (size_t(nargs) >= sig->required && size_t(nargs) < sig->params.size()) {
      return CallWithKeywords(f, args, nargs, nullptr);
    }
    return ArityError(f, nargs);
  }
  if (nargs <= kInlineArgs) {
    FrameStorage<kInlineArgs> storage;
    CallFrame frame(storage);
    return CallInFrame(f, args, nargs, frame);
  }
  if (nargs > kMaxArgs) return TooManyArgs(f, nargs);
  auto storage = std::make_unique<FrameStorage<kMaxArgs>>();
  CallFrame frame(*storage);
  return CallInFrame(f, args, nargs, frame);
}

PyObject* CallInFrame(FunctionObject* f, PyObject* const* args, Py_ssize_t nargs, CallFrame& frame) {
  const Signature* sig = f->sig;
  ScratchMark mark = ScratchSave();
  for (Py_ssize_t i = 0; i < nargs; ++i) {
    frame.packed[i].type_index = kTPNone;  // a failed conversion leaves nothing to release
    frame.packed[i].flags = 0;
    ArgConverter convert = sig->known ? sig->params[i].convert : ConvertAny;
    if (!convert(f, frame, int(i), args[i], sig->known ? &sig->params[i] : nullptr)) {
      frame.Release(int(i) + 1);
      ScratchRestore(mark);
      return nullptr;
    }
  }

  ThreadState& ts = TS();
  TPAny result;
  result.type_index = kTPNone;
  result.flags = 0;
  result.v_int64 = 0;
  int rc;
  AdapterTable* output;
  {
    CallEnv env;
    if (!env.Enter(ts, frame.primary_table, frame.primary_device)) {
      frame.Release(int(nargs));
      ScratchRestore(mark);
      return nullptr;  // env restores what Enter set
    }
    output = env.output();
    rc = Invoke(f, frame.packed, int32_t(nargs), &result);
  }
  frame.Release(0);  // owning tensor arguments now belong to the callee
  ScratchRestore(mark);
  return Finish(f, ts, rc, result, output);
}

// Bind keyword arguments to positions using the signature's parameter names. Not inlined:
// it would make the positional call path (the common one) save registers it never uses.
__attribute__((noinline)) PyObject* CallWithKeywords(FunctionObject* f, PyObject* const* args, Py_ssize_t nargs, PyObject* kwnames) {
  const Signature* sig = f->sig;
  Py_ssize_t nkw = kwnames ? PyTuple_GET_SIZE(kwnames) : 0;
  if (!sig->known) {
    return PyErr_Format(PyExc_TypeError, "%U() takes no keyword arguments (its library exports no signature)",
                        f->name);
  }
  size_t n = sig->params.size();
  if (size_t(nargs) > n) return ArityError(f, nargs);
  std::vector<PyObject*> bound(n, nullptr);
  for (Py_ssize_t i = 0; i < nargs; ++i) bound[i] = args[i];
  for (Py_ssize_t k = 0; k < nkw; ++k) {
    const char* key = PyUnicode_AsUTF8(PyTuple_GET_ITEM(kwnames, k));
    if (!key) return nullptr;
    size_t pos = 0;
    while (pos < n && sig->params[pos].name != key) ++pos;
    if (pos == n) {
      std::string names;
      for (const auto& param : sig->params) names += (names.empty() ? "'" : ", '") + param.name + "'";
      if (names.empty()) {
        return PyErr_Format(PyExc_TypeError, "%U() got an unexpected keyword argument '%s'; it takes no arguments",
                            f->name, key);
      }
      return PyErr_Format(PyExc_TypeError, "%U() got an unexpected keyword argument '%s'; its parameters are %s",
                          f->name, key, names.c_str());
    }
    if (bound[pos]) return PyErr_Format(PyExc_TypeError, "%U() got multiple values for argument '%s'", f->name, key);
    bound[pos] = args[nargs + k];
  }
  for (size_t i = 0; i < n; ++i) {
    if (!bound[i]) bound[i] = sig->params[i].default_value;  // owned by the signature
    if (!bound[i]) return PyErr_Format(PyExc_TypeError, "%U() missing argument %zu '%s'", f->name, i + 1, sig->params[i].name.c_str());
  }
  return Call(f, bound.data(), Py_ssize_t(n));
}

PyObject* FunctionVectorcall(PyObject* callable, PyObject* const* args, size_t nargsf, PyObject* kwnames) {
  auto* f = reinterpret_cast<FunctionObject*>(callable);
  Py_ssize_t nargs = PyVectorcall_NARGS(nargsf);
  if (kwnames && PyTuple_GET_SIZE(kwnames)) return CallWithKeywords(f, args, nargs, kwnames);
  return Call(f, args, nargs);
}

// The vectorcall of a function that takes no arguments (it exports a signature without
// parameters, or none), called with none: the floor of a plain call (issue 23). No frame,
// no argument loop, no scratch mark (nothing is converted), no primary tensor and so no
// stream: only the thread binding, with the default allocator and output, which is the env
// CallInFrame sets for a call without tensor arguments. Anything else (arguments, keywords,
// a live override context, which may set streams and the output) takes the general path.
PyObject* NoArgsVectorcall(PyObject* callable, PyObject* const* args, size_t nargsf, PyObject* kwnames) {
  auto* f = reinterpret_cast<FunctionObject*>(callable);
  Py_ssize_t nargs = PyVectorcall_NARGS(nargsf);
  if (kwnames && PyTuple_GET_SIZE(kwnames)) return CallWithKeywords(f, args, nargs, kwnames);
  if (nargs != 0 || g_live_overrides.load(std::memory_order_relaxed) != 0) return Call(f, args, nargs);
  ThreadState& ts = TS();
  TPAny result;
  result.type_index = kTPNone;
  result.flags = 0;
  result.v_int64 = 0;
  TPAny no_args[1];  // `args` points to stack memory, as a general call's frame does, never NULL
  ThreadBinding binding;
  binding.Bind(ts, nullptr);
  int rc = Invoke(f, no_args, 0, &result);
  binding.Unbind(ts);
  return Finish(f, ts, rc, result, nullptr);
}

void FunctionDealloc(PyObject* self) {
  auto* f = reinterpret_cast<FunctionObject*>(self);
  if (f->handle) TPFunctionRelease(f->handle);
  delete f->sig;
  Py_XDECREF(f->name);
  Py_XDECREF(f->py_signature);
  PyTypeObject* type = Py_TYPE(self);
  type->tp_free(self);
  Py_DECREF(type);
}

PyObject* FunctionRepr(PyObject* self) {
  auto* f = reinterpret_cast<FunctionObject*>(self);
  return PyUnicode_FromFormat("<tensorplug.Function %U>", f->name);
}

PyObject* FunctionGetName(PyObject* self, void*) { return Py_NewRef(reinterpret_cast<FunctionObject*>(self)->name); }
PyObject* FunctionGetSignatureText(PyObject* self, void*) {
  auto* f = reinterpret_cast<FunctionObject*>(self);
  if (!f->sig->known) Py_RETURN_NONE;
  return PyUnicode_FromString(f->sig->text.c_str());
}
// inspect.signature() reads __signature__; built once from the exported signature.
PyObject* FunctionGetPySignature(PyObject* self, void*) {
  auto* f = reinterpret_cast<FunctionObject*>(self);
  if (!f->py_signature) {
    if (!g_signature_builder) Py_RETURN_NONE;
    PyObject* text = FunctionGetSignatureText(self, nullptr);
    if (!text) return nullptr;
    f->py_signature = PyObject_CallFunctionObjArgs(g_signature_builder, f->name, text, nullptr);
    Py_DECREF(text);
    if (!f->py_signature) return nullptr;
  }
  return Py_NewRef(f->py_signature);
}
PyObject* FunctionGetReleasesGil(PyObject* self, void*) {
  return PyBool_FromLong(reinterpret_cast<FunctionObject*>(self)->release_gil);
}

PyGetSetDef kFunctionGetSet[] = {
    {"__name__", Guarded<FunctionGetName>, nullptr, "The exported name.", nullptr},
    {"signature_text", Guarded<FunctionGetSignatureText>, nullptr, "The exported signature string, or None.", nullptr},
    {"__signature__", Guarded<FunctionGetPySignature>, nullptr, "inspect.Signature built from the exported signature.", nullptr},
    {"releases_gil", Guarded<FunctionGetReleasesGil>, nullptr, "Whether calls release the GIL.", nullptr},
    {nullptr, nullptr, nullptr, nullptr, nullptr},
};

PyMemberDef kFunctionMembers[] = {
    {"__vectorcalloffset__", T_PYSSIZET, offsetof(FunctionObject, vectorcall), READONLY, nullptr},
    {nullptr, 0, 0, 0, nullptr},
};

PyType_Slot kFunctionSlots[] = {
    {Py_tp_dealloc, GuardedSlot<FunctionDealloc>()},
    {Py_tp_repr, GuardedSlot<FunctionRepr>()},
    {Py_tp_call, reinterpret_cast<void*>(PyVectorcall_Call)},
    {Py_tp_getset, kFunctionGetSet},
    {Py_tp_members, kFunctionMembers},
    {Py_tp_doc, const_cast<char*>("A compiled function: call it with tensors of any framework.")},
    {0, nullptr},
};

PyType_Spec kFunctionSpec = {"tensorplug.Function", sizeof(FunctionObject), 0,
                             Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_VECTORCALL, kFunctionSlots};

}  // namespace

PyObject* FunctionFromHandle(TPFunctionHandle func, PyObject* name, bool release_gil) {
  auto* sig = new Signature;
  const char* text = TPFunctionGetSignature(func);
  if (text && !ParseSignature(text, sig)) {
    delete sig;
    return PyErr_Format(PyExc_ValueError, "function %U exports a malformed signature: '%s'", name, text);
  }
  auto* f = PyObject_New(FunctionObject, FunctionType);
  if (!f) {
    delete sig;
    return nullptr;
  }
  f->vectorcall = !sig->known || sig->params.empty() ? Guarded<NoArgsVectorcall> : Guarded<FunctionVectorcall>;
  TPFunctionRetain(func);
  f->handle = func;
  f->entry = TPFunctionGetEntry(func, &f->self);
  f->sig = sig;
  f->name = Py_NewRef(name);
  f->py_signature = nullptr;
  f->release_gil = release_gil;
  return reinterpret_cast<PyObject*>(f);
}

bool InitFunctionType(PyObject* module) {
  FunctionType = reinterpret_cast<PyTypeObject*>(PyType_FromSpec(&kFunctionSpec));
  if (!FunctionType) return false;
  return PyModule_AddObjectRef(module, "Function", reinterpret_cast<PyObject*>(FunctionType)) == 0;
}

void SetSignatureBuilder(PyObject* builder) {
  Py_XINCREF(builder);
  Py_XSETREF(g_signature_builder, builder);
}

TPFunctionHandle FunctionHandleOf(PyObject* obj) {
  return Py_TYPE(obj) == FunctionType ? reinterpret_cast<FunctionObject*>(obj)->handle : nullptr;
}
}  // namespace tensorplug::py
