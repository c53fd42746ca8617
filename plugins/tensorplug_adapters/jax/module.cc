// tensorplug_adapters.jax._native (native.h).
#include "native.h"

namespace tensorplug_adapters::jax {
namespace {

PyObject* ImporterPy(PyObject*, PyObject*) {
  return PyCapsule_New(const_cast<TPImporter*>(&kImporter), TP_IMPORTER_CAPSULE, nullptr);
}

PyMethodDef kMethods[] = {
    {"importer", tensorplug::python::GuardedMethod<ImporterPy>(), METH_NOARGS,
     "importer() -> the 'tensorplug.importer' capsule reading jax arrays directly"},
    {nullptr, nullptr, 0, nullptr},
};

PyModuleDef kModule = {PyModuleDef_HEAD_INIT, "_native", "the jax adapter's compiled module", -1, kMethods};

}  // namespace
}  // namespace tensorplug_adapters::jax

PyMODINIT_FUNC PyInit__native(void) {
  using namespace tensorplug_adapters::jax;
  if (!InitImporter()) return nullptr;
  PyObject* module = PyModule_Create(&kModule);
  if (module != nullptr && !InitXlaFfi(module)) Py_CLEAR(module);
  return module;
}
