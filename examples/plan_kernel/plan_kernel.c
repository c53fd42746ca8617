/*
 * A third party's compiled op kernel on the public call plan (tensorplug/plan.h), in plain C11.
 *
 * "rec" is an imaginary array framework whose tensors are plain records (a data pointer, a
 * shape, strides in elements, a dtype). Its engine runs any tensorplug op, given the op's
 * plan (tensorplug.plans.make(op) in Python: a capsule "tensorplug.TPPlanHandle"), with no
 * Python on the call path. Per call, rec_call does the three things plan.h describes:
 *
 *   1. reads the framework's values into TPAny arguments, one per parameter of the plan:
 *      tensors as borrowed DLTensor views (kTPDLTensorPtr, TP_ANY_FLAG_READ_ONLY for a
 *      read-only record), ints, floats and bools as scalars, None as kTPNone;
 *   2. TPPlanPrepare with the call's device (the CPU): the plan refuses a written view whose
 *      elements overlap and evaluates the op's output rule into one TPTensorSpec per result;
 *   3. TPPlanInvoke with a TPPlanBinding (the CPU, no stream, and rec_allocate, rec's
 *      allocator, so the tensors the function allocates with Tensor::FromEnvAlloc are rec's),
 *      then hands each result (a kTPTensor, owned by the caller) back as a record that owns it.
 *
 * Errors follow c_api.h: 0 on success, -1 with the error recorded for the thread; rec_call
 * copies it (TPErrorGet) into the caller's buffer as "<kind>: <message>", the kind a Python
 * exception name for the framework to raise as its own.
 *
 *   cc -std=c11 -shared $(tensorplug config --cflags) plan_kernel.c \
 *      $(tensorplug config --ldflags --libs) -o libplan_kernel.so
 *
 * or with CMakeLists.txt here (find_package(tensorplug)). The flags hide every symbol not
 * marked TP_EXPORT; rec's functions below are, for rec's runtime to call. Here that runtime
 * is Python's ctypes: tests/kit/test_plan_out_of_tree.py builds this file both ways, out of
 * the tree, and runs ops through it.
 */
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <tensorplug/plan.h>

#define REC_MAX_NDIM 8
#define REC_MAX_ARGS 16
#define REC_MAX_RESULTS 4

/* A rec tensor. A result owns its memory through `owner` (release it with rec_tensor_free). */
typedef struct {
  void* data;
  int32_t ndim;
  uint8_t dtype_code; /* DLPack's: kDLInt 0, kDLUInt 1, kDLFloat 2 */
  uint8_t dtype_bits;
  uint8_t read_only;
  uint8_t reserved;
  int64_t shape[REC_MAX_NDIM];
  int64_t strides[REC_MAX_NDIM]; /* in elements */
  DLManagedTensorVersioned* owner; /* NULL for the caller's own tensors */
} RecTensor;

typedef enum { REC_NONE = 0, REC_TENSOR = 1, REC_INT = 2, REC_FLOAT = 3, REC_BOOL = 4 } RecKind;

/* A rec value, as a rec program passes it to an op. */
typedef struct {
  int32_t kind; /* a RecKind */
  RecTensor* tensor;
  int64_t i;    /* REC_INT, REC_BOOL */
  double f;     /* REC_FLOAT */
} RecValue;

/* ---- rec's allocator: every tensor rec holds is made here ---- */

static atomic_llong rec_allocated; /* tensors made, ever */
static atomic_llong rec_live;      /* tensors made and not yet freed */

typedef struct {
  DLManagedTensorVersioned managed;
  int64_t shape[TP_MAX_NDIM];
} RecBlock;

static void rec_deleter(DLManagedTensorVersioned* self) {
  free(self->dl_tensor.data);
  free(self); /* the RecBlock: `managed` is its first member */
  atomic_fetch_sub(&rec_live, 1);
}

/* A DLPackManagedTensorAllocator: a new row-major tensor like `prototype`. */
static int rec_allocate(DLTensor* prototype, DLManagedTensorVersioned** out, void* error_ctx,
                        void (*set_error)(void* error_ctx, const char* kind, const char* message)) {
  /* TPEnvAllocTensor refused any request of more than 2^63 - 1 bytes before asking. */
  size_t bytes = ((size_t)prototype->dtype.bits * prototype->dtype.lanes + 7) / 8;
  RecBlock* block = calloc(1, sizeof *block);
  int32_t k;
  for (k = 0; k < prototype->ndim; ++k) bytes *= (size_t)prototype->shape[k];
  if (block != NULL) block->managed.dl_tensor.data = malloc(bytes > 0 ? bytes : 1);
  if (block == NULL || block->managed.dl_tensor.data == NULL) {
    free(block);
    set_error(error_ctx, "MemoryError", "rec: out of memory");
    return -1;
  }
  block->managed.version.major = DLPACK_MAJOR_VERSION;
  block->managed.version.minor = DLPACK_MINOR_VERSION;
  block->managed.deleter = rec_deleter;
  block->managed.dl_tensor.device = prototype->device;
  block->managed.dl_tensor.ndim = prototype->ndim;
  block->managed.dl_tensor.dtype = prototype->dtype;
  memcpy(block->shape, prototype->shape, sizeof(int64_t) * (size_t)prototype->ndim);
  block->managed.dl_tensor.shape = block->shape;
  block->managed.dl_tensor.strides = NULL; /* row-major compact */
  atomic_fetch_add(&rec_allocated, 1);
  atomic_fetch_add(&rec_live, 1);
  *out = &block->managed;
  return 0;
}

TP_EXPORT int64_t rec_allocations(void) { return atomic_load(&rec_allocated); }
TP_EXPORT int64_t rec_live_tensors(void) { return atomic_load(&rec_live); }

TP_EXPORT void rec_tensor_free(RecTensor* t) {
  if (t->owner != NULL && t->owner->deleter != NULL) t->owner->deleter(t->owner);
  t->owner = NULL;
  t->data = NULL;
}

/* ---- ops: a plan rec keeps while the op is registered ---- */

/* Registering an op keeps a reference to its plan; the Python capsule may go. */
TP_EXPORT TPPlanHandle rec_op_register(TPPlanHandle plan) {
  TPPlanRetain(plan);
  return plan;
}

TP_EXPORT void rec_op_unregister(TPPlanHandle plan) { TPPlanRelease(plan); }

/* The thread's error (a failed TPPlan* call, or one of rec's recorded with TPErrorSet). */
static int fail(char* error, size_t error_size) {
  const char* kind = "RuntimeError";
  const char* message = "unknown error";
  TPErrorGet(&kind, &message);
  snprintf(error, error_size, "%s: %s", kind, message);
  return -1;
}

static int fail_arg(TPPlanHandle op, const TPPlanParam* param, const char* what, char* error, size_t error_size) {
  char message[256];
  snprintf(message, sizeof message, "%s() argument '%s': %s", TPPlanGetName(op), param->name, what);
  TPErrorSet("TypeError", message);
  return fail(error, error_size);
}

/* Step 1 for a tensor: a borrowed view of the record. */
static void view_of(RecTensor* t, DLTensor* view) {
  memset(view, 0, sizeof *view);
  view->data = t->data;
  view->device.device_type = kDLCPU;
  view->ndim = t->ndim;
  view->dtype.code = t->dtype_code;
  view->dtype.bits = t->dtype_bits;
  view->dtype.lanes = 1;
  view->shape = t->shape;
  view->strides = t->strides;
}

/* Step 3's hand-back: the record owns the managed tensor from now on. */
static void record_of(DLManagedTensorVersioned* managed, RecTensor* t) {
  const DLTensor* dl = &managed->dl_tensor;
  int64_t stride = 1;
  int32_t k;
  memset(t, 0, sizeof *t);
  t->data = (char*)dl->data + dl->byte_offset;
  t->ndim = dl->ndim;
  t->dtype_code = dl->dtype.code;
  t->dtype_bits = dl->dtype.bits;
  for (k = dl->ndim - 1; k >= 0; --k) { /* NULL strides: row-major compact */
    t->shape[k] = dl->shape[k];
    t->strides[k] = dl->strides != NULL ? dl->strides[k] : stride;
    stride *= dl->shape[k];
  }
  t->owner = managed;
}

/*
 * Runs `op` on `args` (one per parameter of its plan). On success *num_results records in
 * `results` own the op's results. On failure returns -1 with "<kind>: <message>" in `error`.
 */
TP_EXPORT int rec_call(TPPlanHandle op, RecValue* args, int32_t nargs, RecTensor* results, int32_t* num_results,
                       char* error, size_t error_size) {
  TPAny packed[REC_MAX_ARGS];
  DLTensor views[REC_MAX_ARGS];
  TPTensorSpec expected[REC_MAX_RESULTS];
  const DLDevice cpu = {kDLCPU, 0};
  TPPlanBinding binding;
  TPAny result;
  TPAny* items;
  int32_t nparams, count, i;
  char message[256];
  const TPPlanParam* params = TPPlanGetParams(op, &nparams);

  *num_results = 0;
  if (nparams > REC_MAX_ARGS || TPPlanGetNumOutputs(op) > REC_MAX_RESULTS) {
    snprintf(message, sizeof message, "%s(): rec runs ops of at most %d parameters and %d results",
             TPPlanGetName(op), REC_MAX_ARGS, REC_MAX_RESULTS);
    TPErrorSet("NotImplementedError", message);
    return fail(error, error_size);
  }
  if (nargs != nparams) {
    snprintf(message, sizeof message, "%s() takes %d arguments (%d given)", TPPlanGetName(op), (int)nparams,
             (int)nargs);
    TPErrorSet("TypeError", message);
    return fail(error, error_size);
  }
  /* 1. rec's values as the plan's arguments (the views borrow the records for the call). */
  for (i = 0; i < nparams; ++i) {
    const TPPlanParam* p = &params[i];
    const RecValue* v = &args[i];
    memset(&packed[i], 0, sizeof packed[i]);
    if (v->kind == REC_NONE) {
      if (!p->optional) return fail_arg(op, p, "expected a value, got None", error, error_size);
      packed[i].type_index = kTPNone;
    } else if (p->kind == kTPParamView && v->kind == REC_TENSOR) {
      if (v->tensor->ndim > REC_MAX_NDIM) {
        return fail_arg(op, p, "expected a tensor of at most 8 dimensions", error, error_size);
      }
      if (p->written && v->tensor->read_only) {
        return fail_arg(op, p, "expected a writable tensor (the kernel writes it), got a read-only one",
                        error, error_size);
      }
      view_of(v->tensor, &views[i]);
      packed[i].type_index = kTPDLTensorPtr;
      packed[i].flags = v->tensor->read_only ? TP_ANY_FLAG_READ_ONLY : 0u;
      packed[i].v_dltensor = &views[i];
    } else if (p->kind == kTPParamInt && v->kind == REC_INT) {
      packed[i].type_index = kTPInt;
      packed[i].v_int64 = v->i;
    } else if (p->kind == kTPParamFloat && (v->kind == REC_FLOAT || v->kind == REC_INT)) {
      packed[i].type_index = kTPFloat;
      packed[i].v_float64 = v->kind == REC_FLOAT ? v->f : (double)v->i;
    } else if (p->kind == kTPParamBool && v->kind == REC_BOOL) {
      packed[i].type_index = kTPBool;
      packed[i].v_int64 = v->i != 0;
    } else {
      static const char* const param_kinds[] = {"view", "tensor", "int", "float", "bool",
                                                "str", "device", "dtype", "views", "ints"};
      static const char* const rec_kinds[] = {"None", "tensor", "int", "float", "bool"};
      char what[128];
      snprintf(what, sizeof what, "expected a value for a '%s' parameter, got a rec %s", param_kinds[p->kind],
               v->kind >= REC_NONE && v->kind <= REC_BOOL ? rec_kinds[v->kind] : "value of unknown kind");
      return fail_arg(op, p, what, error, error_size);
    }
  }
  /* 2. The plan's checks, and the declared results of these arguments. */
  if (TPPlanPrepare(op, packed, cpu, expected) != 0) return fail(error, error_size);
  /* 3. The call, with rec's allocator bound; the plan restores what was bound before. */
  binding.device = cpu;
  binding.stream = NULL;
  binding.allocator = rec_allocate;
  binding.lent = NULL;
  if (TPPlanInvoke(op, packed, &binding, expected, &result) != 0) return fail(error, error_size);
  /* kTPNone, one kTPTensor, or a kTPTuple of them (TPPlanInvoke checked their number). */
  count = result.type_index == kTPTuple ? result.v_tuple->size : result.type_index == kTPTensor ? 1 : 0;
  items = result.type_index == kTPTuple ? result.v_tuple->items : &result;
  for (i = 0; i < count; ++i) {
    if (items[i].v_tensor->dl_tensor.ndim > REC_MAX_NDIM) {
      TPAnyRelease(&result);
      snprintf(message, sizeof message, "%s(): rec holds tensors of at most 8 dimensions", TPPlanGetName(op));
      TPErrorSet("NotImplementedError", message);
      return fail(error, error_size);
    }
  }
  for (i = 0; i < count; ++i) {
    record_of(items[i].v_tensor, &results[i]);
    items[i].type_index = kTPNone; /* moved into the record */
  }
  if (result.type_index == kTPTuple) TPAnyRelease(&result); /* the emptied tuple */
  *num_results = count;
  return 0;
}
