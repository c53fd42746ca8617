// Reference-counted packed functions and the global function registry.
#include <atomic>
#include <map>
#include <mutex>
#include <new>
#include <string>
#include <vector>

#include "runtime_internal.h"

using tensorplug::runtime::Fail;

struct TPFunctionObj {
  std::atomic<int64_t> refcount{1};
  TPPackedFunc call = nullptr;
  void* self = nullptr;
  void (*deleter)(void*) = nullptr;
  std::string signature;
  bool has_signature = false;
};

namespace {
// Names map to functions; std::map keeps listing sorted. Leaked on purpose: functions
// registered from static initialisers may be released after static destructors ran.
std::mutex& RegistryMutex() {
  static auto* m = new std::mutex;
  return *m;
}
std::map<std::string, TPFunctionHandle>& Registry() {
  static auto* r = new std::map<std::string, TPFunctionHandle>;
  return *r;
}
}  // namespace

extern "C" {

int TPFunctionCreate(void* self, TPPackedFunc call, void (*deleter)(void*), const char* signature,
                     TPFunctionHandle* out) {
  if (!call) return Fail("ValueError", "TPFunctionCreate: call must not be NULL");
  auto* f = new (std::nothrow) TPFunctionObj;
  if (!f) return Fail("MemoryError", "TPFunctionCreate: out of memory");
  f->call = call;
  f->self = self;
  f->deleter = deleter;
  if (signature) {
    f->signature = signature;
    f->has_signature = true;
  }
  *out = f;
  return 0;
}

void TPFunctionRetain(TPFunctionHandle func) {
  func->refcount.fetch_add(1, std::memory_order_relaxed);
}

void TPFunctionRelease(TPFunctionHandle func) {
  if (func->refcount.fetch_sub(1, std::memory_order_acq_rel) == 1) {
    if (func->deleter) func->deleter(func->self);
    delete func;
  }
}

int TPFunctionCall(TPFunctionHandle func, const TPAny* args, int32_t nargs, TPAny* result) {
  result->type_index = kTPNone;
  result->flags = 0;
  result->v_int64 = 0;
  return func->call(func->self, args, nargs, result);
}

const char* TPFunctionGetSignature(TPFunctionHandle func) {
  return func->has_signature ? func->signature.c_str() : nullptr;
}

TPPackedFunc TPFunctionGetEntry(TPFunctionHandle func, void** self) {
  if (self) *self = func->self;
  return func->call;
}

int TPGlobalFuncRegister(const char* name, TPFunctionHandle func, int allow_override) {
  if (!name || !*name) return Fail("ValueError", "global function name must not be empty");
  std::lock_guard<std::mutex> lock(RegistryMutex());
  auto& registry = Registry();
  auto it = registry.find(name);
  if (it != registry.end()) {
    if (!allow_override) {
      return Fail("KeyError", std::string("global function '") + name +
                                  "' is already registered (pass override=True to replace it)");
    }
    TPFunctionRelease(it->second);
    registry.erase(it);
  }
  TPFunctionRetain(func);
  registry.emplace(name, func);
  return 0;
}

int TPGlobalFuncGet(const char* name, TPFunctionHandle* out) {
  std::lock_guard<std::mutex> lock(RegistryMutex());
  auto& registry = Registry();
  auto it = registry.find(name);
  *out = nullptr;
  if (it != registry.end()) {
    TPFunctionRetain(it->second);
    *out = it->second;
  }
  return 0;
}

int TPGlobalFuncRemove(const char* name) {
  TPFunctionHandle removed = nullptr;
  {
    std::lock_guard<std::mutex> lock(RegistryMutex());
    auto& registry = Registry();
    auto it = registry.find(name);
    if (it != registry.end()) {
      removed = it->second;
      registry.erase(it);
    }
  }
  // Released outside the lock: a deleter may call back into the registry.
  if (removed) TPFunctionRelease(removed);
  return 0;
}

int TPGlobalFuncListNames(void (*visit)(void* ctx, const char* name), void* ctx) {
  std::vector<std::string> names;
  {
    std::lock_guard<std::mutex> lock(RegistryMutex());
    for (const auto& entry : Registry()) names.push_back(entry.first);
  }
  for (const auto& name : names) visit(ctx, name.c_str());  // unlocked: visit may register
  return 0;
}

}  // extern "C"
