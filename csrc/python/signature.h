// An exported signature ("x:view;y:?int->tensor", see c_api.h), parsed once per Function:
// each parameter gets its argument converter then, so a call does no kind dispatch.
#pragma once
#include <Python.h>

#include <cstdint>
#include <string>
#include <vector>

#include "tensorplug/vocabulary.h"

namespace tensorplug::py {

// Parameter kinds, from the one list in tensorplug/vocabulary.h.
enum class Kind : uint8_t {
#define TP_X(id, name) k##id,
  TP_PARAM_KINDS(TP_X)
#undef TP_X
};

struct FunctionObject;
struct CallFrame;
struct Param;
// Converts argument i (`obj`) into frame.packed[i]; false with a Python error set. `param`
// is nullptr for a function without a signature. See arguments.h.
using ArgConverter = bool (*)(FunctionObject* f, CallFrame& frame, int i, PyObject* obj, const Param* param);

struct Param {
  Kind kind;
  bool optional;
  ArgConverter convert;  // chosen by ParseSignature from kind and optional
  std::string name;
  PyObject* default_value = nullptr;  // "alpha:float=1.0": owned by the Signature
  std::string default_text;           // "1.0", for messages
  std::string handle_type;            // "handle<mylib.Plan>": "mylib.Plan" ("" for "handle": untyped)
};

struct Signature {
  Signature() = default;
  Signature(const Signature&) = delete;
  Signature& operator=(const Signature&) = delete;
  ~Signature() {  // deleted with the GIL held (FunctionDealloc)
    for (Param& p : params) Py_XDECREF(p.default_value);
  }
  bool known = false;  // false: accept any arguments, tensors as views
  std::vector<Param> params;
  size_t required = 0;  // parameters before the first with a default
  std::string result;
  bool result_is_list = false;  // "->list", "->ints": the kernel's tuple is shown as a Python list
  std::string text;
};

// "x:view;y:?int->tensor"; returns false on a malformed string.
bool ParseSignature(const char* text, Signature* sig);

}  // namespace tensorplug::py
