/* A plain-C library of tests/core/test_handles.py: a typed handle made with TPHandleCreate. */
#include <stdlib.h>
#include <string.h>

#include <tensorplug/c_api.h>

static int64_t g_freed = 0;

static void free_counter(void* ptr, void* ctx) {
  (void)ctx;
  free(ptr);
  ++g_freed;
}

static int set_int(TPAny* result, int64_t value) {
  result->type_index = kTPInt;
  result->flags = 0;
  result->v_int64 = value;
  return 0;
}

TP_EXPORT int __tensorplug_counter_new(void* self, const TPAny* args, int32_t nargs, TPAny* result) {
  int64_t* count;
  TPHandleRef handle;
  (void)self;
  if (nargs != 1 || args[0].type_index != kTPInt) {
    TPErrorSet("TypeError", "counter_new() takes one int");
    return -1;
  }
  count = (int64_t*)malloc(sizeof(int64_t));
  if (count == NULL) {
    TPErrorSet("MemoryError", "counter_new(): out of memory");
    return -1;
  }
  *count = args[0].v_int64;
  if (TPHandleCreate(count, "cdemo.Counter", free_counter, NULL, &handle) != 0) {
    free(count);
    return -1;
  }
  result->type_index = kTPHandle;
  result->flags = 0;
  result->v_handle = handle;
  return 0;
}
TP_EXPORT const char* __tensorplugsig_counter_new(void) { return "start:int->handle<cdemo.Counter>"; }

/* Checks the kind and the type name itself: C callers need not go through Python. */
TP_EXPORT int __tensorplug_counter_next(void* self, const TPAny* args, int32_t nargs, TPAny* result) {
  const char* type;
  int64_t* count;
  (void)self;
  if (nargs != 1 || args[0].type_index != kTPHandle) {
    TPErrorSet("TypeError", "counter_next() takes one handle");
    return -1;
  }
  type = TPHandleGetTypeName(args[0].v_handle);
  if (type == NULL || strcmp(type, "cdemo.Counter") != 0) {
    TPErrorSet("TypeError", "counter_next(): expected a cdemo.Counter handle");
    return -1;
  }
  count = (int64_t*)TPHandleGetPointer(args[0].v_handle);
  return set_int(result, ++*count);
}
TP_EXPORT const char* __tensorplugsig_counter_next(void) { return "counter:handle<cdemo.Counter>->int"; }

TP_EXPORT int __tensorplug_counters_freed(void* self, const TPAny* args, int32_t nargs, TPAny* result) {
  (void)self;
  (void)args;
  (void)nargs;
  return set_int(result, g_freed);
}

/* A type name outside the rule: TPHandleCreate refuses it (and runs no deleter). */
TP_EXPORT int __tensorplug_bad_type_name(void* self, const TPAny* args, int32_t nargs, TPAny* result) {
  TPHandleRef handle;
  (void)self;
  (void)args;
  (void)nargs;
  if (TPHandleCreate(&g_freed, "bad name", free_counter, NULL, &handle) != 0) return -1;
  result->type_index = kTPHandle;
  result->flags = 0;
  result->v_handle = handle;
  return 0;
}

