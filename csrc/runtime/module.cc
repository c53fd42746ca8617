// Loading kernel libraries: read the library's dynamic symbol table (ELF) for its
// `__tensorplug_<name>` functions (plain-C libraries need no registry) and its ABI record,
// refuse a library built for another ABI, then dlopen; then load the modules it embeds
// (library_bin.cc).
#include <dlfcn.h>
#include <elf.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <map>
#include <memory>
#include <mutex>
#include <new>
#include <string>
#include <vector>

#include "runtime_internal.h"

using tensorplug::runtime::Fail;

namespace {

constexpr char kFuncPrefix[] = "__tensorplug_";
constexpr char kSigPrefix[] = "__tensorplugsig_";
constexpr char kABISymbol[] = "__tensorplugabi_version";  // defined by c_api.h
// Libraries without an ABI record predate it, and the record was introduced with ABI 1.
constexpr int32_t kABIWithoutRecord = 1;

// What the loader reads from the file before dlopen, so that no code of a library runs
// unless it exports functions and was built for this runtime's ABI.
struct ElfExports {
  std::vector<std::string> function_names;  // `__tensorplug_<name>` functions, prefix removed
  bool has_abi_record = false;
  bool has_library_bin = false;  // embeds modules (__tensorplug__library_bin)
  int32_t abi_version = kABIWithoutRecord;
};

bool ReadElfExports(const std::string& path, ElfExports* out, std::string* error) {
  std::ifstream file(path, std::ios::binary);
  std::vector<char> bytes((std::istreambuf_iterator<char>(file)), std::istreambuf_iterator<char>());
  if (bytes.size() < sizeof(Elf64_Ehdr) || std::memcmp(bytes.data(), ELFMAG, SELFMAG) != 0 ||
      bytes[EI_CLASS] != ELFCLASS64) {
    *error = "not a 64-bit ELF shared library";
    return false;
  }
  auto in_bounds = [&](uint64_t off, uint64_t len) { return off <= bytes.size() && len <= bytes.size() - off; };
  const auto* eh = reinterpret_cast<const Elf64_Ehdr*>(bytes.data());
  if (eh->e_shentsize != sizeof(Elf64_Shdr) || !in_bounds(eh->e_shoff, uint64_t(eh->e_shnum) * sizeof(Elf64_Shdr))) {
    *error = "malformed ELF section table";
    return false;
  }
  const auto* sections = reinterpret_cast<const Elf64_Shdr*>(bytes.data() + eh->e_shoff);
  for (int i = 0; i < eh->e_shnum; ++i) {
    if (sections[i].sh_type != SHT_DYNSYM) continue;
    const Elf64_Shdr& symtab = sections[i];
    if (symtab.sh_link >= eh->e_shnum) break;
    const Elf64_Shdr& strtab = sections[symtab.sh_link];
    if (!in_bounds(symtab.sh_offset, symtab.sh_size) || !in_bounds(strtab.sh_offset, strtab.sh_size)) break;
    const auto* syms = reinterpret_cast<const Elf64_Sym*>(bytes.data() + symtab.sh_offset);
    const size_t count = symtab.sh_size / sizeof(Elf64_Sym);
    const char* strings = bytes.data() + strtab.sh_offset;
    for (size_t k = 0; k < count; ++k) {
      const Elf64_Sym& sym = syms[k];
      if (sym.st_shndx == SHN_UNDEF || sym.st_name >= strtab.sh_size) continue;
      const char* name = strings + sym.st_name;
      if (ELF64_ST_TYPE(sym.st_info) == STT_OBJECT && std::strcmp(name, tensorplug::runtime::kLibraryBinSymbol) == 0) {
        out->has_library_bin = true;
      } else if (ELF64_ST_TYPE(sym.st_info) == STT_FUNC &&
          std::strncmp(name, kFuncPrefix, sizeof(kFuncPrefix) - 1) == 0) {
        out->function_names.emplace_back(name + sizeof(kFuncPrefix) - 1);
      } else if (ELF64_ST_TYPE(sym.st_info) == STT_OBJECT && std::strcmp(name, kABISymbol) == 0) {
        // The value lives in the file: st_value is an address inside its (read-only) section.
        const bool readable = sym.st_size == sizeof(int32_t) && sym.st_shndx < eh->e_shnum &&
                              sections[sym.st_shndx].sh_type == SHT_PROGBITS &&
                              sym.st_value >= sections[sym.st_shndx].sh_addr &&
                              sym.st_value - sections[sym.st_shndx].sh_addr + sizeof(int32_t) <=
                                  sections[sym.st_shndx].sh_size;
        const uint64_t offset =
            readable ? sections[sym.st_shndx].sh_offset + (sym.st_value - sections[sym.st_shndx].sh_addr) : 0;
        if (!readable || !in_bounds(offset, sizeof(int32_t))) {
          *error = std::string("its ABI record ") + kABISymbol + " is not a readable int32";
          return false;
        }
        out->has_abi_record = true;
        std::memcpy(&out->abi_version, bytes.data() + offset, sizeof(int32_t));
      }
    }
    return true;
  }
  *error = "no dynamic symbol table";
  return false;
}

// The name dlopen is given: absolute. glibc matches an already-loaded library by the name it
// was opened with, and searches LD_LIBRARY_PATH for a name without '/': a relative name
// would find the library of another directory after a chdir, a bare "libk.so" another
// library than ./libk.so. A relative path is relative to the working directory.
std::string AbsolutePath(const std::string& path) {
  if (!path.empty() && path[0] == '/') return path;
  std::unique_ptr<char, void (*)(void*)> cwd(getcwd(nullptr, 0), std::free);
  if (!cwd) return path;
  return std::string(cwd.get()) + "/" + path;
}

// Which file each path loaded in this process was: dlopen of a path it has opened returns
// the library loaded first, so a library rebuilt at the same path must not be taken for
// the build already running (docs/decisions.md, "A rebuilt library in a running process").
struct FileIdentity {
  dev_t device;
  ino_t inode;
  off_t size;
  int64_t mtime_ns;
  bool operator==(const FileIdentity& o) const {
    return device == o.device && inode == o.inode && size == o.size && mtime_ns == o.mtime_ns;
  }
};
FileIdentity IdentityOf(const struct stat& st) {
  return {st.st_dev, st.st_ino, st.st_size, int64_t(st.st_mtim.tv_sec) * 1000000000 + st.st_mtim.tv_nsec};
}
std::mutex g_loaded_mutex;
std::map<std::string, FileIdentity>& LoadedFiles() {
  static auto* loaded = new std::map<std::string, FileIdentity>;  // leaked: loads happen until exit
  return *loaded;
}

}  // namespace

struct TPModuleObj {
  void* dl_handle = nullptr;
  std::string path;
  std::map<std::string, TPPackedFunc> functions;  // sorted by name
  std::vector<tensorplug::runtime::ImportedModule> imports;  // embedded modules, in lookup order
};

extern "C" {

int TPModuleLoad(const char* path, TPModuleHandle* out) { return TPModuleLoadEx(path, 0, out); }

int TPModuleLoadEx(const char* path, uint32_t flags, TPModuleHandle* out) {
  *out = nullptr;
  if (!path) return Fail("FileNotFoundError", "no such file: (null)");
  return tensorplug::runtime::LoadModuleNamed(path, path, flags, out);
}

}  // extern "C"

int tensorplug::runtime::LoadModuleNamed(const char* path, const std::string& name, uint32_t flags,
                                         TPModuleHandle* out) {
  *out = nullptr;
  if (flags & ~(TP_MODULE_LOAD_RUNTIME | TP_MODULE_LOAD_GLOBAL)) {
    return Fail("ValueError", "TPModuleLoadEx: unknown flags " + std::to_string(flags));
  }
  struct stat st;
  if (stat(path, &st) != 0) return Fail("FileNotFoundError", "no such file: " + name);
  if (!S_ISREG(st.st_mode)) return Fail("ValueError", name + " is not a file");
  ElfExports exports;
  std::string elf_error;
  if (!ReadElfExports(path, &exports, &elf_error)) {
    return Fail("ValueError", name + " is not a loadable shared library: " + elf_error);
  }
  if (exports.abi_version != TENSORPLUG_ABI_VERSION) {
    const std::string built_for = exports.has_abi_record
        ? "was built for tensorplug ABI " + std::to_string(exports.abi_version)
        : std::string("has no ABI record (") + kABISymbol + "), so it is taken to be built for tensorplug ABI " +
              std::to_string(exports.abi_version);
    return Fail("ValueError", "kernel library '" + name + "' " + built_for + ", this runtime is ABI " +
                                  std::to_string(TENSORPLUG_ABI_VERSION) +
                                  ": rebuild it against the headers of the installed tensorplug (tensorplug config "
                                  "--includedir)");
  }
  // Checked before dlopen too: a runtime library passed to load_module by mistake must not
  // register its global functions as a side effect of being refused.
  if (exports.function_names.empty() && !exports.has_library_bin && !(flags & TP_MODULE_LOAD_RUNTIME)) {
    return Fail("ValueError", name + " exports no tensorplug function (no symbol starts with '" + kFuncPrefix +
                                  "'); a runtime library that only registers global functions loads with "
                                  "tensorplug.load_library");
  }
  const std::string absolute = AbsolutePath(path);
  const FileIdentity identity = IdentityOf(st);
  // Not held across dlopen: a library's static initializers may load libraries.
  std::unique_lock<std::mutex> lock(g_loaded_mutex);
  auto loaded = LoadedFiles().find(absolute);
  const bool changed = loaded != LoadedFiles().end() && !(loaded->second == identity);
  lock.unlock();
  if (changed) {
    return Fail("RuntimeError",
                "kernel library '" + name + "' changed on disk since this process loaded it: a process runs the "
                "build of a path it loaded first (the dynamic loader returns that one), so load the new build in a "
                "new process, or build it at another path (tensorplug.cpp.build without build_directory puts each "
                "build in a directory named by its contents)");
  }
  // RTLD_NODELETE: tensors and functions made by the library may outlive its module.
  const int visibility = (flags & TP_MODULE_LOAD_GLOBAL) ? RTLD_GLOBAL : RTLD_LOCAL;
  void* handle = dlopen(absolute.c_str(), RTLD_NOW | visibility | RTLD_NODELETE);
  if (!handle) {
    std::string why = dlerror() ?: "dlopen failed";
    // dlerror names the file by the name dlopen got; an embedded variant's means nothing.
    if (name != path && why.compare(0, absolute.size(), absolute) == 0) why.replace(0, absolute.size(), name);
    return Fail("ValueError", "cannot load " + name + ": " + why);
  }
  lock.lock();
  LoadedFiles().emplace(absolute, identity);  // the first load of a path stays its record
  lock.unlock();
  auto* module = new (std::nothrow) TPModuleObj;
  if (!module) return Fail("MemoryError", "out of memory");
  module->dl_handle = handle;
  module->path = name;
  for (const std::string& name : exports.function_names) {
    void* sym = dlsym(handle, (kFuncPrefix + name).c_str());
    if (sym) module->functions.emplace(name, reinterpret_cast<TPPackedFunc>(sym));
  }
  if (exports.has_library_bin && tensorplug::runtime::LoadLibraryBin(handle, module->path, &module->imports) != 0) {
    TPModuleRelease(module);
    return -1;
  }
  *out = module;
  return 0;
}

extern "C" {

void TPModuleRelease(TPModuleHandle module) {
  if (!module) return;
  for (const auto& imported : module->imports) TPFunctionRelease(imported.lookup);
  dlclose(module->dl_handle);  // with RTLD_NODELETE the code stays mapped
  delete module;
}

int TPModuleGetFunction(TPModuleHandle module, const char* name, TPFunctionHandle* out) {
  *out = nullptr;
  auto it = module->functions.find(name);
  if (it == module->functions.end()) {
    return tensorplug::runtime::LookupImported(module->imports, module->path, name, out);
  }
  using SigFn = const char* (*)(void);
  auto sig_fn = reinterpret_cast<SigFn>(dlsym(module->dl_handle, (std::string(kSigPrefix) + name).c_str()));
  const char* signature = sig_fn ? sig_fn() : nullptr;
  // Exported functions take NULL for `self` (c_api.h): the entry is the function itself.
  return TPFunctionCreate(nullptr, it->second, nullptr, signature, out);
}

int TPModuleListFunctions(TPModuleHandle module, void (*visit)(void*, const char*), void* ctx) {
  if (module->imports.empty()) {
    for (const auto& entry : module->functions) visit(ctx, entry.first.c_str());
    return 0;
  }
  std::map<std::string, bool> names;  // sorted, each once (a host export shadows an import)
  for (const auto& entry : module->functions) names.emplace(entry.first, true);
  for (const auto& imported : module->imports) {
    for (const auto& name : imported.names) names.emplace(name, true);
  }
  for (const auto& entry : names) visit(ctx, entry.first.c_str());
  return 0;
}

}  // extern "C"
