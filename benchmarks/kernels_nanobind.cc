// Call-overhead kernel for nanobind: the empty `noop()` of kernels_tensorplug.cc, bound the
// way a nanobind extension binds it, once releasing the GIL around the call (as tensorplug
// and tvm-ffi do by default) and once holding it. Built by benchmarks/overhead_measure.py
// (build_nanobind) with nanobind's own CMake support, into the benchmark's cache.
#include <nanobind/nanobind.h>

namespace nb = nanobind;

void noop() {}

NB_MODULE(tensorplug_bench_nanobind, m) {
  m.def("noop", &noop, nb::call_guard<nb::gil_scoped_release>());
  m.def("noop_gil_held", &noop);
}
