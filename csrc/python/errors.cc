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

void SetErrorFromCxxException() noexcept {
  // Called from C code (exchange tables, deleters' callers) too: only with the GIL.
  if (!PythonUsable() || !PyGILState_Check()) return;
  try {
    throw;
  } catch (const std::bad_alloc&) {
    PyErr_NoMemory();
  } catch (const std::exception& e) {
    PyErr_Format(PyExc_RuntimeError, "tensorplug internal error (C++ exception): %s", e.what());
  } catch (...) {
    PyErr_SetString(PyExc_RuntimeError, "tensorplug internal error: unknown C++ exception");
  }
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
      PyErr_SetString(type, m.c_str());
    }
  } else {
    PyErr_Format(PyExc_RuntimeError, "%s: %s", k.c_str(), m.c_str());
  }
  return nullptr;
}
}  // namespace tensorplug::py
