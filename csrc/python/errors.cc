// Errors across the boundary: TPError <-> Python exceptions, C++ exceptions -> Python.
#include <string>

#include "call_env.h"

namespace tensorplug::py {

namespace {
PyObject* ExceptionForKind(const std::string& kind) {
  struct Entry {
    const char* name;
    PyObject** type;
  };
  static const Entry kTable[] = {
#define TP_X(name) {#name, &PyExc_##name},
      TP_ERROR_KINDS(TP_X)
#undef TP_X
  };
  for (const auto& e : kTable) {
    if (kind == e.name) return *e.type;
  }
  return nullptr;
}
}  // namespace

void SetErrorViaTP(void*, const char* kind, const char* message) { TPErrorSet(kind, message); }

void RaiseWithMessage(PyObject* type, PyObject* message, PyObject* original) {
  // Not every exception class can be built from one message (UnicodeEncodeError takes five
  // arguments; PyErr_Format would raise "function takes exactly 5 arguments" instead): walk
  // up to the nearest base class that can, so the message survives and `except` on the
  // base still matches.
  PyObject* cls = type && PyExceptionClass_Check(type) ? type : PyExc_RuntimeError;
  while (cls) {
    PyObject* exc = PyObject_CallOneArg(cls, message);
    if (exc && PyExceptionInstance_Check(exc)) {
      // The original keeps what the message cannot carry (a UnicodeError's object and range).
      if (cls != type && original) PyException_SetCause(exc, Py_NewRef(original));
      PyErr_SetObject(reinterpret_cast<PyObject*>(Py_TYPE(exc)), exc);
      Py_DECREF(exc);
      return;
    }
    Py_XDECREF(exc);
    PyErr_Clear();
    PyTypeObject* base = reinterpret_cast<PyTypeObject*>(cls)->tp_base;
    cls = base && PyExceptionClass_Check(reinterpret_cast<PyObject*>(base)) ? reinterpret_cast<PyObject*>(base)
                                                                          : nullptr;
  }
  PyErr_SetObject(PyExc_RuntimeError, message);  // not reached: BaseException takes any message
}

void PrefixError(PyObject* prefix) {
  if (!prefix) return;  // building it failed: that error replaces the original
  PyObject *type, *value, *tb;
  PyErr_Fetch(&type, &value, &tb);
  PyErr_NormalizeException(&type, &value, &tb);
  PyObject* text = value ? PyObject_Str(value) : nullptr;
  if (!text) {
    PyErr_Clear();
    text = PyUnicode_FromString("(the error's message could not be read)");
  }
  if (text) {
    // The first line only, as for allocator errors (env.cc): frameworks append backtraces
    // and notes after it, which would bury what the prefix names.
    Py_ssize_t cut = PyUnicode_FindChar(text, '\n', 0, PyUnicode_GET_LENGTH(text), 1);
    if (cut > 0) Py_SETREF(text, PyUnicode_Substring(text, 0, cut));
  }
  PyObject* message = text ? PyUnicode_FromFormat("%U: %U", prefix, text) : nullptr;
  if (message) RaiseWithMessage(type, message, value);
  Py_XDECREF(message);
  Py_XDECREF(text);
  Py_XDECREF(type);
  Py_XDECREF(value);
  Py_XDECREF(tb);
}

void TPErrorFromPython() {
  PyObject *type, *value, *traceback;
  PyErr_Fetch(&type, &value, &traceback);
  PyErr_NormalizeException(&type, &value, &traceback);
  if (traceback && value) PyException_SetTraceback(value, traceback);
  std::string kind = type ? reinterpret_cast<PyTypeObject*>(type)->tp_name : "RuntimeError";
  std::string message;
  if (PyObject* text = value ? PyObject_Str(value) : nullptr) {
    const char* utf8 = PyUnicode_AsUTF8(text);
    if (utf8) message = utf8;
    Py_DECREF(text);
  }
  PyErr_Clear();
  Py_XDECREF(type);
  Py_XDECREF(traceback);
  ThreadState& ts = TS();
  Py_XSETREF(ts.pending_exception, value);
  ts.pending_kind = kind;
  ts.pending_message = message;
  TPErrorSet(kind.c_str(), message.c_str());
}

PyObject* RaiseFromTPError() {
  const char* kind = "RuntimeError";
  const char* message = "kernel failed without reporting an error";
  TPErrorGet(&kind, &message);
  std::string k(kind), m(message);
  TPErrorClear();
  ThreadState& ts = TS();
  PyObject* pending = ts.pending_exception;
  ts.pending_exception = nullptr;
  if (pending && k == ts.pending_kind && m == ts.pending_message) {  // a callback's own exception
    PyErr_SetObject(reinterpret_cast<PyObject*>(Py_TYPE(pending)), pending);
    Py_DECREF(pending);
    return nullptr;
  }
  Py_XDECREF(pending);
  if (PyObject* type = ExceptionForKind(k)) {
    if (type == PyExc_KeyError) {  // KeyError would repr() its message
      PyObject* text = PyUnicode_FromString(m.c_str());
      if (text) PyErr_SetObject(type, Py_BuildValue("(N)", text));
    } else {
      PyObject* text = PyUnicode_FromString(m.c_str());
      if (text) RaiseWithMessage(type, text, nullptr);
      Py_XDECREF(text);
    }
  } else {
    PyErr_Format(PyExc_RuntimeError, "%s: %s", k.c_str(), m.c_str());
  }
  return nullptr;
}
}  // namespace tensorplug::py
