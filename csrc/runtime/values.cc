// Values, strings, tuples and thread-local errors.
#include <cstdlib>
#include <cstring>
#include <new>
#include <string>

#include "runtime_internal.h"

extern "C" {

int32_t TPGetABIVersion(void) { return TENSORPLUG_ABI_VERSION; }

void TPAnyRelease(TPAny* value) {
  switch (value->type_index) {
    case kTPTensor:
      if (value->v_tensor && value->v_tensor->deleter) value->v_tensor->deleter(value->v_tensor);
      break;
    case kTPStr:
      std::free(value->v_str);  // one allocation: header followed by the bytes
      break;
    case kTPTuple:
      if (value->v_tuple) {
        for (int32_t i = 0; i < value->v_tuple->size; ++i) TPAnyRelease(&value->v_tuple->items[i]);
        std::free(value->v_tuple);
      }
      break;
    case kTPFunction:
      if (value->v_func) TPFunctionRelease(value->v_func);
      break;
    case kTPHandle:
      if (value->v_handle) TPHandleRelease(value->v_handle);
      break;
    default:
      break;
  }
  value->type_index = kTPNone;
  value->flags = 0;
  value->v_int64 = 0;
}

TPString* TPStringCreate(const char* data, size_t size) {
  auto* s = static_cast<TPString*>(std::malloc(sizeof(TPString) + size + 1));
  if (!s) return nullptr;
  char* bytes = reinterpret_cast<char*>(s + 1);
  if (size) std::memcpy(bytes, data, size);
  bytes[size] = '\0';
  s->size = size;
  s->data = bytes;
  return s;
}

TPTuple* TPTupleCreate(int32_t size) {
  if (size < 0) return nullptr;
  auto* t = static_cast<TPTuple*>(std::calloc(1, sizeof(TPTuple) + sizeof(TPAny) * size));
  if (!t) return nullptr;
  t->size = size;
  t->items = reinterpret_cast<TPAny*>(t + 1);  // calloc: every item is kTPNone
  return t;
}

}  // extern "C"

namespace {
struct ThreadError {
  bool set = false;
  std::string kind;
  std::string message;
};
thread_local ThreadError tls_error;
// Read on every failed call; checking "is an error set" should not need the full
// thread_local machinery of tls_error, whose std::strings need lazy construction.
thread_local bool tls_error_set __attribute__((tls_model("initial-exec"))) = false;
}  // namespace

extern "C" {

void TPErrorSet(const char* kind, const char* message) {
  tls_error_set = true;
  tls_error.set = true;
  tls_error.kind = kind ? kind : "RuntimeError";
  tls_error.message = message ? message : "";
}

int TPErrorGet(const char** kind, const char** message) {
  if (!tls_error_set) return 0;
  if (kind) *kind = tls_error.kind.c_str();
  if (message) *message = tls_error.message.c_str();
  return 1;
}

void TPErrorClear(void) {
  if (!tls_error_set) return;
  tls_error_set = false;
  tls_error.set = false;
  tls_error.kind.clear();
  tls_error.message.clear();
}

}  // extern "C"
