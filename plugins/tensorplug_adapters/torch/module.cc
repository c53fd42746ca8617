// tensorplug_adapters.torch._native (native.h).
#include "native.h"

namespace tensorplug_adapters::torch {
namespace {

using tensorplug::python::GuardedMethod;

PyMethodDef kMethods[] = {
    {"lazy_view_probe", GuardedMethod<LazyViewProbePy>(), METH_VARARGS,
     "lazy_view_probe(torch, libraries) -> (lazy view probe capsule for torch.Tensor, reads directly: bool)"},
    {"write_hook", GuardedMethod<WriteHookPy>(), METH_VARARGS,
     "write_hook(torch, libraries) -> (write hook capsule bumping torch's version counters, calls directly: bool)"},
    {nullptr, nullptr, 0, nullptr},
};

PyModuleDef kModule = {PyModuleDef_HEAD_INIT, "_native", "the torch adapter's compiled module", -1, kMethods};

}  // namespace
}  // namespace tensorplug_adapters::torch

PyMODINIT_FUNC PyInit__native(void) {
  PyObject* module = PyModule_Create(&tensorplug_adapters::torch::kModule);
  if (module != nullptr && !tensorplug_adapters::torch::InitKernel(module)) Py_CLEAR(module);
  return module;
}
