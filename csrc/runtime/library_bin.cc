// The embedded library binary (`__tensorplug__library_bin`, layout in docs/cpp.md) and
// the module kinds libtensorplug provides: `shared_library` (a kernel library loaded from
// memory, one variant per CPU ISA), `ptx` and `cubin` (CUDA kernels, loaded with the driver
// API).
// A kind is a global function `load_from_bytes.<kind>(data, size, host_path)` returning a
// lookup function: lookup(name) -> function or None, lookup() -> tuple of names.
//
// One idea past 500 lines: the container and the payloads of the kinds it ships are one
// format (docs/cpp.md, "Embedded modules"), read with one bounds-checked Reader and
// refused with errors that name the library; nothing outside this file reads any of it.
#include <dlfcn.h>
#include <link.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <new>
#include <string>
#include <vector>

#include "cuda_driver.h"
#include "runtime_internal.h"
#include "tensorplug/caster.h"

using tensorplug::runtime::Fail;

namespace tensorplug::runtime {
namespace {

constexpr char kMagic[8] = {'T', 'P', 'L', 'I', 'B', 'B', 'I', 'N'};
constexpr uint32_t kFormatVersion = 1;
constexpr char kHostKind[] = "_lib";

// Bounds-checked little-endian reader of the blob.
struct Reader {
  const unsigned char* data;
  uint64_t size;
  uint64_t pos = 0;
  template <class T>
  bool Read(T* out) {
    if (size - pos < sizeof(T)) return false;
    std::memcpy(out, data + pos, sizeof(T));
    pos += sizeof(T);
    return true;
  }
  bool Bytes(uint64_t n, const unsigned char** out) {
    if (size - pos < n) return false;
    *out = data + pos;
    pos += n;
    return true;
  }
};

struct BlobModule {
  std::string kind;
  const unsigned char* payload;
  uint64_t size;
  std::vector<uint32_t> children;
};

int Malformed(const std::string& path, const std::string& why) {
  return Fail("ValueError", "kernel library '" + path + "' has a malformed __tensorplug__library_bin: " + why);
}

int ParseBlob(const unsigned char* data, uint64_t symbol_size, const std::string& path,
              std::vector<BlobModule>* modules) {
  Reader r{data, symbol_size};
  const unsigned char* magic;
  uint32_t version = 0, count = 0;
  uint64_t total = 0;
  if (!r.Bytes(8, &magic) || std::memcmp(magic, kMagic, 8) != 0) return Malformed(path, "bad magic (expected TPLIBBIN)");
  if (!r.Read(&version) || !r.Read(&count) || !r.Read(&total)) return Malformed(path, "truncated header");
  if (version != kFormatVersion) {
    return Malformed(path, "format version " + std::to_string(version) + ", this runtime reads version " +
                               std::to_string(kFormatVersion));
  }
  if (total > symbol_size) {
    return Malformed(path, "it claims " + std::to_string(total) + " bytes, the symbol has " + std::to_string(symbol_size));
  }
  r.size = total;
  if (count == 0 || count > (1u << 20)) return Malformed(path, "module count " + std::to_string(count));
  modules->resize(count);
  for (uint32_t i = 0; i < count; ++i) {
    uint32_t kind_len = 0;
    const unsigned char* kind;
    BlobModule& m = (*modules)[i];
    if (!r.Read(&kind_len) || !r.Bytes(kind_len, &kind) || !r.Read(&m.size) || !r.Bytes(m.size, &m.payload)) {
      return Malformed(path, "module " + std::to_string(i) + " is truncated");
    }
    m.kind.assign(reinterpret_cast<const char*>(kind), kind_len);
  }
  if ((*modules)[0].kind != kHostKind) return Malformed(path, "module 0 must be the host library (kind '_lib')");
  std::vector<int> parents(count, -1);
  for (uint32_t i = 0; i < count; ++i) {
    uint32_t n = 0;
    if (!r.Read(&n) || n > count) return Malformed(path, "the import tree is truncated");
    for (uint32_t k = 0; k < n; ++k) {
      uint32_t child = 0;
      if (!r.Read(&child)) return Malformed(path, "the import tree is truncated");
      if (child == 0 || child >= count || parents[child] != -1) {
        return Malformed(path, "the import tree is not a tree rooted at module 0 (module " + std::to_string(i) +
                                   " imports " + std::to_string(child) + ")");
      }
      parents[child] = int(i);
      (*modules)[i].children.push_back(child);
    }
  }
  for (uint32_t i = 1; i < count; ++i) {
    if (parents[i] == -1) return Malformed(path, "module " + std::to_string(i) + " is imported by no module");
    if ((*modules)[i].kind == kHostKind) return Malformed(path, "only module 0 may be of kind '_lib'");
  }
  // A child imported by a parent that is itself unreachable forms a cycle: walk up from each.
  for (uint32_t i = 1; i < count; ++i) {
    uint32_t steps = 0;
    for (int p = parents[i]; p != 0; p = parents[p]) {
      if (p == -1 || ++steps > count) return Malformed(path, "the import tree has a cycle");
    }
  }
  return 0;
}

// Depth-first, in import order: the order in which the host looks functions up.
void Preorder(const std::vector<BlobModule>& modules, uint32_t index, std::vector<uint32_t>* order) {
  if (index != 0) order->push_back(index);
  for (uint32_t child : modules[index].children) Preorder(modules, child, order);
}

}  // namespace

namespace {

// "kernel library '<path>': its embedded module <i> (kind '<kind>')", the start of errors.
std::string ModuleName(const std::string& path, const ImportedModule& m) {
  return "kernel library '" + path + "': its embedded module " + std::to_string(m.index) + " (kind '" + m.kind +
         "')";
}

// Fail with the pending error's kind and message, prefixed by `context`.
int FailWithPending(const std::string& context) {
  const char* kind = "RuntimeError";
  const char* message = "failed";
  TPErrorGet(&kind, &message);
  const std::string k = kind ? kind : "RuntimeError";
  return Fail(k.c_str(), context + ": " + (message ? message : "failed"));
}

// Read the module's listing, lookup() -> tuple of str, into m->names.
int ReadListing(const std::string& path, ImportedModule* m) {
  TPAny result;
  if (TPFunctionCall(m->lookup, nullptr, 0, &result) != 0) {
    return FailWithPending(ModuleName(path, *m) + ": its listing lookup() failed");
  }
  if (result.type_index != kTPTuple) {
    const std::string got = tensorplug::detail::TypeIndexName(result);
    TPAnyRelease(&result);
    return Fail("TypeError", ModuleName(path, *m) + ": its listing lookup() returned " + got +
                                 ", expected a tuple of str");
  }
  int rc = 0;
  for (int32_t i = 0; i < result.v_tuple->size && rc == 0; ++i) {
    const TPAny& item = result.v_tuple->items[i];
    if (item.type_index == kTPStr) {
      m->names.emplace_back(item.v_str->data, item.v_str->size);
    } else if (item.type_index == kTPRawStr) {
      m->names.emplace_back(item.v_c_str);
    } else {
      rc = Fail("TypeError", ModuleName(path, *m) + ": its listing lookup() returned a tuple whose item " +
                                 std::to_string(i) + " is " + tensorplug::detail::TypeIndexName(item) +
                                 ", expected str");
    }
  }
  TPAnyRelease(&result);
  return rc;
}

}  // namespace

int LoadLibraryBin(void* dl_handle, const std::string& path, std::vector<ImportedModule>* imports) {
  void* symbol = dlsym(dl_handle, kLibraryBinSymbol);
  if (!symbol) return 0;
  Dl_info info;
  ElfW(Sym)* sym = nullptr;
  if (dladdr1(symbol, &info, reinterpret_cast<void**>(&sym), RTLD_DL_SYMENT) == 0 || !sym) {
    return Malformed(path, "its size cannot be read");
  }
  std::vector<BlobModule> modules;
  if (ParseBlob(static_cast<const unsigned char*>(symbol), sym->st_size, path, &modules) != 0) return -1;
  std::vector<uint32_t> order;
  Preorder(modules, 0, &order);
  for (uint32_t index : order) {
    const BlobModule& m = modules[index];
    const std::string loader_name = "load_from_bytes." + m.kind;
    TPFunctionHandle loader = nullptr;
    TPGlobalFuncGet(loader_name.c_str(), &loader);
    if (!loader) {
      return Fail("ValueError", "kernel library '" + path + "' embeds a module of kind '" + m.kind +
                                    "', and no runtime registered the global function '" + loader_name +
                                    "' that loads it (load that runtime first, e.g. with tensorplug.load_library)");
    }
    TPAny args[3];
    args[0].type_index = kTPOpaquePtr;
    args[0].flags = 0;
    args[0].v_ptr = const_cast<unsigned char*>(m.payload);
    args[1].type_index = kTPInt;
    args[1].flags = 0;
    args[1].v_int64 = int64_t(m.size);
    args[2].type_index = kTPRawStr;
    args[2].flags = 0;
    args[2].v_c_str = path.c_str();
    TPAny result;
    int rc = TPFunctionCall(loader, args, 3, &result);
    TPFunctionRelease(loader);
    if (rc != 0) {
      return FailWithPending("kernel library '" + path + "': loading its embedded module " + std::to_string(index) +
                             " (kind '" + m.kind + "') failed");
    }
    if (result.type_index != kTPFunction) {
      TPAnyRelease(&result);
      return Fail("TypeError", "kernel library '" + path + "': " + loader_name +
                                   " returned no function (a module kind's loader returns its lookup function)");
    }
    imports->push_back(ImportedModule{result.v_func, m.kind, index, {}});
    if (ReadListing(path, &imports->back()) != 0) return -1;
  }
  return 0;
}

int LookupImported(const std::vector<ImportedModule>& imports, const std::string& path, const char* name,
                   TPFunctionHandle* out) {
  *out = nullptr;
  // Only the module that lists the name is asked: another module's lookup may refuse names
  // it does not own (raise, not return None), which must not fail the host.
  for (const ImportedModule& m : imports) {
    if (std::find(m.names.begin(), m.names.end(), name) == m.names.end()) continue;
    TPAny arg;
    arg.type_index = kTPRawStr;
    arg.flags = 0;
    arg.v_c_str = name;
    TPAny result;
    if (TPFunctionCall(m.lookup, &arg, 1, &result) != 0) {
      return FailWithPending(ModuleName(path, m) + ": looking up its function '" + name + "' failed");
    }
    if (result.type_index == kTPFunction) {
      *out = result.v_func;
      return 0;
    }
    TPAnyRelease(&result);
    return Fail("ValueError", ModuleName(path, m) + " lists the function '" + name +
                                  "', and its lookup returns no function for that name");
  }
  return 0;
}

}  // namespace tensorplug::runtime

// ------------------------------------------------------------ module kinds ----
namespace {


// Arguments of a `load_from_bytes.<kind>` call: (data, size, host_path).
bool LoaderArgs(const char* kind, const TPAny* args, int32_t nargs, const unsigned char** data, uint64_t* size,
                std::string* host) {
  if (nargs != 3 || args[0].type_index != kTPOpaquePtr || args[1].type_index != kTPInt || args[1].v_int64 < 0 ||
      (args[2].type_index != kTPRawStr && args[2].type_index != kTPStr)) {
    Fail("TypeError", std::string("load_from_bytes.") + kind + "(data, size, host_path): expected an opaque pointer, "
                          "a size and a str");
    return false;
  }
  *data = static_cast<const unsigned char*>(args[0].v_ptr);
  *size = uint64_t(args[1].v_int64);
  *host = args[2].type_index == kTPRawStr ? args[2].v_c_str : args[2].v_str->data;
  return true;
}

// ---- shared_library: payload = u32 count, then per variant u32 len, ISA name, u64 size, ELF bytes ----
// An ISA name is "generic" or CPU features joined by '+' ("avx512f+avx512bw", "avx2+fma").
bool CPUHas(const std::string& feature) {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_cpu_init();
#define TP_FEATURE(name) \
  if (feature == name) return __builtin_cpu_supports(name);
  TP_FEATURE("sse4.2") TP_FEATURE("avx") TP_FEATURE("avx2") TP_FEATURE("fma") TP_FEATURE("bmi2")
  TP_FEATURE("avx512f") TP_FEATURE("avx512bw") TP_FEATURE("avx512vl") TP_FEATURE("avx512dq") TP_FEATURE("avx512cd")
  TP_FEATURE("avx512vnni") TP_FEATURE("avx512bf16") TP_FEATURE("avx512fp16")
#undef TP_FEATURE
#endif
  (void)feature;
  return false;
}

bool KnownFeature(const std::string& f) {
  for (const char* k : {"sse4.2", "avx", "avx2", "fma", "bmi2", "avx512f", "avx512bw", "avx512vl", "avx512dq",
                        "avx512cd", "avx512vnni", "avx512bf16", "avx512fp16"}) {
    if (f == k) return true;
  }
  return false;
}

// 1: this CPU runs the variant; 0: it does not; -1: the name is not an ISA (error set).
int CPURuns(const std::string& isa) {
  if (isa == "generic") return 1;
  size_t start = 0;
  bool all = true;
  while (start <= isa.size()) {
    size_t end = isa.find('+', start);
    if (end == std::string::npos) end = isa.size();
    const std::string feature = isa.substr(start, end - start);
    if (!KnownFeature(feature)) {
      Fail("ValueError", "unknown CPU feature '" + feature + "' in ISA variant '" + isa +
                             "' (known: generic, or sse4.2, avx, avx2, fma, bmi2, avx512f, avx512bw, avx512vl, "
                             "avx512dq, avx512cd, avx512vnni, avx512bf16, avx512fp16 joined by '+')");
      return -1;
    }
    all = all && CPUHas(feature);
    start = end + 1;
  }
  return all ? 1 : 0;
}

// A lookup over a TPModuleHandle (the embedded library, loaded once per payload).
int ModuleLookupCall(void* self, const TPAny* args, int32_t nargs, TPAny* result) {
  auto module = static_cast<TPModuleHandle>(self);
  if (nargs == 0) {
    std::vector<std::string> names;
    if (TPModuleListFunctions(
            module, [](void* ctx, const char* n) { static_cast<std::vector<std::string>*>(ctx)->push_back(n); },
            &names) != 0) {
      return -1;
    }
    TPTuple* tuple = TPTupleCreate(int32_t(names.size()));
    if (!tuple) return Fail("MemoryError", "out of memory");
    for (size_t i = 0; i < names.size(); ++i) {
      tuple->items[i].type_index = kTPStr;
      tuple->items[i].v_str = TPStringCreate(names[i].data(), names[i].size());
    }
    result->type_index = kTPTuple;
    result->v_tuple = tuple;
    return 0;
  }
  if (nargs != 1 || (args[0].type_index != kTPRawStr && args[0].type_index != kTPStr)) {
    return Fail("TypeError", "a module lookup takes a function name (str), or nothing to list the names");
  }
  const char* name = args[0].type_index == kTPRawStr ? args[0].v_c_str : args[0].v_str->data;
  TPFunctionHandle func = nullptr;
  if (TPModuleGetFunction(module, name, &func) != 0) return -1;
  if (func) {
    result->type_index = kTPFunction;
    result->v_func = func;
  }
  return 0;
}

int LoadSharedLibrary(void*, const TPAny* args, int32_t nargs, TPAny* result) {
  const unsigned char* data;
  uint64_t size;
  std::string host;
  if (!LoaderArgs("shared_library", args, nargs, &data, &size, &host)) return -1;
  // One load per payload: a host loaded twice shares its embedded library (the host is
  // never unmapped, so the payload's address identifies it).
  static std::mutex mutex;
  static auto* loaded = new std::map<const unsigned char*, TPModuleHandle>;
  std::lock_guard<std::mutex> lock(mutex);
  TPModuleHandle module = nullptr;
  auto it = loaded->find(data);
  if (it != loaded->end()) {
    module = it->second;
  } else {
    tensorplug::runtime::Reader r{data, size};
    uint32_t count = 0;
    if (!r.Read(&count) || count == 0) return Fail("ValueError", "shared_library payload: no variant");
    const char* forced = std::getenv("TENSORPLUG_CPU_VARIANT");
    std::vector<std::string> seen;
    const unsigned char* chosen = nullptr;
    uint64_t chosen_size = 0;
    std::string chosen_isa;
    for (uint32_t i = 0; i < count; ++i) {
      uint32_t len = 0;
      const unsigned char *isa_bytes, *elf;
      uint64_t elf_size = 0;
      if (!r.Read(&len) || !r.Bytes(len, &isa_bytes) || !r.Read(&elf_size) || !r.Bytes(elf_size, &elf)) {
        return Fail("ValueError", "shared_library payload: variant " + std::to_string(i) + " is truncated");
      }
      std::string isa(reinterpret_cast<const char*>(isa_bytes), len);
      seen.push_back(isa);
      int runs = CPURuns(isa);
      if (runs < 0) return -1;
      const bool pick = forced && *forced ? isa == forced : runs == 1;
      if (pick && !chosen) {
        chosen = elf;
        chosen_size = elf_size;
        chosen_isa = isa;
      }
    }
    if (!chosen) {
      std::string list;
      for (const auto& s : seen) list += (list.empty() ? "" : ", ") + s;
      if (forced && *forced) {
        return Fail("ValueError", std::string("TENSORPLUG_CPU_VARIANT=") + forced + " names no variant (it has: " +
                                      list + ")");
      }
      return Fail("RuntimeError", "this CPU runs none of the variants (" + list + "); add a 'generic' one");
    }
    // The library is loaded from memory: an anonymous file (memfd) that dlopen reads
    // through /proc/self/fd, so nothing is written to disk.
    const std::string base = host.substr(host.rfind('/') + 1);
    int fd = memfd_create(("tensorplug:" + base + ":" + chosen_isa).c_str(), MFD_CLOEXEC);
    if (fd < 0) return Fail("RuntimeError", std::string("memfd_create failed: ") + std::strerror(errno));
    uint64_t written = 0;
    while (written < chosen_size) {
      ssize_t n = write(fd, chosen + written, chosen_size - written);
      if (n <= 0) {
        close(fd);
        return Fail("RuntimeError", std::string("writing the embedded library failed: ") + std::strerror(errno));
      }
      written += uint64_t(n);
    }
    // The descriptor stays open: dlopen knows a library by its path, and a closed
    // descriptor's number (so its /proc/self/fd path) would be reused by the next one.
    const std::string fd_path = "/proc/self/fd/" + std::to_string(fd);
    // Errors name the host and the variant, not the descriptor's path.
    const std::string name = host + " (embedded variant '" + chosen_isa + "')";
    if (tensorplug::runtime::LoadModuleNamed(fd_path.c_str(), name, TP_MODULE_LOAD_RUNTIME, &module) != 0) {
      close(fd);
      return -1;
    }
    loaded->emplace(data, module);
  }
  TPFunctionHandle lookup = nullptr;
  if (TPFunctionCreate(module, ModuleLookupCall, nullptr, nullptr, &lookup) != 0) return -1;
  result->type_index = kTPFunction;
  result->v_func = lookup;
  return 0;
}

// ---- ptx: payload = PTX text. Kernels are listed from the text (`.entry name`), so the
// host loads on any machine; the CUDA module is loaded on a device at its first launch.
struct PTXModule {
  std::string text;
  std::vector<std::string> kernels;
  std::mutex mutex;
  std::map<int32_t, tensorplug::runtime::CUmodule> loaded;  // device id -> module
};
struct PTXKernel {
  PTXModule* module;  // never freed: kernels may outlive their host's Module object
  std::string name;
};

std::vector<std::string> PTXEntries(const std::string& text) {
  std::vector<std::string> names;
  size_t pos = 0;
  while ((pos = text.find(".entry", pos)) != std::string::npos) {
    pos += 6;
    if (pos < text.size() && text[pos] != ' ' && text[pos] != '\t') continue;
    while (pos < text.size() && (text[pos] == ' ' || text[pos] == '\t')) ++pos;
    size_t end = pos;
    while (end < text.size() && (isalnum(static_cast<unsigned char>(text[end])) || text[end] == '_' || text[end] == '$')) ++end;
    if (end > pos) names.push_back(text.substr(pos, end - pos));
    pos = end;
  }
  return names;
}

// kernel(grid_x, grid_y, grid_z, block_x, block_y, block_z, shared_mem_bytes, *args):
// tensors pass their device pointer, ints as 64-bit integers, floats as 32-bit floats.
int LaunchPTX(void* self, const TPAny* args, int32_t nargs, TPAny*) {
  using namespace tensorplug::runtime;
  auto* kernel = static_cast<PTXKernel*>(self);
  const std::string where = kernel->name + "()";
  if (nargs < 7) {
    return Fail("TypeError", where + " takes grid_x, grid_y, grid_z, block_x, block_y, block_z, shared_mem_bytes and "
                                     "the kernel's arguments; got " + std::to_string(nargs) + " arguments");
  }
  unsigned dims[7];
  for (int i = 0; i < 7; ++i) {
    if (args[i].type_index != kTPInt || args[i].v_int64 < 0 || args[i].v_int64 > 0xffffffffll) {
      return Fail("TypeError", where + " argument " + std::to_string(i + 1) + ": expected a launch dimension (int)");
    }
    dims[i] = unsigned(args[i].v_int64);
  }
  int32_t device_id = -1;
  std::vector<uint64_t> slots(size_t(nargs - 7));
  std::vector<void*> params(size_t(nargs - 7));
  for (int32_t i = 7; i < nargs; ++i) {
    const TPAny& a = args[i];
    uint64_t& slot = slots[size_t(i - 7)];
    if (a.type_index == kTPDLTensorPtr || a.type_index == kTPTensor) {
      const DLTensor& t = a.type_index == kTPTensor ? a.v_tensor->dl_tensor : *a.v_dltensor;
      if (t.device.device_type != kDLCUDA || (device_id != -1 && t.device.device_id != device_id)) {
        return Fail("ValueError", where + " argument " + std::to_string(i + 1) +
                                      ": expected a tensor on the launch's CUDA device");
      }
      device_id = t.device.device_id;
      slot = reinterpret_cast<uint64_t>(static_cast<char*>(t.data) + t.byte_offset);
    } else if (a.type_index == kTPInt || a.type_index == kTPBool) {
      std::memcpy(&slot, &a.v_int64, 8);
    } else if (a.type_index == kTPFloat) {
      float f = float(a.v_float64);
      slot = 0;
      std::memcpy(&slot, &f, sizeof f);
    } else {
      return Fail("TypeError", where + " argument " + std::to_string(i + 1) + ": expected a tensor, an int or a float");
    }
    params[size_t(i - 7)] = &slot;
  }
  if (device_id < 0) device_id = 0;
  std::string error;
  const CudaDriver* driver = GetCudaDriver(&error);
  if (!driver) return Fail("RuntimeError", where + ": " + error);
  CudaContextScope scope(driver, device_id, &error);
  if (!scope.ok()) return Fail("RuntimeError", where + ": " + error);
  CUmodule cu_module = nullptr;
  {
    std::lock_guard<std::mutex> lock(kernel->module->mutex);
    auto it = kernel->module->loaded.find(device_id);
    if (it != kernel->module->loaded.end()) {
      cu_module = it->second;
    } else {
      CUresult rc = driver->cuModuleLoadData(&cu_module, kernel->module->text.c_str());
      if (rc != 0) return Fail("RuntimeError", where + ": " + CudaErrorText(driver, "cuModuleLoadData", rc));
      kernel->module->loaded.emplace(device_id, cu_module);
    }
  }
  CUfunction function = nullptr;
  CUresult rc = driver->cuModuleGetFunction(&function, cu_module, kernel->name.c_str());
  if (rc != 0) return Fail("RuntimeError", where + ": " + CudaErrorText(driver, "cuModuleGetFunction", rc));
  auto stream = static_cast<CUstream>(TPEnvGetStream(kDLCUDA, device_id));
  rc = driver->cuLaunchKernel(function, dims[0], dims[1], dims[2], dims[3], dims[4], dims[5], dims[6], stream,
                              params.empty() ? nullptr : params.data(), nullptr);
  if (rc != 0) return Fail("RuntimeError", where + ": " + CudaErrorText(driver, "cuLaunchKernel", rc));
  return 0;
}

int PTXLookupCall(void* self, const TPAny* args, int32_t nargs, TPAny* result) {
  auto* module = static_cast<PTXModule*>(self);
  if (nargs == 0) {
    TPTuple* tuple = TPTupleCreate(int32_t(module->kernels.size()));
    if (!tuple) return Fail("MemoryError", "out of memory");
    for (size_t i = 0; i < module->kernels.size(); ++i) {
      tuple->items[i].type_index = kTPStr;
      tuple->items[i].v_str = TPStringCreate(module->kernels[i].data(), module->kernels[i].size());
    }
    result->type_index = kTPTuple;
    result->v_tuple = tuple;
    return 0;
  }
  if (nargs != 1 || (args[0].type_index != kTPRawStr && args[0].type_index != kTPStr)) {
    return Fail("TypeError", "a module lookup takes a function name (str), or nothing to list the names");
  }
  const std::string name = args[0].type_index == kTPRawStr ? args[0].v_c_str : args[0].v_str->data;
  for (const std::string& k : module->kernels) {
    if (k != name) continue;
    auto* kernel = new (std::nothrow) PTXKernel{module, name};
    if (!kernel) return Fail("MemoryError", "out of memory");
    TPFunctionHandle f = nullptr;
    if (TPFunctionCreate(kernel, LaunchPTX, [](void* p) { delete static_cast<PTXKernel*>(p); }, nullptr, &f) != 0) {
      delete kernel;
      return -1;
    }
    result->type_index = kTPFunction;
    result->v_func = f;
    return 0;
  }
  return 0;
}

// The lookup function of a module of CUDA kernels: `image` for cuModuleLoadData (PTX text
// with its NUL, or a cubin), `kernels` its entry names.
int CudaModuleLookup(const unsigned char* image, uint64_t size, std::vector<std::string> kernels, TPAny* result) {
  auto* module = new (std::nothrow) PTXModule;  // leaked: see PTXKernel
  if (!module) return Fail("MemoryError", "out of memory");
  module->text.assign(reinterpret_cast<const char*>(image), size);
  module->kernels = std::move(kernels);
  TPFunctionHandle lookup = nullptr;
  if (TPFunctionCreate(module, PTXLookupCall, nullptr, nullptr, &lookup) != 0) return -1;
  result->type_index = kTPFunction;
  result->v_func = lookup;
  return 0;
}

int LoadPTX(void*, const TPAny* args, int32_t nargs, TPAny* result) {
  const unsigned char* data;
  uint64_t size;
  std::string host;
  if (!LoaderArgs("ptx", args, nargs, &data, &size, &host)) return -1;
  std::vector<std::string> kernels = PTXEntries(std::string(reinterpret_cast<const char*>(data), size));
  if (kernels.empty()) return Fail("ValueError", "ptx payload: no kernel (.entry) in the PTX text");
  return CudaModuleLookup(data, size, std::move(kernels), result);  // the text keeps its NUL
}

// ---- cubin: payload = a CUDA ELF image (nvcc -cubin). Kernels are the symbols of type
// FUNC marked as entries (st_other bit STO_CUDA_ENTRY, 0x10), read from the ELF symbol
// table with bounds checks, so the host loads on any machine; the launch is ptx's
// (cuModuleLoadData takes a cubin image as it takes PTX text).
constexpr uint16_t kEMCuda = 190;           // e_machine of NVIDIA's ELF images
constexpr uint32_t kSHTSymtab = 2;          // sh_type of the symbol table
constexpr unsigned char kSTTFunc = 2;       // symbol type FUNC (low 4 bits of st_info)
constexpr unsigned char kSTOCudaEntry = 0x10;  // st_other: a __global__ function

// Fills `names` with the entry kernels of the ELF64 image, or returns why it is no cubin.
std::string CubinEntries(const unsigned char* data, uint64_t size, std::vector<std::string>* names) {
  using tensorplug::runtime::Reader;
  Reader r{data, size};
  const unsigned char* ident;
  if (!r.Bytes(16, &ident) || std::memcmp(ident, "\x7f" "ELF", 4) != 0) return "not an ELF image";
  if (ident[4] != 2 || ident[5] != 1) return "not a 64-bit little-endian ELF image";
  uint16_t type, machine, ehsize, phentsize, phnum, shentsize, shnum;
  uint32_t version, flags;
  uint64_t entry, phoff, shoff;
  if (!(r.Read(&type) && r.Read(&machine) && r.Read(&version) && r.Read(&entry) && r.Read(&phoff) &&
        r.Read(&shoff) && r.Read(&flags) && r.Read(&ehsize) && r.Read(&phentsize) && r.Read(&phnum) &&
        r.Read(&shentsize) && r.Read(&shnum))) {
    return "truncated ELF header";
  }
  if (machine != kEMCuda) return "ELF machine " + std::to_string(machine) + ", not CUDA (190)";
  if (shentsize != 64 || shoff > size || uint64_t(shnum) * 64 > size - shoff) return "section table out of bounds";
  auto section = [&](uint32_t index, uint32_t* sh_type, uint32_t* link, uint64_t* offset, uint64_t* length) {
    Reader s{data, size, shoff + uint64_t(index) * 64};
    uint32_t name;
    uint64_t sh_flags, addr;
    return s.Read(&name) && s.Read(sh_type) && s.Read(&sh_flags) && s.Read(&addr) && s.Read(offset) &&
           s.Read(length) && s.Read(link) && *offset <= size && *length <= size - *offset;
  };
  for (uint32_t i = 0; i < shnum; ++i) {
    uint32_t sh_type, link, strtab_type, strtab_link;
    uint64_t offset, length, str_offset, str_length;
    if (!section(i, &sh_type, &link, &offset, &length)) return "section " + std::to_string(i) + " out of bounds";
    if (sh_type != kSHTSymtab) continue;
    if (link >= shnum || !section(link, &strtab_type, &strtab_link, &str_offset, &str_length)) {
      return "symbol names out of bounds";
    }
    for (uint64_t at = 0; at + 24 <= length; at += 24) {  // Elf64_Sym: 24 bytes
      Reader sym{data + offset + at, 24};
      uint32_t name;
      unsigned char info, other;
      if (!(sym.Read(&name) && sym.Read(&info) && sym.Read(&other))) return "truncated symbol";
      if ((info & 0xf) != kSTTFunc || !(other & kSTOCudaEntry)) continue;
      if (name >= str_length) return "a symbol name out of bounds";
      const char* text = reinterpret_cast<const char*>(data + str_offset + name);
      const size_t n = strnlen(text, size_t(str_length - name));
      if (n == 0 || n == str_length - name) return "a symbol name out of bounds";
      names->emplace_back(text, n);
    }
  }
  return names->empty() ? "no kernel (no FUNC symbol marked as an entry)" : "";
}

int LoadCubin(void*, const TPAny* args, int32_t nargs, TPAny* result) {
  const unsigned char* data;
  uint64_t size;
  std::string host;
  if (!LoaderArgs("cubin", args, nargs, &data, &size, &host)) return -1;
  std::vector<std::string> kernels;
  const std::string problem = CubinEntries(data, size, &kernels);
  if (!problem.empty()) return Fail("ValueError", "cubin payload: " + problem);
  return CudaModuleLookup(data, size, std::move(kernels), result);
}

// The built-in kinds, registered like any runtime's kinds.
void RegisterKind(const char* name, TPPackedFunc loader) {
  TPFunctionHandle f = nullptr;
  if (TPFunctionCreate(nullptr, loader, nullptr, "data:any;size:int;host_path:str->func", &f) != 0) return;
  TPGlobalFuncRegister(name, f, 1);
  TPFunctionRelease(f);
}
const bool g_registered = (RegisterKind("load_from_bytes.shared_library", LoadSharedLibrary),
                           RegisterKind("load_from_bytes.ptx", LoadPTX),
                           RegisterKind("load_from_bytes.cubin", LoadCubin), true);

}  // namespace
