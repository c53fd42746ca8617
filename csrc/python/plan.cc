// plan_create: a call plan (tensorplug/plan.h) from Python, for tensorplug.plans.
#include "tensorplug/plan.h"

#include <string>
#include <vector>

#include "common.h"
#include "function_object.h"

namespace tensorplug::py {

namespace {

constexpr char kPlanCapsule[] = TP_PLAN_CAPSULE;

void ReleasePlanCapsule(PyObject* capsule) {
  TPPlanRelease(static_cast<TPPlanHandle>(PyCapsule_GetPointer(capsule, kPlanCapsule)));
}

// One dimension program: a sequence of (op[, a[, b[, c]]]) steps.
bool ParseSteps(PyObject* program, std::vector<TPRuleStep>* steps, std::vector<int32_t>* lengths) {
  PyObject* seq = PySequence_Fast(program, "plan_create(): a dimension program must be a sequence");
  if (seq == nullptr) return false;
  const Py_ssize_t n = PySequence_Fast_GET_SIZE(seq);
  for (Py_ssize_t i = 0; i < n; ++i) {
    int op;
    long long a = 0, b = 0, c = 0;
    if (!PyArg_ParseTuple(PySequence_Fast_GET_ITEM(seq, i), "i|LLL", &op, &a, &b, &c)) {
      Py_DECREF(seq);
      return false;
    }
    steps->push_back(TPRuleStep{op, 0, a, b, c});
  }
  Py_DECREF(seq);
  lengths->push_back(static_cast<int32_t>(n));
  return true;
}

// plan_create(op, function, params, num_outputs, outputs) -> capsule of a TPPlanHandle.
// params: (name, kind code, optional, written) each; outputs: None (the caller checks
// shapes), or per returned tensor (shape_from, shape_param, dims, dtype_from, dtype_param,
// dtype name, device_from, device_param, device_type, device_id), dims a sequence of
// programs -- the encoding of tensorplug.plans.compile_outputs.
PyObject* PlanCreatePy(PyObject*, PyObject* args) {
  const char* op;
  PyObject *function, *params, *outputs;
  int num_outputs;
  if (!PyArg_ParseTuple(args, "sOOiO:plan_create", &op, &function, &params, &num_outputs, &outputs)) return nullptr;
  TPFunctionHandle func = FunctionHandleOf(function);
  if (func == nullptr) {
    PyErr_Format(PyExc_TypeError, "plan_create(): expected a tensorplug.Function, got %s", Py_TYPE(function)->tp_name);
    return nullptr;
  }
  std::vector<std::string> names;
  std::vector<TPPlanParam> plan_params;
  PyObject* seq = PySequence_Fast(params, "plan_create(): params must be a sequence");
  if (seq == nullptr) return nullptr;
  const Py_ssize_t n_params = PySequence_Fast_GET_SIZE(seq);
  names.reserve(n_params);
  for (Py_ssize_t i = 0; i < n_params; ++i) {
    const char* name;
    int kind, optional, written;
    if (!PyArg_ParseTuple(PySequence_Fast_GET_ITEM(seq, i), "sipp", &name, &kind, &optional, &written)) {
      Py_DECREF(seq);
      return nullptr;
    }
    names.emplace_back(name);
    plan_params.push_back(TPPlanParam{nullptr, kind, static_cast<uint8_t>(optional), static_cast<uint8_t>(written), {}});
  }
  Py_DECREF(seq);
  for (size_t i = 0; i < names.size(); ++i) plan_params[i].name = names[i].c_str();

  std::vector<TPOutputRule> rules;
  std::vector<std::vector<TPRuleStep>> steps;     // per output
  std::vector<std::vector<int32_t>> dim_steps;    // per output
  if (outputs != Py_None) {
    seq = PySequence_Fast(outputs, "plan_create(): outputs must be None or a sequence");
    if (seq == nullptr) return nullptr;
    const Py_ssize_t n_out = PySequence_Fast_GET_SIZE(seq);
    steps.resize(n_out);
    dim_steps.resize(n_out);
    for (Py_ssize_t k = 0; k < n_out; ++k) {
      TPOutputRule rule{};
      PyObject* dims;
      const char* dtype_name;
      int device_type, device_id;
      if (!PyArg_ParseTuple(PySequence_Fast_GET_ITEM(seq, k), "iiOiisiiii", &rule.shape_from, &rule.shape_param,
                            &dims, &rule.dtype_from, &rule.dtype_param, &dtype_name, &rule.device_from,
                            &rule.device_param, &device_type, &device_id)) {
        Py_DECREF(seq);
        return nullptr;
      }
      rule.device = DLDevice{static_cast<DLDeviceType>(device_type), device_id};
      if (rule.dtype_from == kTPFromFixed && !DTypeFromString(dtype_name, &rule.dtype)) {
        PyErr_Format(PyExc_ValueError, "plan_create(): unknown dtype '%s'", dtype_name);
        Py_DECREF(seq);
        return nullptr;
      }
      if (rule.shape_from == kTPFromDims) {
        PyObject* dseq = PySequence_Fast(dims, "plan_create(): dims must be a sequence");
        if (dseq == nullptr) {
          Py_DECREF(seq);
          return nullptr;
        }
        for (Py_ssize_t d = 0; d < PySequence_Fast_GET_SIZE(dseq); ++d) {
          if (!ParseSteps(PySequence_Fast_GET_ITEM(dseq, d), &steps[k], &dim_steps[k])) {
            Py_DECREF(dseq);
            Py_DECREF(seq);
            return nullptr;
          }
        }
        rule.ndim = static_cast<int32_t>(PySequence_Fast_GET_SIZE(dseq));
        Py_DECREF(dseq);
      }
      rules.push_back(rule);
    }
    Py_DECREF(seq);
    for (size_t k = 0; k < rules.size(); ++k) {
      rules[k].steps = steps[k].data();
      rules[k].dim_steps = dim_steps[k].data();
    }
    if (static_cast<int>(rules.size()) != num_outputs) {
      PyErr_Format(PyExc_ValueError, "plan_create(): %d output rules for %d outputs", static_cast<int>(rules.size()),
                   num_outputs);
      return nullptr;
    }
  }
  const TPPlanSpec spec{op, func, static_cast<int32_t>(plan_params.size()), plan_params.data(), num_outputs,
                        outputs == Py_None ? nullptr : rules.data()};
  TPPlanHandle plan = nullptr;
  if (TPPlanCreate(&spec, &plan) != 0) return RaiseFromTPError();
  PyObject* capsule = PyCapsule_New(plan, kPlanCapsule, ReleasePlanCapsule);
  if (capsule == nullptr) TPPlanRelease(plan);
  return capsule;
}

PyMethodDef kPlanMethods[] = {
    {"plan_create", GuardedMethod<PlanCreatePy>(), METH_VARARGS,
     "plan_create(op, function, params, num_outputs, outputs) -> capsule 'tensorplug.TPPlanHandle'"},
    {nullptr, nullptr, 0, nullptr},
};

}  // namespace

bool InitPlan(PyObject* module) { return PyModule_AddFunctions(module, kPlanMethods) == 0; }

}  // namespace tensorplug::py
