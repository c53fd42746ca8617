// Parsing exported signatures.
#include "signature.h"

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

}  // namespace

bool ParseSignature(const char* text, Signature* sig) {
  sig->text = text;
  std::string s(text);
  size_t arrow = s.find("->");
  if (arrow == std::string::npos) return false;
  sig->result = s.substr(arrow + 2);
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
    p.optional = !kind.empty() && kind[0] == '?';
    if (p.optional) kind = kind.substr(1);
    if (!ParseKind(kind, &p.kind)) return false;
    p.convert = ConverterFor(p.kind, p.optional);
    sig->params.push_back(std::move(p));
    start = end + 1;
  }
  sig->known = true;
  return true;
}

}  // namespace tensorplug::py
