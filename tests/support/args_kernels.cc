// Kernels for tests/core/test_args_*.py: one per parameter and result kind the tests exercise.
#include <cstdint>
#include <optional>
#include <string>

#include "tensorplug/tensorplug.h"

using tensorplug::MutableView;
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

// Lists of tensors (kind "views") and lists as results (kind "list").
int64_t TotalNumel(tensorplug::TensorViewList xs) {
  int64_t n = 0;
  for (TensorView x : xs) n += x.numel();
  return n;
}
// out[i] = sum of xs[j][i] over j, float32 1-d tensors of one length.
void SumInto(tensorplug::TensorViewList xs, MutableView out) {
  float* po = out.mutable_data_ptr<float>();
  for (int64_t i = 0; i < out.numel(); ++i) po[i] = 0;
  for (int64_t j = 0; j < xs.size(); ++j) {
    const float* px = xs[j].data_ptr<float>();
    for (int64_t i = 0; i < out.numel(); ++i) po[i] += px[i];
  }
}
// Writes j into every element of xs[j] (written views: read-only ones are refused).
void Stamp(std::vector<MutableView> xs) {
  for (size_t j = 0; j < xs.size(); ++j) {
    float* p = xs[j].mutable_data_ptr<float>();
    for (int64_t i = 0; i < xs[j].numel(); ++i) p[i] = float(j);
  }
}
// n float32 tensors of length 2 filled with their index, from the env allocator (the primary's framework).
std::vector<tensorplug::Tensor> Range(TensorView like, int64_t n) {
  std::vector<tensorplug::Tensor> out;
  for (int64_t j = 0; j < n; ++j) {
    tensorplug::Tensor t = tensorplug::Tensor::FromEnvAlloc({2}, like.dtype(), like.device());
    float* p = t.mutable_data_ptr<float>();
    p[0] = p[1] = float(j);
    out.push_back(std::move(t));
  }
  return out;
}
int64_t CountOpt(std::optional<tensorplug::TensorViewList> xs) { return xs ? xs->size() : -1; }

TENSORPLUG_EXPORT(total_numel, TotalNumel, "xs");
TENSORPLUG_EXPORT(sum_into, SumInto, "xs", "out");
TENSORPLUG_EXPORT(stamp, Stamp, "xs");
TENSORPLUG_EXPORT(range, Range, "like", "n");
TENSORPLUG_EXPORT(count_opt, CountOpt, "xs");
// One new float32 tensor per item, from the env allocator: the primary (looked for inside the list) decides their type.
std::vector<tensorplug::Tensor> EmptyLike(int64_t n, tensorplug::TensorViewList xs) {
  std::vector<tensorplug::Tensor> out;
  for (TensorView x : xs) out.push_back(tensorplug::Tensor::FromEnvAlloc({n}, x.dtype(), x.device()));
  return out;
}
TENSORPLUG_EXPORT(empty_like, EmptyLike, "n", "xs");

// Int arrays (kind "ints") as parameters and results.
int64_t Product(tensorplug::IntArrayView shape) {
  int64_t p = 1;
  for (int64_t v : shape) p *= v;
  return p;
}
std::vector<int64_t> Reversed(std::vector<int64_t> v) { return std::vector<int64_t>(v.rbegin(), v.rend()); }
std::vector<int64_t> ShapeOf(TensorView x) { return std::vector<int64_t>(x.shape().begin(), x.shape().end()); }
int64_t LenOr(std::optional<tensorplug::IntArrayView> v) { return v ? int64_t(v->size()) : -1; }
TENSORPLUG_EXPORT(product, Product, "shape");
TENSORPLUG_EXPORT(reversed_ints, Reversed, "v");
TENSORPLUG_EXPORT(shape_of, ShapeOf, "x");
TENSORPLUG_EXPORT(len_or, LenOr, "v");

// Public helpers: GetDataSize and the comparison checks.
int64_t DataSize(TensorView x) { return int64_t(tensorplug::GetDataSize(*x.dltensor())); }
int64_t CheckOps(int64_t a, int64_t b, std::string op) {
  if (op == "eq") TENSORPLUG_CHECK_EQ(a, b) << "a must equal b";
  if (op == "ne") TENSORPLUG_CHECK_NE(a, b);
  if (op == "lt") TENSORPLUG_CHECK_LT(a, b, IndexError) << "index out of range";
  if (op == "le") TENSORPLUG_CHECK_LE(a + 1, b * 2);
  if (op == "gt") TENSORPLUG_CHECK_GT(a, b, TypeError);
  if (op == "ge") TENSORPLUG_CHECK_GE(double(a) / 2, double(b));
  return a + b;
}
TENSORPLUG_EXPORT(data_size, DataSize, "x");
TENSORPLUG_EXPORT(check_ops, CheckOps, "a", "b", "op");
