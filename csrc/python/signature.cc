// Parsing exported signatures.
#include "signature.h"

#include <cerrno>
#include <cstdlib>

#include "arguments.h"

namespace tensorplug::py {

namespace {

bool ParseKind(const std::string& s, Kind* kind) {
  static const std::pair<const char*, Kind> kKinds[] = {
#define TP_X(id, name) {name, Kind::k##id},
      TP_PARAM_KINDS(TP_X)
#undef TP_X
  };
  for (const auto& [name, k] : kKinds) {
    if (s == name) {
      *kind = k;
      return true;
    }
  }
  return false;
}

// "handle<mylib.Plan>" -> kind "handle", type "mylib.Plan" (TP_HANDLE_TYPE_NAME_CHARS, as
// TPHandleCreate checks); other kinds are left as they are. False when malformed.
bool ParseHandleType(std::string* kind, std::string* type) {
  const size_t open = kind->find('<');
  if (open == std::string::npos) return true;
  if (kind->compare(0, open, "handle") != 0 || kind->back() != '>' || open + 2 >= kind->size()) return false;
  *type = kind->substr(open + 1, kind->size() - open - 2);
  if (type->find_first_not_of(TP_HANDLE_TYPE_NAME_CHARS) != std::string::npos) return false;
  kind->resize(open);
  return true;
}

// A default's literal ("1.0", "3", "True", "'fast'", "None") as a Python object of a
// form the parameter's kind accepts; nullptr (no error set) when it is not one.
PyObject* ParseDefault(const std::string& text, const Param& p) {
  const bool any = p.kind == Kind::kAny;
  if (text == "None") return p.optional || any ? Py_NewRef(Py_None) : nullptr;
  if (text == "True" || text == "False") {
    return p.kind == Kind::kBool || any ? Py_NewRef(text == "True" ? Py_True : Py_False) : nullptr;
  }
  if (text.size() >= 2 && text.front() == '\'' && text.back() == '\'') {
    std::string inner = text.substr(1, text.size() - 2);
    if (inner.find('\'') != std::string::npos) return nullptr;
    if (p.kind != Kind::kStr && p.kind != Kind::kDevice && p.kind != Kind::kDType && !any) return nullptr;
    return PyUnicode_FromStringAndSize(inner.data(), Py_ssize_t(inner.size()));
  }
  if (text.empty()) return nullptr;
  char* end = nullptr;
  errno = 0;
  long long iv = std::strtoll(text.c_str(), &end, 10);
  if (*end == '\0' && errno == 0) {
    if (p.kind == Kind::kInt || any) return PyLong_FromLongLong(iv);
    if (p.kind == Kind::kFloat) return PyFloat_FromDouble(double(iv));
    return nullptr;
  }
  double fv = std::strtod(text.c_str(), &end);
  if (*end == '\0' && (p.kind == Kind::kFloat || any)) return PyFloat_FromDouble(fv);
  return nullptr;
}

}  // namespace

bool ParseSignature(const char* text, Signature* sig) {
  sig->text = text;
  std::string s(text);
  size_t arrow = s.find("->");
  if (arrow == std::string::npos) return false;
  sig->result = s.substr(arrow + 2);
  sig->result_is_list = sig->result == "list" || sig->result == "ints";
  std::string params = s.substr(0, arrow);
  size_t start = 0;
  while (start < params.size()) {
    size_t end = params.find(';', start);
    if (end == std::string::npos) end = params.size();
    std::string item = params.substr(start, end - start);
    size_t colon = item.find(':');
    if (colon == std::string::npos) return false;
    Param p;
    p.name = item.substr(0, colon);
    std::string kind = item.substr(colon + 1);
    size_t eq = kind.find('=');
    std::string default_text;
    if (eq != std::string::npos) {
      default_text = kind.substr(eq + 1);
      kind = kind.substr(0, eq);
    }
    p.optional = !kind.empty() && kind[0] == '?';
    if (p.optional) kind = kind.substr(1);
    if (!ParseHandleType(&kind, &p.handle_type)) return false;
    if (!ParseKind(kind, &p.kind)) return false;
    p.convert = ConverterFor(p.kind, p.optional);
    if (eq != std::string::npos) {
      p.default_value = ParseDefault(default_text, p);
      if (!p.default_value) {
        PyErr_Clear();
        return false;
      }
      p.default_text = default_text;
    } else if (sig->required != sig->params.size()) {
      return false;  // a parameter without a default after one with a default
    }
    if (!p.default_value) sig->required = sig->params.size() + 1;
    sig->params.push_back(std::move(p));
    start = end + 1;
  }
  sig->known = true;
  return true;
}

}  // namespace tensorplug::py
