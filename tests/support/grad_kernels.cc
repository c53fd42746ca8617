// Kernels with their backwards, declared as ops by tests/support/grad_kernels.py for the gradient
// tests (tests/*/test_grad*.py). Host memory, float32 and float64, any strides in; results are
// new contiguous tensors from the caller's allocator (Tensor::FromEnvAlloc).
#include <tensorplug/tensorplug.h>

#include <cmath>
#include <tuple>
#include <vector>

namespace tp = tensorplug;

namespace {

// Element offsets of x in row-major order, for loops over several tensors of one shape.
std::vector<int64_t> Offsets(const tp::TensorView& x) {
  std::vector<int64_t> offsets;
  offsets.reserve(static_cast<size_t>(x.numel()));
  tp::ForEachOffset(x, [&](int64_t o) { offsets.push_back(o); });
  return offsets;
}

void CheckLike(const tp::TensorView& a, const tp::TensorView& b, const char* fn) {
  TENSORPLUG_CHECK(a.device().device_type == kDLCPU && b.device().device_type == kDLCPU, ValueError)
      << fn << ": expected CPU tensors";
  TENSORPLUG_CHECK(a.sizes() == b.sizes() && a.dtype() == b.dtype(), ValueError)
      << fn << ": expected tensors of one shape and dtype, got " << a.sizes() << " and " << b.sizes();
}

tp::Tensor Like(const tp::TensorView& x) { return tp::Tensor::FromEnvAlloc(x.shape(), x.dtype(), x.device()); }

// ---- square: y = x * x; dy/dx = 2 x; and the backward's own backward (second derivatives).
tp::Tensor Square(tp::TensorView x) {
  CheckLike(x, x, "square");
  tp::Tensor y = Like(x);
  const auto ox = Offsets(x);
  TENSORPLUG_DISPATCH_FLOATING_TYPES(x, "square", [&] {
    const scalar_t* px = x.data_ptr<scalar_t>();
    scalar_t* py = y.mutable_data_ptr<scalar_t>();
    for (size_t i = 0; i < ox.size(); ++i) py[i] = px[ox[i]] * px[ox[i]];
  });
  return y;
}

// grad_x = 2 x grad
tp::Tensor SquareBackward(tp::TensorView grad, tp::TensorView x) {
  CheckLike(grad, x, "square_backward");
  tp::Tensor gx = Like(x);
  const auto og = Offsets(grad), ox = Offsets(x);
  TENSORPLUG_DISPATCH_FLOATING_TYPES(x, "square_backward", [&] {
    const scalar_t* pg = grad.data_ptr<scalar_t>();
    const scalar_t* px = x.data_ptr<scalar_t>();
    scalar_t* po = gx.mutable_data_ptr<scalar_t>();
    for (size_t i = 0; i < ox.size(); ++i) po[i] = 2 * px[ox[i]] * pg[og[i]];
  });
  return gx;
}

// The backward of square_backward(grad, x) = 2 x grad, given gg (the gradient of its result):
// (d/dgrad, d/dx) = (2 x gg, 2 grad gg).
std::tuple<tp::Tensor, tp::Tensor> SquareBackwardBackward(tp::TensorView gg, tp::TensorView grad, tp::TensorView x) {
  CheckLike(gg, x, "square_backward_backward");
  CheckLike(grad, x, "square_backward_backward");
  tp::Tensor d_grad = Like(x), d_x = Like(x);
  const auto ogg = Offsets(gg), og = Offsets(grad), ox = Offsets(x);
  TENSORPLUG_DISPATCH_FLOATING_TYPES(x, "square_backward_backward", [&] {
    const scalar_t* pgg = gg.data_ptr<scalar_t>();
    const scalar_t* pg = grad.data_ptr<scalar_t>();
    const scalar_t* px = x.data_ptr<scalar_t>();
    scalar_t* pdg = d_grad.mutable_data_ptr<scalar_t>();
    scalar_t* pdx = d_x.mutable_data_ptr<scalar_t>();
    for (size_t i = 0; i < ox.size(); ++i) {
      pdg[i] = 2 * px[ox[i]] * pgg[ogg[i]];
      pdx[i] = 2 * pg[og[i]] * pgg[ogg[i]];
    }
  });
  return {d_grad, d_x};
}

// ---- sin_cos: two results (sin x, cos x); grad_x = gs cos x - gc sin x.
std::tuple<tp::Tensor, tp::Tensor> SinCos(tp::TensorView x) {
  CheckLike(x, x, "sin_cos");
  tp::Tensor s = Like(x), c = Like(x);
  const auto ox = Offsets(x);
  TENSORPLUG_DISPATCH_FLOATING_TYPES(x, "sin_cos", [&] {
    const scalar_t* px = x.data_ptr<scalar_t>();
    scalar_t* ps = s.mutable_data_ptr<scalar_t>();
    scalar_t* pc = c.mutable_data_ptr<scalar_t>();
    for (size_t i = 0; i < ox.size(); ++i) {
      ps[i] = std::sin(px[ox[i]]);
      pc[i] = std::cos(px[ox[i]]);
    }
  });
  return {s, c};
}

tp::Tensor SinCosBackward(tp::TensorView grad_sin, tp::TensorView grad_cos, tp::TensorView x) {
  CheckLike(grad_sin, x, "sin_cos_backward");
  CheckLike(grad_cos, x, "sin_cos_backward");
  tp::Tensor gx = Like(x);
  const auto os = Offsets(grad_sin), oc = Offsets(grad_cos), ox = Offsets(x);
  TENSORPLUG_DISPATCH_FLOATING_TYPES(x, "sin_cos_backward", [&] {
    const scalar_t* ps = grad_sin.data_ptr<scalar_t>();
    const scalar_t* pc = grad_cos.data_ptr<scalar_t>();
    const scalar_t* px = x.data_ptr<scalar_t>();
    scalar_t* po = gx.mutable_data_ptr<scalar_t>();
    for (size_t i = 0; i < ox.size(); ++i) po[i] = ps[os[i]] * std::cos(px[ox[i]]) - pc[oc[i]] * std::sin(px[ox[i]]);
  });
  return gx;
}

// ---- exp: the backward reads the saved result: grad_x = grad * y.
tp::Tensor Exp(tp::TensorView x) {
  CheckLike(x, x, "exp");
  tp::Tensor y = Like(x);
  const auto ox = Offsets(x);
  TENSORPLUG_DISPATCH_FLOATING_TYPES(x, "exp", [&] {
    const scalar_t* px = x.data_ptr<scalar_t>();
    scalar_t* py = y.mutable_data_ptr<scalar_t>();
    for (size_t i = 0; i < ox.size(); ++i) py[i] = std::exp(px[ox[i]]);
  });
  return y;
}

tp::Tensor ExpBackward(tp::TensorView grad, tp::TensorView y) {
  CheckLike(grad, y, "exp_backward");
  tp::Tensor gx = Like(y);
  const auto og = Offsets(grad), oy = Offsets(y);
  TENSORPLUG_DISPATCH_FLOATING_TYPES(y, "exp_backward", [&] {
    const scalar_t* pg = grad.data_ptr<scalar_t>();
    const scalar_t* py = y.data_ptr<scalar_t>();
    scalar_t* po = gx.mutable_data_ptr<scalar_t>();
    for (size_t i = 0; i < oy.size(); ++i) po[i] = pg[og[i]] * py[oy[i]];
  });
  return gx;
}

// ---- scale_by: y = alpha * x * w, differentiable in x only (w, a mask say, is not):
// grad_x = alpha * w * grad. A scalar saved (alpha).
tp::Tensor ScaleBy(tp::TensorView x, tp::TensorView w, double alpha) {
  CheckLike(x, w, "scale_by");
  tp::Tensor y = Like(x);
  const auto ox = Offsets(x), ow = Offsets(w);
  TENSORPLUG_DISPATCH_FLOATING_TYPES(x, "scale_by", [&] {
    const scalar_t* px = x.data_ptr<scalar_t>();
    const scalar_t* pw = w.data_ptr<scalar_t>();
    scalar_t* py = y.mutable_data_ptr<scalar_t>();
    for (size_t i = 0; i < ox.size(); ++i) py[i] = static_cast<scalar_t>(alpha) * px[ox[i]] * pw[ow[i]];
  });
  return y;
}

tp::Tensor ScaleByBackward(tp::TensorView grad, tp::TensorView x, tp::TensorView w, double alpha) {
  CheckLike(grad, x, "scale_by_backward");
  return ScaleBy(grad, w, alpha);
}

// ---- backwards that break their contract, for the checks of the adapters.
// A gradient one element short of x.
tp::Tensor ShortBackward(tp::TensorView grad, tp::TensorView x) {
  TENSORPLUG_CHECK(x.numel() > 0, ValueError) << "short_backward: x is empty";
  tp::Tensor gx = tp::Tensor::FromEnvAlloc({x.numel() - 1}, x.dtype(), x.device());
  TENSORPLUG_DISPATCH_FLOATING_TYPES(x, "short_backward", [&] {
    scalar_t* po = gx.mutable_data_ptr<scalar_t>();
    for (int64_t i = 0; i < gx.numel(); ++i) po[i] = 1;
  });
  return gx;
}

// An int32 gradient, whatever x's dtype.
tp::Tensor Int32Backward(tp::TensorView grad, tp::TensorView x) {
  tp::Tensor gx = tp::Tensor::FromEnvAlloc(x.shape(), tp::kInt32, x.device());
  int32_t* po = gx.mutable_data_ptr<int32_t>();
  for (int64_t i = 0; i < gx.numel(); ++i) po[i] = 1;
  return gx;
}

// ---- an op that writes its argument: out = 2 * x (destination passing).
void TwiceInto(tp::TensorView x, tp::MutableView out) {
  CheckLike(x, out, "twice_into");
  const auto ox = Offsets(x), oo = Offsets(out);
  TENSORPLUG_DISPATCH_FLOATING_TYPES(x, "twice_into", [&] {
    const scalar_t* px = x.data_ptr<scalar_t>();
    scalar_t* po = out.mutable_data_ptr<scalar_t>();
    for (size_t i = 0; i < ox.size(); ++i) po[oo[i]] = 2 * px[ox[i]];
  });
}

// ---- cube: y = x^3; dy/dx = 3 x^2. Its backward takes x first, then the gradient (issue 39:
// bound by name, never by position). The strict variants need compact inputs, as many
// kernel libraries do (they read data_ptr()[i]), and raise otherwise.
tp::Tensor Cube(tp::TensorView x) {
  CheckLike(x, x, "cube");
  tp::Tensor y = Like(x);
  const auto ox = Offsets(x);
  TENSORPLUG_DISPATCH_FLOATING_TYPES(x, "cube", [&] {
    const scalar_t* px = x.data_ptr<scalar_t>();
    scalar_t* py = y.mutable_data_ptr<scalar_t>();
    for (size_t i = 0; i < ox.size(); ++i) py[i] = px[ox[i]] * px[ox[i]] * px[ox[i]];
  });
  return y;
}

tp::Tensor CubeBackward(tp::TensorView x, tp::TensorView grad) {
  CheckLike(grad, x, "cube_backward");
  tp::Tensor gx = Like(x);
  const auto og = Offsets(grad), ox = Offsets(x);
  TENSORPLUG_DISPATCH_FLOATING_TYPES(x, "cube_backward", [&] {
    const scalar_t* pg = grad.data_ptr<scalar_t>();
    const scalar_t* px = x.data_ptr<scalar_t>();
    scalar_t* po = gx.mutable_data_ptr<scalar_t>();
    for (size_t i = 0; i < ox.size(); ++i) po[i] = 3 * px[ox[i]] * px[ox[i]] * pg[og[i]];
  });
  return gx;
}

void CheckCompact(const tp::TensorView& t, const char* fn, const char* name) {
  TENSORPLUG_CHECK(t.is_contiguous(), ValueError) << fn << ": " << name << " must be contiguous, got strides "
                                                  << t.strides();
}

tp::Tensor StrictCube(tp::TensorView x) {
  CheckCompact(x, "strict_cube", "x");
  return Cube(x);
}

tp::Tensor StrictCubeBackward(tp::TensorView x, tp::TensorView grad) {
  CheckCompact(x, "strict_cube_backward", "x");
  CheckCompact(grad, "strict_cube_backward", "grad");
  return CubeBackward(x, grad);
}

// ---- backwards whose results break their own op's rule (issue 39): three gradients for two
// inputs, float64 gradients whatever the inputs' dtype.
std::tuple<tp::Tensor, tp::Tensor, tp::Tensor> ThreeGradients(tp::TensorView grad, tp::TensorView x,
                                                              tp::TensorView w) {
  return {Like(x), Like(w), Like(x)};
}

tp::Tensor Float64Gradient(tp::TensorView grad, tp::TensorView x) {
  tp::Tensor gx = tp::Tensor::FromEnvAlloc(x.shape(), tp::kFloat64, x.device());
  double* po = gx.mutable_data_ptr<double>();
  for (int64_t i = 0; i < gx.numel(); ++i) po[i] = 1;
  return gx;
}

}  // namespace

TENSORPLUG_EXPORT(cube, Cube, "x");
TENSORPLUG_EXPORT(cube_backward, CubeBackward, "x", "grad");
TENSORPLUG_EXPORT(strict_cube, StrictCube, "x");
TENSORPLUG_EXPORT(strict_cube_backward, StrictCubeBackward, "x", "grad");
TENSORPLUG_EXPORT(three_gradients, ThreeGradients, "grad", "x", "w");
TENSORPLUG_EXPORT(float64_gradient, Float64Gradient, "grad", "x");
TENSORPLUG_EXPORT(square, Square, "x");
TENSORPLUG_EXPORT(square_backward, SquareBackward, "grad", "x");
TENSORPLUG_EXPORT(square_backward_backward, SquareBackwardBackward, "gg", "grad", "x");
TENSORPLUG_EXPORT(sin_cos, SinCos, "x");
TENSORPLUG_EXPORT(sin_cos_backward, SinCosBackward, "grad_sin", "grad_cos", "x");
TENSORPLUG_EXPORT(exp, Exp, "x");
TENSORPLUG_EXPORT(exp_backward, ExpBackward, "grad", "y");
TENSORPLUG_EXPORT(scale_by, ScaleBy, "x", "w", "alpha");
TENSORPLUG_EXPORT(scale_by_backward, ScaleByBackward, "grad", "x", "w", "alpha");
TENSORPLUG_EXPORT(short_backward, ShortBackward, "grad", "x");
TENSORPLUG_EXPORT(int32_backward, Int32Backward, "grad", "x");
TENSORPLUG_EXPORT(twice_into, TwiceInto, "x", "out");
