/*
 * A kernel in plain C11 against the C ABI alone: out = x + 1 for float32 CPU tensors.
 *
 * It returns the calling thread's current stream of x's device as an int, so that tests
 * can see which stream tensorplug set for the call.
 *
 *   cc -std=c11 -Wall -Wextra -pedantic -fPIC -shared -I<includedir> add_one.c \
 *      -L<libdir> -ltensorplug -o libadd_one.so
 */
#include <stdint.h>
#include <stdio.h>

#include <tensorplug/c_api.h>

/* The DLTensor behind an argument (a view, or an owning tensor moved to us), or NULL. */
static DLTensor* tensor_of(const TPAny* arg, int* read_only) {
  if (arg->type_index == kTPDLTensorPtr && arg->v_dltensor != NULL) {
    *read_only = (arg->flags & TP_ANY_FLAG_READ_ONLY) != 0;
    return arg->v_dltensor;
  }
  if (arg->type_index == kTPTensor && arg->v_tensor != NULL) {
    *read_only = (arg->v_tensor->flags & DLPACK_FLAG_BITMASK_READ_ONLY) != 0;
    return &arg->v_tensor->dl_tensor;
  }
  return NULL;
}

static const char* kind_name(const TPAny* arg) {
  switch (arg->type_index) {
    case kTPNone: return "None";
    case kTPInt: return "int";
    case kTPFloat: return "float";
    case kTPBool: return "bool";
    case kTPRawStr: case kTPStr: return "str";
    case kTPDevice: return "device";
    case kTPDataType: return "dtype";
    case kTPTuple: return "tuple";
    case kTPFunction: return "function";
    default: return "an unsupported value";
  }
}

/* Owning tensors (kTPTensor) are moved to the callee: release them on every return path. */
static int finish(const TPAny* args, int32_t nargs, int status) {
  int32_t i;
  for (i = 0; i < nargs; ++i) {
    DLManagedTensorVersioned* t = args[i].type_index == kTPTensor ? args[i].v_tensor : NULL;
    if (t != NULL && t->deleter != NULL) t->deleter(t);
  }
  return status;
}

static int fail(const TPAny* args, int32_t nargs, const char* kind, const char* message) {
  TPErrorSet(kind, message);
  return finish(args, nargs, -1);
}

/* Row-major compact (NULL strides mean compact); size-1 dims may have any stride. */
static int is_contiguous(const DLTensor* t) {
  int64_t expected = 1;
  int32_t i;
  if (t->strides == NULL) return 1;
  for (i = t->ndim - 1; i >= 0; --i) {
    if (t->shape[i] == 0) return 1;
    if (t->shape[i] == 1) continue;
    if (t->strides[i] != expected) return 0;
    expected *= t->shape[i];
  }
  return 1;
}

static int is_host(const DLTensor* t) {
  return t->device.device_type == kDLCPU || t->device.device_type == kDLCUDAHost;
}

/* out is written: kind mview, so callers refuse a read-only tensor for it before the call. */
TP_EXPORT const char* __tensorplugsig_add_one(void) { return "x:view;out:mview->int"; }

TP_EXPORT int __tensorplug_add_one(void* self, const TPAny* args, int32_t nargs, TPAny* result) {
  static const char* const names[2] = {"x", "out"};
  DLTensor* tensors[2];
  int read_only[2] = {0, 0};
  char message[160];
  int64_t n = 1;
  int64_t i;
  int32_t k;
  const float* in;
  float* out;
  (void)self;

  result->type_index = kTPNone;
  result->flags = 0;
  result->v_int64 = 0;
  if (nargs != 2) {
    snprintf(message, sizeof message, "add_one() takes 2 arguments (%d given)", (int)nargs);
    return fail(args, nargs, "TypeError", message);
  }
  for (k = 0; k < 2; ++k) {
    tensors[k] = tensor_of(&args[k], &read_only[k]);
    if (tensors[k] == NULL) {
      snprintf(message, sizeof message, "add_one() argument %d '%s': expected a tensor, got %s",
               (int)k + 1, names[k], kind_name(&args[k]));
      return fail(args, nargs, "TypeError", message);
    }
    if (tensors[k]->dtype.code != kDLFloat || tensors[k]->dtype.bits != 32 ||
        tensors[k]->dtype.lanes != 1) {
      snprintf(message, sizeof message, "add_one: '%s' must be float32", names[k]);
      return fail(args, nargs, "TypeError", message);
    }
    if (!is_host(tensors[k])) {
      snprintf(message, sizeof message, "add_one: '%s' must be a CPU tensor", names[k]);
      return fail(args, nargs, "ValueError", message);
    }
    if (!is_contiguous(tensors[k])) {
      snprintf(message, sizeof message, "add_one: '%s' must be contiguous", names[k]);
      return fail(args, nargs, "ValueError", message);
    }
  }
  /* Callers that read the signature never pass a read-only out; a C caller might. */
  if (read_only[1]) return fail(args, nargs, "ValueError", "add_one: 'out' is read-only");
  if (tensors[0]->ndim != tensors[1]->ndim) {
    return fail(args, nargs, "ValueError", "add_one: 'x' and 'out' differ in shape");
  }
  for (k = 0; k < tensors[0]->ndim; ++k) {
    if (tensors[0]->shape[k] != tensors[1]->shape[k]) {
      return fail(args, nargs, "ValueError", "add_one: 'x' and 'out' differ in shape");
    }
    n *= tensors[0]->shape[k];
  }

  in = (const float*)((const char*)tensors[0]->data + tensors[0]->byte_offset);
  out = (float*)((char*)tensors[1]->data + tensors[1]->byte_offset);
  for (i = 0; i < n; ++i) out[i] = in[i] + 1.0f;

  result->type_index = kTPInt;
  result->v_int64 = (int64_t)(intptr_t)TPEnvGetStream(tensors[0]->device.device_type,
                                                      tensors[0]->device.device_id);
  return finish(args, nargs, 0);
}
