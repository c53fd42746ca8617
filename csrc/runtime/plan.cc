// The call plan (tensorplug/plan.h): what every framework's op kernel shares -- the
// declared facts checked once, the output rule evaluated, the written arguments checked,
// the stream and allocator bound around the call, the results checked.
//
// Over 500 lines: one idea, the plan, whose checks when it is made (SpecCheck) are what let
// the per-call evaluation (EvalDim, EvalRule) run without re-checking; they are read together.
#include "runtime_internal.h"  // first: exports the TP_API functions
#include "tensorplug/plan.h"

#include <atomic>
#include <cstring>
#include <new>
#include <string>
#include <vector>

#include "overlap.h"
#include "tensorplug/dtype.h"

namespace {

using tensorplug::DataTypeToString;
using tensorplug::DeviceToString;
using tensorplug::runtime::Fail;

// A dimension program never needs a deeper stack than this (a rule deeper still is refused
// when the plan is made, not per call).
constexpr int32_t kMaxDepth = 32;

struct Rule {
  int32_t shape_from, shape_param;
  std::vector<std::vector<TPRuleStep>> dims;
  int32_t dtype_from, dtype_param;
  DLDataType dtype;
  int32_t device_from, device_param;
  DLDevice device;
};

}  // namespace

struct TPPlanObj {
  std::atomic<int64_t> refcount{1};
  std::string op;
  TPFunctionHandle function = nullptr;
  TPPackedFunc entry = nullptr;
  void* self = nullptr;
  std::vector<std::string> names;
  std::vector<TPPlanParam> params;  // .name points into `names`
  int32_t num_outputs = 0;
  std::vector<Rule> outputs;        // empty for a plan without rules (the caller checks shapes)
  std::vector<int32_t> written;     // the written parameters, in order
  int32_t num_params = 0;           // params.size(), read on every call
  int32_t num_written = 0;          // written.size(), read on every call
};

namespace {

std::string ShapeText(DLDataType dtype, int64_t ndim, const int64_t* shape) {
  std::string text = DataTypeToString(dtype) + "[";
  for (int64_t i = 0; i < ndim; ++i) text += (i ? ", " : "") + std::to_string(shape[i]);
  return text + "]";
}

// "<op>(): <what>", the error every per-call check records.
[[gnu::noinline]] int FailOp(const TPPlanObj& plan, const char* kind, const std::string& what) {
  return Fail(kind, plan.op + "(): " + what);
}

// ---- making a plan: every fact checked once ----
bool IsTensorKind(int32_t k) { return k == kTPParamView || k == kTPParamTensor; }

struct SpecCheck {
  const TPPlanSpec& spec;
  std::string error;

  bool Param(int32_t p, bool (*ok)(int32_t), const char* what, const std::string& where) {
    if (p < 0 || p >= spec.num_params) {
      error = where + " names parameter " + std::to_string(p) + " of " + std::to_string(spec.num_params);
    } else if (!ok(spec.params[p].kind)) {
      error = where + " reads parameter '" + spec.params[p].name + "', which is not " + what;
    }
    return error.empty();
  }

  bool Program(const TPRuleStep* steps, int32_t n, const std::string& where) {
    if (n <= 0) return (error = where + " is empty"), false;
    int32_t depth = 0;
    for (int32_t s = 0; s < n; ++s) {
      const TPRuleStep& step = steps[s];
      const std::string at = where + " step " + std::to_string(s);
      switch (step.op) {
        case kTPRuleConst: break;
        case kTPRuleInt:
          if (!Param(static_cast<int32_t>(step.a), [](int32_t k) { return k == kTPParamInt; }, "an int", at)) {
            return false;
          }
          break;
        case kTPRuleDim:
          if (!Param(static_cast<int32_t>(step.a), IsTensorKind, "a tensor", at)) return false;
          break;
        case kTPRuleItem:
          if (!Param(static_cast<int32_t>(step.a), [](int32_t k) { return k == kTPParamInts; }, "an int list", at)) {
            return false;
          }
          break;
        case kTPRuleLen:
          if (!Param(static_cast<int32_t>(step.a),
                     [](int32_t k) { return k == kTPParamInts || k == kTPParamViews; }, "a list", at)) {
            return false;
          }
          break;
        case kTPRuleListDim:
          if (!Param(static_cast<int32_t>(step.a), [](int32_t k) { return k == kTPParamViews; }, "a tensor list",
                     at)) {
            return false;
          }
          break;
        case kTPRuleNeg:
          if (depth < 1) return (error = at + " negates an empty stack"), false;
          continue;  // pops one, pushes one
        case kTPRuleAdd: case kTPRuleSub: case kTPRuleMul: case kTPRuleFloorDiv: case kTPRuleMod:
          if (depth < 2) return (error = at + " needs two operands"), false;
          --depth;
          continue;
        default: return (error = at + " has unknown op " + std::to_string(step.op)), false;
      }
      if (++depth > kMaxDepth) return (error = where + " is deeper than " + std::to_string(kMaxDepth)), false;
    }
    if (depth != 1) return (error = where + " leaves " + std::to_string(depth) + " values"), false;
    return true;
  }

  bool Output(int32_t k, const TPOutputRule& r) {
    const std::string where = "output " + std::to_string(k);
    switch (r.shape_from) {
      case kTPFromTensor:
        if (!Param(r.shape_param, IsTensorKind, "a tensor", where + " shape")) return false;
        break;
      case kTPFromInts:
        if (!Param(r.shape_param, [](int32_t k) { return k == kTPParamInts; }, "an int list", where + " shape")) {
          return false;
        }
        break;
      case kTPFromDims: {
        if (r.ndim < 0 || r.ndim > TP_MAX_NDIM) return (error = where + " has " + std::to_string(r.ndim) +
                                                                " dimensions"), false;
        if (r.ndim > 0 && (r.dim_steps == nullptr || r.steps == nullptr)) {
          return (error = where + " has no dimension programs"), false;
        }
        const TPRuleStep* steps = r.steps;
        for (int32_t d = 0; d < r.ndim; ++d) {
          if (!Program(steps, r.dim_steps[d], where + " dimension " + std::to_string(d))) return false;
          steps += r.dim_steps[d];
        }
        break;
      }
      default: return (error = where + " takes its shape from source " + std::to_string(r.shape_from)), false;
    }
    switch (r.dtype_from) {
      case kTPFromTensor:
        if (!Param(r.dtype_param, IsTensorKind, "a tensor", where + " dtype")) return false;
        break;
      case kTPFromViews:
        if (!Param(r.dtype_param, [](int32_t k) { return k == kTPParamViews; }, "a tensor list", where + " dtype")) {
          return false;
        }
        break;
      case kTPFromDType:
        if (!Param(r.dtype_param, [](int32_t k) { return k == kTPParamDType; }, "a dtype", where + " dtype")) {
          return false;
        }
        break;
      case kTPFromFixed: break;
      default: return (error = where + " takes its dtype from source " + std::to_string(r.dtype_from)), false;
    }
    switch (r.device_from) {
      case kTPFromTensor:
        if (!Param(r.device_param, IsTensorKind, "a tensor", where + " device")) return false;
        break;
      case kTPFromDevice:
        if (!Param(r.device_param, [](int32_t k) { return k == kTPParamDevice; }, "a device", where + " device")) {
          return false;
        }
        break;
      case kTPFromPrimary:
      case kTPFromFixed: break;
      default: return (error = where + " takes its device from source " + std::to_string(r.device_from)), false;
    }
    return true;
  }
};

// ---- per call ----
int64_t FloorDiv(int64_t a, int64_t b) {
  int64_t q = a / b;
  if ((a % b != 0) && ((a < 0) != (b < 0))) --q;
  return q;
}

// The per-call failures, out of line and cold: the evaluation itself builds no string.
[[gnu::noinline, gnu::cold]] void NoneError(const TPPlanObj& plan, int64_t p) {
  FailOp(plan, "ValueError", "output rule: argument '" + plan.names[p] + "' is None");
}
[[gnu::noinline, gnu::cold]] void TypeIndexError(const TPPlanObj& plan, int64_t p, int32_t got, int32_t expected) {
  FailOp(plan, "TypeError", "output rule: argument '" + plan.names[p] + "' has type index " + std::to_string(got) +
                                ", expected " + std::to_string(expected));
}
[[gnu::noinline, gnu::cold]] void EmptyListError(const TPPlanObj& plan, int64_t p) {
  FailOp(plan, "ValueError", "output rule: dtype from '" + plan.names[p] + "': the list is empty");
}
// "output rule: <a><x><b><y><c>" (a number printed where its text follows it).
[[gnu::noinline, gnu::cold]] void RuleError(const TPPlanObj& plan, const char* kind, const char* a, int64_t x,
                                            const char* b, int64_t y, const char* c) {
  std::string what = std::string("output rule: ") + a;
  if (b != nullptr) what += std::to_string(x) + b;
  if (c != nullptr) what += std::to_string(y) + c;
  FailOp(plan, kind, what);
}

// Tensor argument `p`, as a rule reads it (a view, or an owning tensor before the call
// moves it); nullptr after recording the error when it is None.
const DLTensor* TensorArg(const TPPlanObj& plan, const TPAny* args, int64_t p) {
  const TPAny& a = args[p];
  if (a.type_index == kTPTensor) return &a.v_tensor->dl_tensor;
  if (a.type_index == kTPDLTensorPtr) return a.v_dltensor;
  return NoneError(plan, p), nullptr;
}

// The argument of a kind the rule reads, checked (a framework's engine may hand over
// anything: the plan trusts no caller).
bool ArgIs(const TPPlanObj& plan, const TPAny* args, int64_t p, int32_t type_index) {
  if (args[p].type_index == type_index) return true;
  return TypeIndexError(plan, p, args[p].type_index, type_index), false;
}

bool Dim(const TPPlanObj& plan, const DLTensor& t, int64_t i, int64_t* out) {
  const int64_t k = i < 0 ? i + t.ndim : i;
  if (k < 0 || k >= t.ndim) {
    return RuleError(plan, "IndexError", "dimension ", i, " of a ", t.ndim, "-d tensor"), false;
  }
  *out = t.shape[k];
  return true;
}

bool EvalDim(const TPPlanObj& plan, const std::vector<TPRuleStep>& steps, const TPAny* args, int64_t* out) {
  int64_t stack[kMaxDepth];
  int32_t top = 0;  // TPPlanCreate proved the depth stays within [1, kMaxDepth]
  for (const TPRuleStep& s : steps) {
    switch (s.op) {
      case kTPRuleConst: stack[top++] = s.a; break;
      case kTPRuleInt:
        if (!ArgIs(plan, args, s.a, kTPInt)) return false;
        stack[top++] = args[s.a].v_int64;
        break;
      case kTPRuleDim: {
        const DLTensor* t = TensorArg(plan, args, s.a);
        if (t == nullptr || !Dim(plan, *t, s.b, &stack[top++])) return false;
        break;
      }
      case kTPRuleItem: {
        if (!ArgIs(plan, args, s.a, kTPIntArray)) return false;
        const TPIntArray& a = *args[s.a].v_int_array;
        const int64_t k = s.b < 0 ? s.b + a.size : s.b;
        if (k < 0 || k >= a.size) return RuleError(plan, "IndexError", "item ", s.b, " of ", a.size, ""), false;
        stack[top++] = a.data[k];
        break;
      }
      case kTPRuleLen:
        if (args[s.a].type_index == kTPArray) {
          stack[top++] = args[s.a].v_array->size;
        } else if (ArgIs(plan, args, s.a, kTPIntArray)) {
          stack[top++] = args[s.a].v_int_array->size;
        } else {
          return false;
        }
        break;
      case kTPRuleListDim: {
        if (!ArgIs(plan, args, s.a, kTPArray)) return false;
        const TPArray& a = *args[s.a].v_array;
        const int64_t k = s.b < 0 ? s.b + a.size : s.b;
        if (k < 0 || k >= a.size) {
          return RuleError(plan, "IndexError", "item ", s.b, " of ", a.size, " tensors"), false;
        }
        if (!Dim(plan, *a.items[k].v_dltensor, s.c, &stack[top++])) return false;
        break;
      }
      case kTPRuleNeg: stack[top - 1] = -stack[top - 1]; break;
      default: {
        const int64_t r = stack[--top], l = stack[--top];
        if ((s.op == kTPRuleFloorDiv || s.op == kTPRuleMod) && r == 0) {
          return RuleError(plan, "ZeroDivisionError", "division by zero", 0, nullptr, 0, nullptr), false;
        }
        stack[top++] = s.op == kTPRuleAdd ? l + r : s.op == kTPRuleSub ? l - r : s.op == kTPRuleMul ? l * r
                       : s.op == kTPRuleFloorDiv ? FloorDiv(l, r) : l - FloorDiv(l, r) * r;
      }
    }
  }
  *out = stack[0];
  return true;
}

bool EvalRule(const TPPlanObj& plan, const Rule& rule, const TPAny* args, DLDevice device, TPTensorSpec* spec) {
  switch (rule.shape_from) {
    case kTPFromTensor: {
      const DLTensor* t = TensorArg(plan, args, rule.shape_param);
      if (t == nullptr) return false;
      spec->ndim = t->ndim;
      std::memcpy(spec->shape, t->shape, sizeof(int64_t) * t->ndim);
      break;
    }
    case kTPFromInts: {
      if (!ArgIs(plan, args, rule.shape_param, kTPIntArray)) return false;
      const TPIntArray& a = *args[rule.shape_param].v_int_array;
      if (a.size > TP_MAX_NDIM) {
        return RuleError(plan, "ValueError", "a shape of ", a.size, " dimensions", 0, nullptr), false;
      }
      spec->ndim = static_cast<int32_t>(a.size);
      std::memcpy(spec->shape, a.data, sizeof(int64_t) * a.size);
      break;
    }
    default:
      spec->ndim = static_cast<int32_t>(rule.dims.size());
      for (size_t i = 0; i < rule.dims.size(); ++i) {
        if (!EvalDim(plan, rule.dims[i], args, &spec->shape[i])) return false;
      }
  }
  switch (rule.dtype_from) {
    case kTPFromTensor: {
      const DLTensor* t = TensorArg(plan, args, rule.dtype_param);
      if (t == nullptr) return false;
      spec->dtype = t->dtype;
      break;
    }
    case kTPFromViews: {
      if (!ArgIs(plan, args, rule.dtype_param, kTPArray)) return false;
      const TPArray& a = *args[rule.dtype_param].v_array;
      if (a.size == 0) {
        return EmptyListError(plan, rule.dtype_param), false;
      }
      spec->dtype = a.items[0].v_dltensor->dtype;
      break;
    }
    case kTPFromDType:
      if (!ArgIs(plan, args, rule.dtype_param, kTPDataType)) return false;
      spec->dtype = args[rule.dtype_param].v_dtype;
      break;
    default: spec->dtype = rule.dtype;
  }
  switch (rule.device_from) {
    case kTPFromTensor: {
      const DLTensor* t = TensorArg(plan, args, rule.device_param);
      if (t == nullptr) return false;
      spec->device = t->device;
      break;
    }
    case kTPFromDevice:
      if (!ArgIs(plan, args, rule.device_param, kTPDevice)) return false;
      spec->device = args[rule.device_param].v_device;
      break;
    case kTPFromPrimary: spec->device = device; break;
    default: spec->device = rule.device;
  }
  return true;
}

// A written view must not have elements sharing memory (overlap.h). `item`: the index in a
// list argument, else -1.
[[gnu::noinline]] bool CheckWritable(const TPPlanObj& plan, int32_t p, int64_t item, const DLTensor& view) {
  using tensorplug::runtime::ElementsOverlap;
  using tensorplug::runtime::Overlap;
  const Overlap overlap = ElementsOverlap(view);
  if (overlap == Overlap::kNone) return true;
  FailOp(plan, "ValueError", "argument '" + plan.names[p] + "'" + (item >= 0 ? " item " + std::to_string(item) : "") +
                                 ": " + tensorplug::runtime::OverlapRefusal(view, overlap));
  return false;
}

// Row-major compact (or no strides): no element shares memory, the layout of nearly every
// written tensor, tested inline.
inline bool Compact(const DLTensor& t) {
  if (t.strides == nullptr) return true;
  int64_t compact = 1;
  for (int32_t k = t.ndim - 1; k >= 0; --k) {
    if (t.shape[k] != 1 && t.strides[k] != compact) return false;
    compact *= t.shape[k];
  }
  return true;
}

bool CheckArguments(const TPPlanObj& plan, const TPAny* args) {
  for (const int32_t p : plan.written) {
    const TPAny& a = args[p];
    if (a.type_index == kTPDLTensorPtr) {
      if (!Compact(*a.v_dltensor) && !CheckWritable(plan, p, -1, *a.v_dltensor)) return false;
    } else if (a.type_index == kTPArray) {
      for (int64_t j = 0; j < a.v_array->size; ++j) {
        const TPAny& item = a.v_array->items[j];
        if (item.type_index == kTPDLTensorPtr && !Compact(*item.v_dltensor) &&
            !CheckWritable(plan, p, j, *item.v_dltensor)) {
          return false;
        }
      }
    }
  }
  return true;
}

// TPPlanInvoke's check of the written views, inline: true when each is a compact view,
// which cannot overlap itself (vouched for by its producer, or seen); CheckArguments
// decides the rest (lists, strided views).
inline bool WrittenCompact(const TPPlanObj& plan, const TPAny* args) {
  const int32_t* written = plan.written.data();
  for (int32_t i = 0; i < plan.num_written; ++i) {
    const TPAny& a = args[written[i]];
    if (a.type_index != kTPDLTensorPtr || !((a.flags & TP_ANY_FLAG_COMPACT) || Compact(*a.v_dltensor))) return false;
  }
  return true;
}

// A call off the CPU: the device's stream bound around it, and restored.
[[gnu::noinline]] int InvokeOnStream(const TPPlanObj& plan, TPAny* args, const TPPlanBinding& binding, TPAny* result) {
  const DLDevice device = binding.device;
  void* saved_stream = TPEnvSetStream(device.device_type, device.device_id, binding.stream);
  const int rc = plan.entry(plan.self, args, plan.num_params, result);
  TPEnvSetStream(device.device_type, device.device_id, saved_stream);
  return rc;
}

[[gnu::noinline]] int ResultError(const TPPlanObj& plan, TPAny* result, const std::string& what) {
  TPAnyRelease(result);
  *result = TPAny{};
  result->type_index = kTPNone;
  return Fail("ValueError", "op '" + plan.op + "' " + what);
}

// The function's result against the declaration: the number of tensors, and each one's
// shape, dtype and device where `expected` holds them.
[[gnu::noinline]] int CheckResult(const TPPlanObj& plan, const TPTensorSpec* expected, TPAny* result) {
  const size_t declared = static_cast<size_t>(plan.num_outputs);
  TPAny* results = result;
  size_t returned = result->type_index == kTPNone ? 0 : 1;
  if (result->type_index == kTPTuple) {
    results = result->v_tuple->items;
    returned = static_cast<size_t>(result->v_tuple->size);
  }
  if (returned != declared) {
    return ResultError(plan, result, "returned " + std::to_string(returned) + " tensor(s), but its output rule declares " +
                                         std::to_string(declared));
  }
  for (size_t k = 0; k < declared; ++k) {
    if (results[k].type_index != kTPTensor) {
      return ResultError(plan, result, "returned a non-tensor value as result " + std::to_string(k));
    }
    if (expected == nullptr || plan.outputs.empty()) continue;
    const DLTensor& t = results[k].v_tensor->dl_tensor;
    const TPTensorSpec& spec = expected[k];
    bool same = t.ndim == spec.ndim && t.dtype.code == spec.dtype.code && t.dtype.bits == spec.dtype.bits &&
                t.dtype.lanes == spec.dtype.lanes && t.device.device_type == spec.device.device_type &&
                t.device.device_id == spec.device.device_id;
    for (int32_t i = 0; same && i < t.ndim; ++i) same = t.shape[i] == spec.shape[i];
    if (!same) {
      return ResultError(plan, result, "returned " + ShapeText(t.dtype, t.ndim, t.shape) + " on " +
                                           DeviceToString(t.device) + " as result " + std::to_string(k) +
                                           ", but its output rule declares " +
                                           ShapeText(spec.dtype, spec.ndim, spec.shape) + " on " +
                                           DeviceToString(spec.device));
    }
  }
  return 0;
}

// The function's own error, renamed to name the op: "<op>(): <message>", its kind kept.
[[gnu::noinline]] int FunctionError(const TPPlanObj& plan) {
  const char* kind = "RuntimeError";
  const char* message = "unknown error";
  TPErrorGet(&kind, &message);
  const std::string k = kind, m = message;
  return Fail(k.c_str(), plan.op + "(): " + m);
}

// The function failed: its error named with the op, and whatever it left in `result` released.
[[gnu::noinline, gnu::cold]] int FunctionFailed(const TPPlanObj& plan, TPAny* result) noexcept {
  TPAnyRelease(result);
  result->type_index = kTPNone;
  try {
    return FunctionError(plan);
  } catch (const std::bad_alloc&) {
    return Fail("MemoryError", "out of memory");
  }
}

// The result against the declaration, the exceptions caught (TPPlanInvoke's slow path).
[[gnu::noinline]] int CheckResultNoexcept(const TPPlanObj& plan, const TPTensorSpec* expected, TPAny* result) noexcept {
  try {
    return CheckResult(plan, expected, result);
  } catch (const std::bad_alloc&) {
    return Fail("MemoryError", "TPPlanInvoke: out of memory");
  }
}

// TPPlanInvoke once its arguments are checked: the thread's environment bound around the
// function (directly, as TPEnvLend and TPEnvSetAllocator would: two stores each way; the
// stream off the CPU only), and the result checked where the common cases leave it to check.
inline __attribute__((always_inline)) int Invoke(const TPPlanObj& plan, TPAny* args, const TPPlanBinding& binding,
                                                 const TPTensorSpec* expected, TPAny* result) {
  tensorplug::runtime::ThreadEnv& env = tensorplug::runtime::tls_env;
  const DLPackManagedTensorAllocator saved_allocator = env.allocator;
  TPLentTensors* const saved_lent = env.lent;
  if (TPLentTensors* lent = binding.lent) {
    lent->previous_allocator = saved_allocator;
    lent->previous = saved_lent;
    env.allocator = TPLentAllocator;
    env.lent = lent;
  } else if (binding.allocator != nullptr) {
    env.allocator = binding.allocator;
  }
  const int rc = binding.device.device_type == kDLCPU ? plan.entry(plan.self, args, plan.num_params, result)
                                                      : InvokeOnStream(plan, args, binding, result);
  env.allocator = saved_allocator;
  env.lent = saved_lent;
  if (rc != 0) return FunctionFailed(plan, result);
  // Common cases inline: nothing returned where nothing is declared (destination passing),
  // or one tensor whose shape is the caller's to check (no rule, no specs).
  const int32_t type = result->type_index;
  if (type == kTPNone && plan.num_outputs == 0) return 0;
  if (type == kTPTensor && plan.num_outputs == 1 && (expected == nullptr || plan.outputs.empty())) return 0;
  return CheckResultNoexcept(plan, expected, result);
}

// TPPlanInvoke for written views that are not all compact: checked in full first. On refusal
// the owning tensor arguments are released, as the call would have consumed them.
[[gnu::noinline]] int InvokeChecked(const TPPlanObj& plan, TPAny* args, const TPPlanBinding& binding,
                                    TPAny* result) noexcept {
  try {
    if (!CheckArguments(plan, args)) {
      for (size_t i = 0; i < plan.params.size(); ++i) {
        if (args[i].type_index == kTPTensor) TPAnyRelease(&args[i]);
      }
      return -1;
    }
  } catch (const std::bad_alloc&) {
    return Fail("MemoryError", "TPPlanInvoke: out of memory");
  }
  return Invoke(plan, args, binding, nullptr, result);
}

}  // namespace

extern "C" {

int TPPlanCreate(const TPPlanSpec* spec, TPPlanHandle* out) {
  if (spec == nullptr || out == nullptr) return Fail("ValueError", "TPPlanCreate: spec and out must not be NULL");
  *out = nullptr;
  const std::string op = spec->op ? spec->op : "";
  if (op.empty()) return Fail("ValueError", "TPPlanCreate: the spec names no op");
  auto fail = [&](const std::string& what) { return Fail("ValueError", "TPPlanCreate: op '" + op + "': " + what); };
  if (spec->function == nullptr) return fail("no function");
  if (spec->num_params < 0 || (spec->num_params > 0 && spec->params == nullptr)) return fail("no parameters");
  if (spec->num_outputs < 0) return fail("a negative number of outputs");
  for (int32_t i = 0; i < spec->num_params; ++i) {
    const TPPlanParam& p = spec->params[i];
    if (p.name == nullptr) return fail("parameter " + std::to_string(i) + " has no name");
    if (p.kind < kTPParamView || p.kind > kTPParamInts) {
      return fail("parameter '" + std::string(p.name) + "' has unknown kind " + std::to_string(p.kind));
    }
    if (p.written && p.kind != kTPParamView && p.kind != kTPParamViews) {
      return fail("parameter '" + std::string(p.name) + "' is written, but is not a view or a list of views");
    }
  }
  SpecCheck check{*spec, {}};
  for (int32_t k = 0; spec->outputs != nullptr && k < spec->num_outputs; ++k) {
    if (!check.Output(k, spec->outputs[k])) return fail(check.error);
  }
  auto* plan = new (std::nothrow) TPPlanObj;
  if (plan == nullptr) return Fail("MemoryError", "TPPlanCreate: out of memory");
  try {
    plan->op = op;
    plan->names.reserve(spec->num_params);
    for (int32_t i = 0; i < spec->num_params; ++i) {
      plan->names.emplace_back(spec->params[i].name);
      if (spec->params[i].written) plan->written.push_back(i);
    }
    plan->params.assign(spec->params, spec->params + spec->num_params);
    plan->num_params = spec->num_params;
    plan->num_written = static_cast<int32_t>(plan->written.size());
    for (int32_t i = 0; i < spec->num_params; ++i) plan->params[i].name = plan->names[i].c_str();
    plan->num_outputs = spec->num_outputs;
    for (int32_t k = 0; spec->outputs != nullptr && k < spec->num_outputs; ++k) {
      const TPOutputRule& r = spec->outputs[k];
      Rule rule{r.shape_from, r.shape_param, {}, r.dtype_from, r.dtype_param, r.dtype,
                r.device_from, r.device_param, r.device};
      if (r.shape_from == kTPFromDims) {
        const TPRuleStep* steps = r.steps;
        for (int32_t d = 0; d < r.ndim; ++d) {
          rule.dims.emplace_back(steps, steps + r.dim_steps[d]);
          steps += r.dim_steps[d];
        }
      }
      plan->outputs.push_back(std::move(rule));
    }
  } catch (const std::bad_alloc&) {
    delete plan;
    return Fail("MemoryError", "TPPlanCreate: out of memory");
  }
  TPFunctionRetain(spec->function);
  plan->function = spec->function;
  plan->entry = TPFunctionGetEntry(spec->function, &plan->self);
  *out = plan;
  return 0;
}

void TPPlanRetain(TPPlanHandle plan) {
  if (plan) plan->refcount.fetch_add(1, std::memory_order_relaxed);
}

void TPPlanRelease(TPPlanHandle plan) {
  if (plan == nullptr || plan->refcount.fetch_sub(1, std::memory_order_acq_rel) != 1) return;
  TPFunctionRelease(plan->function);
  delete plan;
}

const char* TPPlanGetName(TPPlanHandle plan) { return plan->op.c_str(); }

const TPPlanParam* TPPlanGetParams(TPPlanHandle plan, int32_t* count) {
  *count = static_cast<int32_t>(plan->params.size());
  return plan->params.data();
}

int32_t TPPlanGetNumOutputs(TPPlanHandle plan) { return plan->num_outputs; }

int TPPlanPrepare(TPPlanHandle plan, const TPAny* args, DLDevice device, TPTensorSpec* expected) {
  try {
    if (!CheckArguments(*plan, args)) return -1;
    for (size_t k = 0; k < plan->outputs.size(); ++k) {
      if (!EvalRule(*plan, plan->outputs[k], args, device, &expected[k])) return -1;
    }
    return 0;
  } catch (const std::bad_alloc&) {
    return Fail("MemoryError", "TPPlanPrepare: out of memory");
  }
}

int TPPlanInvoke(TPPlanHandle plan, TPAny* args, const TPPlanBinding* binding, const TPTensorSpec* expected,
                 TPAny* result) {
  result->type_index = kTPNone;
  result->flags = 0;
  result->v_int64 = 0;
  // Written views made by the caller without TPPlanPrepare: checked here. A compact view
  // (every view XLA's handler makes) cannot overlap itself, so the common case is a few
  // compares inline; the others are checked out of line, which then makes the call.
  if (expected == nullptr && plan->num_written != 0 && !WrittenCompact(*plan, args)) {
    return InvokeChecked(*plan, args, *binding, result);
  }
  return Invoke(*plan, args, *binding, expected, result);
}

}  // extern "C"
