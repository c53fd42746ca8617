// Shared by the runtime's translation units; not installed.
#pragma once
#define TENSORPLUG_RUNTIME_BUILD 1
#include "tensorplug/c_api.h"

#include <string>
#include <vector>

namespace tensorplug::runtime {
// Record an error from a C++ std::string message.
inline int Fail(const char* kind, const std::string& message) {
  TPErrorSet(kind, message.c_str());
  return -1;
}

// ---- the embedded library binary (library_bin.cc) ----
constexpr char kLibraryBinSymbol[] = "__tensorplug__library_bin";
// Load the modules embedded in a just-opened host library (none: nothing happens); their
// lookup functions are appended to *imports in lookup order (new references).
int LoadLibraryBin(void* dl_handle, const std::string& path, std::vector<TPFunctionHandle>* imports);
// The first imported function named `name` (*out NULL when none has it).
int LookupImported(const std::vector<TPFunctionHandle>& imports, const char* name, TPFunctionHandle* out);
// Append the names every import lists.
int ListImported(const std::vector<TPFunctionHandle>& imports, std::vector<std::string>* names);
}  // namespace tensorplug::runtime
