// Opaque handles: a pointer, an optional type name and deleter, shared by reference count.
#include <atomic>
#include <cstring>
#include <new>
#include <string>

#include "runtime_internal.h"
#include "tensorplug/vocabulary.h"

using tensorplug::runtime::Fail;

struct TPHandleObj {
  std::atomic<int64_t> refcount{1};
  void* ptr = nullptr;
  TPHandleDeleter deleter = nullptr;
  void* ctx = nullptr;
  std::string type_name;
  bool typed = false;
};

namespace {
// Type names appear in signature strings, so they are made of TP_HANDLE_TYPE_NAME_CHARS.
bool ValidTypeName(const char* name) {
  return *name != '\0' && name[std::strspn(name, TP_HANDLE_TYPE_NAME_CHARS)] == '\0';
}
}  // namespace

extern "C" {

int TPHandleCreate(void* ptr, const char* type_name, TPHandleDeleter deleter, void* ctx, TPHandleRef* out) {
  if (type_name && !ValidTypeName(type_name)) {
    return Fail("ValueError", std::string("TPHandleCreate: type name '") + type_name +
                                  "' is not made of letters, digits, '_', '.' and ':'");
  }
  auto* h = new (std::nothrow) TPHandleObj;
  if (!h) return Fail("MemoryError", "TPHandleCreate: out of memory");
  try {
    if (type_name) {
      h->type_name = type_name;
      h->typed = true;
    }
  } catch (const std::bad_alloc&) {
    delete h;
    return Fail("MemoryError", "TPHandleCreate: out of memory");
  }
  h->ptr = ptr;
  h->deleter = deleter;
  h->ctx = ctx;
  *out = h;
  return 0;
}

void TPHandleRetain(TPHandleRef handle) { handle->refcount.fetch_add(1, std::memory_order_relaxed); }

void TPHandleRelease(TPHandleRef handle) {
  if (handle->refcount.fetch_sub(1, std::memory_order_acq_rel) == 1) {
    if (handle->deleter) handle->deleter(handle->ptr, handle->ctx);
    delete handle;
  }
}

void* TPHandleGetPointer(TPHandleRef handle) { return handle->ptr; }

const char* TPHandleGetTypeName(TPHandleRef handle) { return handle->typed ? handle->type_name.c_str() : nullptr; }

int TPHandleIsOwning(TPHandleRef handle) { return handle->deleter != nullptr; }

}  // extern "C"
