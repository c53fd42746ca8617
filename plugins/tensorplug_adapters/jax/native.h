// tensorplug_adapters.jax._native: the jax adapter's compiled module (module.cc), built on
// tensorplug's public headers: the importer of jax arrays (importer.cc) and the XLA FFI
// handler that runs ops inside jax.jit (xla_ffi.cc).
#pragma once
#include <Python.h>

#include "tensorplug/python.h"

namespace tensorplug_adapters::jax {

// importer.cc: the C import functions of jax arrays, usable once InitImporter succeeded
// (false with a Python error set: numpy's plugin module or the core could not be imported).
extern const TPImporter kImporter;
bool InitImporter();

// xla_ffi.cc: adds xla_ffi_define and xla_ffi_handler to `module`.
bool InitXlaFfi(PyObject* module);

}  // namespace tensorplug_adapters::jax
