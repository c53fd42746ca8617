// Shared by the runtime's translation units; not installed.
#pragma once
#define TENSORPLUG_RUNTIME_BUILD 1
#include "tensorplug/c_api.h"

#include <string>

namespace tensorplug::runtime {
// Record an error from a C++ std::string message.
inline int Fail(const char* kind, const std::string& message) {
  TPErrorSet(kind, message.c_str());
  return -1;
}
}  // namespace tensorplug::runtime
