// Kernels for tests/test_args_*.py: one per parameter and result kind the tests exercise.
#include <cstdint>
#include <optional>
#include <string>

#include "tensorplug/tensorplug.h"

using tensorplug::TensorView;

int64_t EchoInt(int64_t n) { return n; }
double EchoFloat(double v) { return v; }
bool EchoBool(bool b) { return b; }
int64_t OptInt(std::optional<int64_t> n) { return n ? *n : -1; }

// Defaults declared with the export ("alpha=1.0").
double Affine(double x, double alpha, int64_t shift, bool negate, std::string mode) {
  double v = x * alpha + double(shift);
  if (mode == "twice") v *= 2;
  return negate ? -v : v;
}
int64_t CountOr(std::optional<TensorView> x, int64_t fallback) { return x ? x->numel() : fallback; }

TENSORPLUG_EXPORT(echo_int, EchoInt, "n");
TENSORPLUG_EXPORT(echo_float, EchoFloat, "v");
TENSORPLUG_EXPORT(echo_bool, EchoBool, "b");
TENSORPLUG_EXPORT(opt_int, OptInt, "n");
TENSORPLUG_EXPORT(affine, Affine, "x", "alpha=1.0", "shift=0", "negate=False", "mode='plain'");
TENSORPLUG_EXPORT(count_or, CountOr, "x=None", "fallback=-1");
