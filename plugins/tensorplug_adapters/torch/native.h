// tensorplug_adapters.torch._native: the torch adapter's compiled module (module.cc), built
// on tensorplug's public headers and no torch header (torch's stable C shim is resolved at
// run time): the native dispatcher kernel of ops on the call plan (kernel.cc), the probe
// of torch's lazy conjugate and negative views (lazy_views.cc) and the hook that bumps the
// version of tensors a direct call writes (versions.cc).
#pragma once
#include <Python.h>

#include "tensorplug/python.h"

namespace tensorplug_adapters::torch {

// torch's lazy views as a refusal names them, after TP_LAZY_VIEW_EXPECTED (lazy_views.cc
// for the core's calls; kernel.cc for written arguments of native ops).
constexpr const char kTorchConjugateView[] = "a torch conjugate view (x.is_conj()); call .resolve_conj() first";
constexpr const char kTorchNegativeView[] =
    "a torch tensor with the negative bit set (x.is_neg(), e.g. x.conj().imag); call .resolve_neg() first";

// kernel.cc: adds the native kernel's functions (load, define, register, ...) to `module`.
bool InitKernel(PyObject* module);
// lazy_views.cc: lazy_view_probe(torch, libraries) -> (capsule, reads directly: bool).
PyObject* LazyViewProbePy(PyObject*, PyObject* args);
// versions.cc: write_hook(torch, libraries) -> (capsule, calls directly: bool).
PyObject* WriteHookPy(PyObject*, PyObject* args);

}  // namespace tensorplug_adapters::torch
