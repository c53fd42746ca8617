// An exported signature ("x:view;y:?int->tensor", see c_api.h), parsed once per Function.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace tensorplug::py {

enum class Kind : uint8_t { kAny, kView, kTensor, kInt, kFloat, kBool, kStr, kDevice, kDType, kFunc };

struct Param {
  Kind kind;
  bool optional;
  std::string name;
};

struct Signature {
  bool known = false;  // false: accept any arguments, tensors as views
  std::vector<Param> params;
  std::string result;
  std::string text;
};

// "x:view;y:?int->tensor"; returns false on a malformed string.
bool ParseSignature(const char* text, Signature* sig);
// What a parameter of this kind expects, for error messages ("an int").
const char* KindName(Kind kind);

}  // namespace tensorplug::py
