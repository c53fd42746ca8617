// Shared by the runtime's translation units; not installed.
#pragma once
#define TENSORPLUG_RUNTIME_BUILD 1
#include "tensorplug/c_api.h"

#include <string>
#include <vector>

namespace tensorplug::runtime {
// ---- the thread's environment (env.cc) ----
// Initial-exec TLS: every call reads and restores it, and the general-dynamic model would
// cost a __tls_get_addr call per access. One struct of pointers, so that a function that
// reads or writes several of them finds it once (the stream table itself is on the heap);
// __thread, so that no C++ TLS wrapper runs on an access from another file.
#define TP_FAST_TLS __attribute__((tls_model("initial-exec")))
struct StreamTable;
struct ThreadEnv {
  StreamTable* streams;
  DLPackManagedTensorAllocator allocator;
  TPLentTensors* lent;
};
extern __thread ThreadEnv tls_env TP_FAST_TLS;

// Record an error from a C++ std::string message.
inline int Fail(const char* kind, const std::string& message) {
  TPErrorSet(kind, message.c_str());
  return -1;
}

// ---- provider storage (storage.cc) ----
// Destroy every stored value now; values stored later are destroyed at once. Exported from
// libtensorplug for the Python extension, which runs it from Python's atexit.
TP_EXPORT void StorageExitCleanup();

// ---- loading (module.cc) ----
// TPModuleLoadEx of `path`, with `name` standing for the library in errors and as its
// module's path (an embedded variant is loaded from /proc/self/fd/N, a name that means
// nothing to a user).
int LoadModuleNamed(const char* path, const std::string& name, uint32_t flags, TPModuleHandle* out);

// ---- the embedded library binary (library_bin.cc) ----
constexpr char kLibraryBinSymbol[] = "__tensorplug__library_bin";
// A module embedded in a host library, as loaded.
struct ImportedModule {
  TPFunctionHandle lookup;         // owned: lookup(name) -> function | None, lookup() -> names
  std::string kind;                // its `load_from_bytes.<kind>`
  uint32_t index;                  // its place in the blob (module 0 is the host)
  std::vector<std::string> names;  // what its listing returned at load
};
// Load the modules embedded in a just-opened host library (none: nothing happens), in
// lookup order; each module's listing is read once here, and a listing that fails or is
// not a tuple of names fails the load, naming the kind and the library.
int LoadLibraryBin(void* dl_handle, const std::string& path, std::vector<ImportedModule>* imports);
// The function `name` of the first import that lists it (*out NULL when none lists it);
// a lookup that fails, or finds nothing for a name its module lists, is an error naming
// the library, the module and its kind.
int LookupImported(const std::vector<ImportedModule>& imports, const std::string& path, const char* name,
                   TPFunctionHandle* out);
}  // namespace tensorplug::runtime
