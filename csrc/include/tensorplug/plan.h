/*
 * tensorplug/plan.h -- the call plan: how a framework's compiled op kernel runs a function.
 *
 * Pure C (C11 or C++), implemented by libtensorplug with no Python. A framework adapter
 * that runs tensorplug functions inside its own dispatcher or compiler (torch's dispatcher,
 * an XLA custom call, paddle's operator, a third party's) does three things per call:
 * read its framework's values into TPAny arguments (DLTensor views, scalars, lists), bind
 * its stream and allocator, and check what the function returned against the op's
 * declaration. The first is the framework's; the other two are the plan's, the same for
 * every framework:
 *
 *   TPPlanSpec spec = {...};              (once per op: the function and the op's declared facts)
 *   TPPlanCreate(&spec, &plan);
 *   ...per call:
 *   TPPlanPrepare(plan, args, device, expected);          (checks the arguments, evaluates the output rule)
 *   TPPlanInvoke(plan, args, &binding, expected, &result); (binds, calls, restores, checks the results)
 *
 * The output rule is a small program compiled once, in Python, from the op's declaration
 * (tensorplug.plans.compile_outputs): each output's shape from a tensor argument, an int
 * list argument or one program per dimension; its dtype and device from an argument or
 * fixed. The enumerations below are that program's encoding; tensorplug.plans mirrors
 * them and a test compares the two.
 *
 * Errors: functions that can fail return 0 on success and -1 on failure, with the error
 * recorded for the calling thread (TPErrorGet). Its kind is a Python exception name; its
 * message names the op: "<op>(): <what>" for an argument, a rule or the function's own
 * error (the function's kind kept), "op '<op>' returned ..." for a result that breaks the
 * declaration.
 */
#ifndef TENSORPLUG_PLAN_H_
#define TENSORPLUG_PLAN_H_

#include "tensorplug/c_api.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct TPPlanObj* TPPlanHandle;

/* What a parameter is, as a framework hands it over (the signature kinds, see vocabulary.h). */
typedef enum {
  kTPParamView = 0,   /* a DLTensor view (kTPDLTensorPtr), borrowed for the call ("view", "mview") */
  kTPParamTensor = 1, /* an owning tensor (kTPTensor), moved into the function ("tensor") */
  kTPParamInt = 2,
  kTPParamFloat = 3,
  kTPParamBool = 4,
  kTPParamStr = 5,    /* kTPRawStr or kTPStr */
  kTPParamDevice = 6,
  kTPParamDType = 7,
  kTPParamViews = 8,  /* a list of views (kTPArray of kTPDLTensorPtr) */
  kTPParamInts = 9,   /* a list of ints (kTPIntArray) */
} TPParamKind;

typedef struct {
  const char* name;  /* for messages */
  int32_t kind;      /* a TPParamKind */
  uint8_t optional;  /* may be None (kTPNone) */
  uint8_t written;   /* the function writes it (views, lists of views): checked for overlap */
  uint8_t reserved[2];
} TPPlanParam;

/* One step of a dimension program (reverse Polish; operands a, b, c as the op says). */
typedef enum {
  kTPRuleConst = 0,    /* push a */
  kTPRuleInt = 1,      /* push int argument a */
  kTPRuleDim = 2,      /* push shape[b] of tensor argument a (b < 0 counts from the end) */
  kTPRuleItem = 3,     /* push item b of int list argument a */
  kTPRuleLen = 4,      /* push the length of list argument a */
  kTPRuleListDim = 5,  /* push shape[c] of item b of tensor list argument a */
  kTPRuleAdd = 6,      /* pop r, pop l, push l + r (and so on) */
  kTPRuleSub = 7,
  kTPRuleMul = 8,
  kTPRuleFloorDiv = 9, /* Python's //: rounds toward negative infinity */
  kTPRuleMod = 10,     /* Python's %: the sign of the divisor */
  kTPRuleNeg = 11,     /* pop x, push -x */
} TPRuleOp;

typedef struct {
  int32_t op; /* a TPRuleOp */
  int32_t reserved;
  int64_t a, b, c;
} TPRuleStep;

/* Where an output's shape, dtype or device comes from. */
typedef enum {
  kTPFromTensor = 0,  /* tensor argument `param`'s */
  kTPFromInts = 1,    /* shape: int list argument `param` */
  kTPFromDims = 2,    /* shape: one program per dimension */
  kTPFromViews = 3,   /* dtype: the first tensor of list argument `param` */
  kTPFromDType = 4,   /* dtype: dtype argument `param` */
  kTPFromFixed = 5,   /* dtype, device: the rule's own */
  kTPFromPrimary = 6, /* device: the call's device (TPPlanPrepare's `device`) */
  kTPFromDevice = 7,  /* device: device argument `param` */
} TPRuleFrom;

/* The output rule of one returned tensor. */
typedef struct {
  int32_t shape_from, shape_param;
  int32_t ndim;               /* kTPFromDims: the number of dimensions */
  const int32_t* dim_steps;   /* kTPFromDims: the number of steps of each dimension's program */
  const TPRuleStep* steps;    /* kTPFromDims: every dimension's program, one after the other */
  int32_t dtype_from, dtype_param;
  DLDataType dtype;           /* kTPFromFixed */
  int32_t device_from, device_param;
  DLDevice device;            /* kTPFromFixed */
} TPOutputRule;

typedef struct {
  const char* op;            /* the op's name ("ns::name"): every error names it */
  TPFunctionHandle function; /* the plan keeps a reference */
  int32_t num_params;
  const TPPlanParam* params;
  int32_t num_outputs;       /* the tensors the function returns (0: none, 1: one, more: a tuple) */
  /* One per returned tensor; or NULL where the framework sized the results itself (XLA's
   * result buffers, lent to the call): the plan then checks the count alone. */
  const TPOutputRule* outputs;
} TPPlanSpec;

/*
 * A plan for `spec` (copied: the spec's arrays and strings may go after the call). Checks
 * the spec: kinds, rule sources that name a parameter of the right kind, programs that
 * keep their stack within bounds. The plan holds one reference; release it with
 * TPPlanRelease (plans that compiled code may still call are usually kept for the process).
 */
TP_API int TPPlanCreate(const TPPlanSpec* spec, TPPlanHandle* out);
TP_API void TPPlanRetain(TPPlanHandle plan);
TP_API void TPPlanRelease(TPPlanHandle plan);
TP_API const char* TPPlanGetName(TPPlanHandle plan);
/* The plan's parameters (`*count` of them), as given to TPPlanCreate; valid while the plan lives. */
TP_API const TPPlanParam* TPPlanGetParams(TPPlanHandle plan, int32_t* count);
TP_API int32_t TPPlanGetNumOutputs(TPPlanHandle plan);

/* What the output rule declares for one returned tensor. */
typedef struct {
  int32_t ndim;
  DLDataType dtype;
  DLDevice device;
  int64_t shape[TP_MAX_NDIM];
} TPTensorSpec;

/*
 * Before the call (the function takes owning tensor arguments): checks the arguments
 * against the declaration -- a written view, or an item of a written list, whose elements
 * overlap in memory is refused (ValueError, naming the argument) -- and evaluates the
 * output rule into TPPlanGetNumOutputs(plan) specs at `expected` (none for a plan made
 * without rules). `device` is the call's
 * device (kTPFromPrimary). Fails (IndexError, ValueError, ZeroDivisionError, naming the op)
 * on arguments the rule cannot be evaluated on.
 */
TP_API int TPPlanPrepare(TPPlanHandle plan, const TPAny* args, DLDevice device, TPTensorSpec* expected);

/* What a call binds for the function, restored when it returns. */
typedef struct {
  DLDevice device; /* the call's device: its stream is bound unless it is the CPU */
  void* stream;
  /* The allocator of Tensor::FromEnvAlloc (TPEnvAllocTensor) during the call; NULL keeps the thread's. */
  DLPackManagedTensorAllocator allocator;
  /* Result buffers lent to the call's allocation requests (TPEnvLend), or NULL. */
  TPLentTensors* lent;
} TPPlanBinding;

/*
 * Runs the function on `args` (one TPAny per parameter, kTPNone for None):
 *  1. with `expected` NULL, checks the arguments as TPPlanPrepare does (a caller that ran
 *     TPPlanPrepare passes its specs, and the checks are not repeated);
 *  2. binds `binding`'s stream, allocator and lent results, calls the function, restores them;
 *  3. checks the result: as many tensors as the plan declares and, with `expected`, each
 *     matching expected[k] in shape, dtype and device.
 * On success `*result` is the function's result (kTPNone, a kTPTensor or a kTPTuple of
 * them), owned by the caller. On failure nothing is left to release in `*result`. Owning
 * tensor arguments (kTPTensor) are consumed in every case, as a call consumes them.
 */
TP_API int TPPlanInvoke(TPPlanHandle plan, TPAny* args, const TPPlanBinding* binding, const TPTensorSpec* expected,
                        TPAny* result);

#ifdef __cplusplus
} /* extern "C" */

#include <cstddef>
#include <memory>

namespace tensorplug {

/*
 * `n` values of T for one call of an op kernel (TPPlanInvoke's arguments, their views and
 * strides): in the kernel's frame up to kInline, on the heap only past it, so that a common
 * call allocates nothing. Like a local array, trivial values start uninitialized.
 */
template <class T, size_t kInline>
struct FrameArray {
  T inline_items[kInline];
  std::unique_ptr<T[]> heap;
  T* data;
  explicit FrameArray(size_t n) : data(n <= kInline ? inline_items : (heap.reset(new T[n]), heap.get())) {}
  FrameArray(const FrameArray&) = delete;
  FrameArray& operator=(const FrameArray&) = delete;
};

}  // namespace tensorplug
#endif

#endif /* TENSORPLUG_PLAN_H_ */
