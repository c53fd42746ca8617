/*
 * tensorplug/generated.h -- header-only helpers for C that a code generator emits.
 *
 * A compiler (a DSL, an ahead-of-time generator, a JIT writing C) emits one exported
 * function per kernel in the packed convention of c_api.h. This header makes that function
 * a few straight lines: read each argument (checked, with a message naming the function,
 * the argument, what was expected and what came), ask for the stream and for allocations,
 * set the result, and finish. The helpers are written as C89 (declarations first, no
 * `//` comments, no `inline`, no snprintf), so generated code of any C dialect can include
 * it; it needs only c_api.h and links only against libtensorplug. docs/generated.md shows
 * the C a generator emits.
 *
 * The pattern: the first failing helper records the error in the TPGenCall and every later
 * helper does nothing and returns a harmless value (NULL, 0), so generated code checks
 * once, after reading its arguments, and once per allocation:
 *
 *     TPGenCall call;
 *     TPGenBegin(&call, "scale", args, nargs, result);
 *     TPGenArity(&call, 2);
 *     x = TPGenTensor(&call, 0, "x", TPGenDType(kDLFloat, 32), -1, kDLCPU, TPGEN_CONTIGUOUS);
 *     alpha = TPGenFloat(&call, 1, "alpha");
 *     if (call.failed) return TPGenFinish(&call);
 *     ...
 *     return TPGenFinish(&call);
 *
 * TPGenFinish releases the owning tensors the function was given (kTPTensor arguments move
 * to the callee), records the error for the caller (TPErrorSet) and returns -1 after a
 * failure, 0 otherwise. The functions are `static`: each translation unit has its own copy
 * (unused ones cost nothing).
 */
#ifndef TENSORPLUG_GENERATED_H_
#define TENSORPLUG_GENERATED_H_

#include <stddef.h>
#include <stdint.h>

#include "tensorplug/c_api.h"
#include "tensorplug/vocabulary.h"

#if defined(__GNUC__) || defined(__clang__)
#define TPGEN_UNUSED __attribute__((unused))
#else
#define TPGEN_UNUSED
#endif

/* Exports a generated function with C linkage, whether the file is compiled as C or C++
 * (TP_EXPORT alone leaves a C++ name mangled, and the loader would not find it). */
#ifdef __cplusplus
#define TPGEN_EXPORT extern "C" TP_EXPORT
#else
#define TPGEN_EXPORT TP_EXPORT
#endif

#ifdef __cplusplus
extern "C" {
#endif

/* TPGenTensor flags. */
#define TPGEN_CONTIGUOUS 1u /* refuse a tensor that is not row-major compact */
#define TPGEN_WRITTEN 2u    /* the function writes the tensor: refuse a read-only one */

/* The state of one call of a generated function. Fields are read, never written, by
 * generated code; `failed` says whether a helper failed. */
typedef struct {
  const char* function; /* the function's name, for messages */
  const TPAny* args;
  int32_t nargs;
  TPAny* result;
  int failed;         /* a helper failed: the error is kept below (or already recorded) */
  int recorded;       /* the error is already recorded for the thread (TPEnvAllocTensor's) */
  const char* kind;   /* an error kind of TP_ERROR_KINDS */
  char message[320];  /* NUL-terminated; longer messages are cut */
} TPGenCall;

/* ----------------------------------------------------------- messages (private) ---- */

static TPGEN_UNUSED void tpgen_append(TPGenCall* call, size_t* used, const char* text) {
  while (*text != '\0' && *used + 1 < sizeof call->message) call->message[(*used)++] = *text++;
  call->message[*used] = '\0';
}

static TPGEN_UNUSED void tpgen_append_int(TPGenCall* call, size_t* used, int64_t value) {
  char digits[24];
  int n = 0;
  uint64_t magnitude = value < 0 ? (uint64_t)0 - (uint64_t)value : (uint64_t)value;
  if (value < 0) tpgen_append(call, used, "-");
  do {
    digits[n++] = (char)('0' + (int)(magnitude % 10u));
    magnitude /= 10u;
  } while (magnitude != 0u);
  while (n > 0) {
    char one[2];
    one[0] = digits[--n];
    one[1] = '\0';
    tpgen_append(call, used, one);
  }
}

static TPGEN_UNUSED void tpgen_append_dtype(TPGenCall* call, size_t* used, DLDataType dtype) {
  static const char* const codes[] = {"int", "uint", "float", "handle", "bfloat", "complex", "bool"};
  if (dtype.code == kDLBool && dtype.bits == 8) {
    tpgen_append(call, used, "bool");
  } else {
    tpgen_append(call, used, dtype.code < 7 ? codes[dtype.code] : "dtype code ");
    if (dtype.code >= 7) tpgen_append_int(call, used, dtype.code);
    tpgen_append_int(call, used, dtype.bits);
  }
  if (dtype.lanes != 1) {
    tpgen_append(call, used, "x");
    tpgen_append_int(call, used, dtype.lanes);
  }
}

static TPGEN_UNUSED void tpgen_append_device(TPGenCall* call, size_t* used, int32_t device_type) {
  switch (device_type) {
#define TPGEN_DEVICE_CASE(code, name) \
    case code: tpgen_append(call, used, name); break;
    TP_DEVICE_TYPES(TPGEN_DEVICE_CASE)
#undef TPGEN_DEVICE_CASE
    default:
      tpgen_append(call, used, "device type ");
      tpgen_append_int(call, used, device_type);
  }
}

static TPGEN_UNUSED const char* tpgen_kind_name(const TPAny* value) {
  switch (value->type_index) {
    case kTPNone: return "None";
    case kTPInt: return "int";
    case kTPFloat: return "float";
    case kTPBool: return "bool";
    case kTPDevice: return "device";
    case kTPDataType: return "dtype";
    case kTPOpaquePtr: return "pointer";
    case kTPRawStr: case kTPStr: return "str";
    case kTPDLTensorPtr: case kTPTensor: return "tensor";
    case kTPTuple: return "tuple";
    case kTPFunction: return "function";
    case kTPArray: return "list";
    case kTPIntArray: return "int list";
    case kTPHandle: return "handle";
    default: return "an unknown value";
  }
}

/* Start a failure: "<function>() argument <index+1> '<name>': " (index < 0: "<function>: "). */
static TPGEN_UNUSED size_t tpgen_start(TPGenCall* call, const char* kind, int32_t index, const char* name) {
  size_t used = 0;
  call->failed = 1;
  call->kind = kind;
  call->message[0] = '\0';
  tpgen_append(call, &used, call->function);
  if (index < 0) {
    tpgen_append(call, &used, "(): ");
    return used;
  }
  tpgen_append(call, &used, "() argument ");
  tpgen_append_int(call, &used, (int64_t)index + 1);
  tpgen_append(call, &used, " '");
  tpgen_append(call, &used, name);
  tpgen_append(call, &used, "': ");
  return used;
}

/* ---------------------------------------------------------------------- calls ---- */

/* Start a call: remember its arguments, set *result to None. */
static TPGEN_UNUSED void TPGenBegin(TPGenCall* call, const char* function, const TPAny* args, int32_t nargs,
                                    TPAny* result) {
  call->function = function;
  call->args = args;
  call->nargs = nargs;
  call->result = result;
  call->failed = 0;
  call->recorded = 0;
  call->kind = NULL;
  call->message[0] = '\0';
  result->type_index = kTPNone;
  result->flags = 0;
  result->v_int64 = 0;
}

/* Fail with `kind` (an error kind of TP_ERROR_KINDS) and "<function>(): <message>". Returns -1. */
static TPGEN_UNUSED int TPGenFail(TPGenCall* call, const char* kind, const char* message) {
  size_t used;
  if (call->failed) return -1;
  used = tpgen_start(call, kind, -1, "");
  tpgen_append(call, &used, message);
  return -1;
}

/* Refuse a call with another number of arguments than `expected` (TypeError). */
static TPGEN_UNUSED void TPGenArity(TPGenCall* call, int32_t expected) {
  size_t used;
  if (call->failed || call->nargs == expected) return;
  used = tpgen_start(call, "TypeError", -1, "");
  call->message[used - 2] = '\0'; /* "<function>() takes ..." */
  used -= 2;
  tpgen_append(call, &used, " takes ");
  tpgen_append_int(call, &used, expected);
  tpgen_append(call, &used, expected == 1 ? " argument, got " : " arguments, got ");
  tpgen_append_int(call, &used, call->nargs);
}

/* DLDataType of one lane. */
static TPGEN_UNUSED DLDataType TPGenDType(uint8_t code, uint8_t bits) {
  DLDataType dtype;
  dtype.code = code;
  dtype.bits = bits;
  dtype.lanes = 1;
  return dtype;
}

/* 1 when `t` is row-major compact (NULL strides count; extent-1 dimensions may have any
 * stride; an empty tensor is). */
static TPGEN_UNUSED int TPGenIsContiguous(const DLTensor* t) {
  int64_t expected = 1;
  int32_t i;
  if (t->strides == NULL) return 1;
  for (i = 0; i < t->ndim; ++i) {
    if (t->shape[i] == 0) return 1;
  }
  for (i = t->ndim - 1; i >= 0; --i) {
    if (t->shape[i] != 1 && t->strides[i] != expected) return 0;
    expected *= t->shape[i];
  }
  return 1;
}

/* The number of elements of `t`. */
static TPGEN_UNUSED int64_t TPGenNumel(const DLTensor* t) {
  int64_t n = 1;
  int32_t i;
  for (i = 0; i < t->ndim; ++i) n *= t->shape[i];
  return n;
}

/* The address of element 0 of `t` (data + byte_offset). */
static TPGEN_UNUSED void* TPGenData(const DLTensor* t) { return (char*)t->data + t->byte_offset; }

/*
 * Tensor argument `index` (a view, or an owning tensor moved to the function), checked:
 * dtype `dtype`, `ndim` dimensions (-1: any), on devices of type `device_type` (-1: any;
 * kDLCPU also accepts kDLCUDAHost, pinned host memory) and the TPGEN_* `flags`. Returns
 * the DLTensor, or NULL after a failure (TypeError for a value that is no tensor or has
 * another dtype, ValueError otherwise).
 */
static TPGEN_UNUSED DLTensor* TPGenTensor(TPGenCall* call, int32_t index, const char* name, DLDataType dtype,
                                          int32_t ndim, int32_t device_type, unsigned flags) {
  const TPAny* arg;
  DLTensor* t = NULL;
  int read_only = 0;
  size_t used;
  if (call->failed) return NULL;
  if (index >= call->nargs) {
    TPGenFail(call, "TypeError", "too few arguments");
    return NULL;
  }
  arg = &call->args[index];
  if (arg->type_index == kTPDLTensorPtr && arg->v_dltensor != NULL) {
    t = arg->v_dltensor;
    read_only = (arg->flags & TP_ANY_FLAG_READ_ONLY) != 0;
  } else if (arg->type_index == kTPTensor && arg->v_tensor != NULL) {
    t = &arg->v_tensor->dl_tensor;
    read_only = (arg->v_tensor->flags & DLPACK_FLAG_BITMASK_READ_ONLY) != 0;
  }
  if (t == NULL) {
    used = tpgen_start(call, "TypeError", index, name);
    tpgen_append(call, &used, "expected a tensor, got ");
    tpgen_append(call, &used, tpgen_kind_name(arg));
    return NULL;
  }
  if (t->dtype.code != dtype.code || t->dtype.bits != dtype.bits || t->dtype.lanes != dtype.lanes) {
    used = tpgen_start(call, "TypeError", index, name);
    tpgen_append(call, &used, "expected a ");
    tpgen_append_dtype(call, &used, dtype);
    tpgen_append(call, &used, " tensor, got ");
    tpgen_append_dtype(call, &used, t->dtype);
    return NULL;
  }
  if (ndim >= 0 && t->ndim != ndim) {
    used = tpgen_start(call, "ValueError", index, name);
    tpgen_append(call, &used, "expected a tensor of ");
    tpgen_append_int(call, &used, ndim);
    tpgen_append(call, &used, ndim == 1 ? " dimension, got " : " dimensions, got ");
    tpgen_append_int(call, &used, t->ndim);
    return NULL;
  }
  if (device_type >= 0 && (int32_t)t->device.device_type != device_type &&
      !(device_type == kDLCPU && t->device.device_type == kDLCUDAHost)) {
    used = tpgen_start(call, "ValueError", index, name);
    tpgen_append(call, &used, "expected a tensor on ");
    tpgen_append_device(call, &used, device_type);
    tpgen_append(call, &used, ", got one on ");
    tpgen_append_device(call, &used, (int32_t)t->device.device_type);
    return NULL;
  }
  if ((flags & TPGEN_CONTIGUOUS) != 0u && !TPGenIsContiguous(t)) {
    used = tpgen_start(call, "ValueError", index, name);
    tpgen_append(call, &used, "expected a contiguous (row-major compact) tensor, got a strided one");
    return NULL;
  }
  if ((flags & TPGEN_WRITTEN) != 0u && read_only) {
    used = tpgen_start(call, "ValueError", index, name);
    tpgen_append(call, &used, "expected a writable tensor (the function writes it), got a read-only one");
    return NULL;
  }
  return t;
}

/* Int argument `index` (TypeError for anything else; a bool is not an int). 0 after a failure. */
static TPGEN_UNUSED int64_t TPGenInt(TPGenCall* call, int32_t index, const char* name) {
  size_t used;
  if (call->failed) return 0;
  if (index < call->nargs && call->args[index].type_index == kTPInt) return call->args[index].v_int64;
  used = tpgen_start(call, "TypeError", index, name);
  tpgen_append(call, &used, "expected an int, got ");
  tpgen_append(call, &used, index < call->nargs ? tpgen_kind_name(&call->args[index]) : "nothing");
  return 0;
}

/* Float argument `index` (an int is taken too: C callers pass what they have). 0 after a failure. */
static TPGEN_UNUSED double TPGenFloat(TPGenCall* call, int32_t index, const char* name) {
  size_t used;
  if (call->failed) return 0.0;
  if (index < call->nargs && call->args[index].type_index == kTPFloat) return call->args[index].v_float64;
  if (index < call->nargs && call->args[index].type_index == kTPInt) return (double)call->args[index].v_int64;
  used = tpgen_start(call, "TypeError", index, name);
  tpgen_append(call, &used, "expected a float, got ");
  tpgen_append(call, &used, index < call->nargs ? tpgen_kind_name(&call->args[index]) : "nothing");
  return 0.0;
}

/* Bool argument `index` (0 or 1). 0 after a failure. */
static TPGEN_UNUSED int TPGenBool(TPGenCall* call, int32_t index, const char* name) {
  size_t used;
  if (call->failed) return 0;
  if (index < call->nargs && call->args[index].type_index == kTPBool) return call->args[index].v_int64 != 0;
  used = tpgen_start(call, "TypeError", index, name);
  tpgen_append(call, &used, "expected a bool, got ");
  tpgen_append(call, &used, index < call->nargs ? tpgen_kind_name(&call->args[index]) : "nothing");
  return 0;
}

/* The calling thread's current stream of t's device (NULL: the default stream); during a
 * call from Python, the calling framework's current stream (inside jax.jit: XLA's). */
static TPGEN_UNUSED void* TPGenStream(const DLTensor* t) {
  return TPEnvGetStream((int32_t)t->device.device_type, t->device.device_id);
}

/*
 * A new row-major compact tensor from the caller's allocator (the calling framework's;
 * inside jax.jit, XLA's result buffer): `ndim` dimensions of `shape`, `dtype`, `device`.
 * NULL after a failure (the allocator's error is kept: MemoryError, ...). The tensor is
 * the function's until TPGenReturnTensor hands it over; release it (its deleter) if not.
 */
static TPGEN_UNUSED DLManagedTensorVersioned* TPGenAlloc(TPGenCall* call, DLDataType dtype, DLDevice device,
                                                         int32_t ndim, const int64_t* shape) {
  DLTensor prototype;
  DLManagedTensorVersioned* out = NULL;
  if (call->failed) return NULL;
  prototype.data = NULL;
  prototype.device = device;
  prototype.ndim = ndim;
  prototype.dtype = dtype;
  prototype.shape = (int64_t*)shape;
  prototype.strides = NULL;
  prototype.byte_offset = 0;
  if (TPEnvAllocTensor(&prototype, &out) != 0) {
    call->failed = 1;
    call->recorded = 1;
    return NULL;
  }
  return out;
}

/* A new tensor with the dtype, device and shape of `like` (see TPGenAlloc). */
static TPGEN_UNUSED DLManagedTensorVersioned* TPGenAllocLike(TPGenCall* call, const DLTensor* like) {
  if (call->failed) return NULL;
  return TPGenAlloc(call, like->dtype, like->device, like->ndim, like->shape);
}

/* Return `tensor` (the caller owns it from now on; released instead after a failure). */
static TPGEN_UNUSED void TPGenReturnTensor(TPGenCall* call, DLManagedTensorVersioned* tensor) {
  TPAnyRelease(call->result);
  call->result->type_index = kTPTensor;
  call->result->flags = 0;
  call->result->v_tensor = tensor;
}

/* Return an int. */
static TPGEN_UNUSED void TPGenReturnInt(TPGenCall* call, int64_t value) {
  TPAnyRelease(call->result);
  call->result->type_index = kTPInt;
  call->result->v_int64 = value;
}

/* Return a float. */
static TPGEN_UNUSED void TPGenReturnFloat(TPGenCall* call, double value) {
  TPAnyRelease(call->result);
  call->result->type_index = kTPFloat;
  call->result->v_float64 = value;
}

/*
 * End the call: release the owning tensor arguments (the function owns them); after a
 * failure also release the result and record the error (TPErrorSet) and return -1, else
 * return 0. The return value of the generated function.
 */
static TPGEN_UNUSED int TPGenFinish(TPGenCall* call) {
  int32_t i;
  for (i = 0; i < call->nargs; ++i) {
    if (call->args[i].type_index == kTPTensor) TPAnyRelease((TPAny*)&call->args[i]);
  }
  if (!call->failed) return 0;
  TPAnyRelease(call->result);
  if (!call->recorded) TPErrorSet(call->kind, call->message);
  return -1;
}

#ifdef __cplusplus
}
#endif

#endif /* TENSORPLUG_GENERATED_H_ */
