// Loading kernel libraries: dlopen, then find `__tensorplug_<name>` functions by reading
// the library's dynamic symbol table (ELF), so that plain-C libraries need no registry.
#include <dlfcn.h>
#include <elf.h>
#include <sys/stat.h>

#include <cstdio>
#include <cstring>
#include <fstream>
#include <map>
#include <new>
#include <string>
#include <vector>

#include "runtime_internal.h"

using tensorplug::runtime::Fail;

namespace {

constexpr char kFuncPrefix[] = "__tensorplug_";
constexpr char kSigPrefix[] = "__tensorplugsig_";

// Names of the global function symbols in the ELF .dynsym table that start with prefix.
bool ListExportedFunctions(const std::string& path, std::vector<std::string>* names,
                           std::string* error) {
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
      if (sym.st_shndx == SHN_UNDEF || ELF64_ST_TYPE(sym.st_info) != STT_FUNC) continue;
      if (sym.st_name >= strtab.sh_size) continue;
      const char* name = strings + sym.st_name;
      if (std::strncmp(name, kFuncPrefix, sizeof(kFuncPrefix) - 1) == 0) {
        names->emplace_back(name + sizeof(kFuncPrefix) - 1);
      }
    }
    return true;
  }
  *error = "no dynamic symbol table";
  return false;
}

}  // namespace

struct TPModuleObj {
  void* dl_handle = nullptr;
  std::string path;
  std::map<std::string, TPPackedFunc> functions;  // sorted by name
};

extern "C" {

int TPModuleLoad(const char* path, TPModuleHandle* out) {
  *out = nullptr;
  struct stat st;
  if (!path || stat(path, &st) != 0) {
    return Fail("FileNotFoundError", std::string("no such file: ") + (path ? path : "(null)"));
  }
  if (!S_ISREG(st.st_mode)) return Fail("ValueError", std::string(path) + " is not a file");
  std::vector<std::string> names;
  std::string elf_error;
  if (!ListExportedFunctions(path, &names, &elf_error)) {
    return Fail("ValueError", std::string(path) + " is not a loadable shared library: " + elf_error);
  }
  // RTLD_NODELETE: tensors and functions made by the library may outlive its module.
  void* handle = dlopen(path, RTLD_NOW | RTLD_LOCAL | RTLD_NODELETE);
  if (!handle) {
    const char* why = dlerror();
    return Fail("ValueError", std::string("cannot load ") + path + ": " + (why ? why : "dlopen failed"));
  }
  auto* module = new (std::nothrow) TPModuleObj;
  if (!module) return Fail("MemoryError", "out of memory");
  module->dl_handle = handle;
  module->path = path;
  for (const std::string& name : names) {
    void* sym = dlsym(handle, (kFuncPrefix + name).c_str());
    if (sym) module->functions.emplace(name, reinterpret_cast<TPPackedFunc>(sym));
  }
  if (module->functions.empty()) {
    delete module;
    dlclose(handle);
    return Fail("ValueError", std::string(path) + " exports no tensorplug function (no symbol starts with '" +
                                  kFuncPrefix + "')");
  }
  *out = module;
  return 0;
}

void TPModuleRelease(TPModuleHandle module) {
  if (!module) return;
  dlclose(module->dl_handle);  // with RTLD_NODELETE the code stays mapped
  delete module;
}

namespace {
// Exported functions ignore `self`: this trampoline lets them be TPFunctionObj closures.
struct ExportedFunc {
  TPPackedFunc entry;
};
int CallExported(void* self, const TPAny* args, int32_t nargs, TPAny* result) {
  return static_cast<ExportedFunc*>(self)->entry(nullptr, args, nargs, result);
}
void DeleteExported(void* self) { delete static_cast<ExportedFunc*>(self); }
}  // namespace

int TPModuleGetFunction(TPModuleHandle module, const char* name, TPFunctionHandle* out) {
  *out = nullptr;
  auto it = module->functions.find(name);
  if (it == module->functions.end()) return 0;
  using SigFn = const char* (*)(void);
  auto sig_fn = reinterpret_cast<SigFn>(dlsym(module->dl_handle, (std::string(kSigPrefix) + name).c_str()));
  const char* signature = sig_fn ? sig_fn() : nullptr;
  auto* closure = new (std::nothrow) ExportedFunc{it->second};
  if (!closure) return Fail("MemoryError", "out of memory");
  if (TPFunctionCreate(closure, CallExported, DeleteExported, signature, out) != 0) {
    delete closure;
    return -1;
  }
  return 0;
}

int TPModuleListFunctions(TPModuleHandle module, void (*visit)(void*, const char*), void* ctx) {
  for (const auto& entry : module->functions) visit(ctx, entry.first.c_str());
  return 0;
}

}  // extern "C"
