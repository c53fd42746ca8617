"""tensorplug ops inside jax: jax.jit, vmap and grad through the jax plugin's XLA FFI handler (real jax, CPU).

Over 500 lines: one feature, ops in jax, whose kernels (SOURCE) every test here shares."""

import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import tensorplug
from tensorplug import cpp, like, plans

jax = pytest.importorskip("jax", reason="jax not installed")
from tensorplug_adapters.jax import _native  # noqa: E402  (the plugin's XLA FFI handler)
jnp = jax.numpy
np = pytest.importorskip("numpy")

ROOT = Path(__file__).resolve().parents[2]

SOURCE = r"""
namespace tp = tensorplug;

// out += alpha * x (destination passing: `out` is written, its old value is read).
void axpy(tp::TensorView x, tp::MutableView out, double alpha) {
  TENSORPLUG_CHECK(x.numel() == out.numel(), ValueError) << "axpy: x has " << x.numel()
      << " elements, out has " << out.numel();
  const float* a = x.data_ptr<float>();
  float* o = out.mutable_data_ptr<float>();
  for (int64_t i = 0; i < x.numel(); ++i) o[i] += static_cast<float>(alpha) * a[i];
}

// A new (x.shape[0], n) tensor: row i holds x[i] * 1, x[i] * 2, ..., x[i] * n.
tp::Tensor outer_range(tp::TensorView x, int64_t n) {
  tp::Tensor y = tp::Tensor::FromEnvAlloc({x.size(0), n}, x.dtype(), x.device());
  const float* a = x.data_ptr<float>();
  float* o = y.mutable_data_ptr<float>();
  for (int64_t i = 0; i < x.size(0); ++i)
    for (int64_t j = 0; j < n; ++j) o[i * n + j] = a[i] * static_cast<float>(j + 1);
  return y;
}

// (x + bias or x, x * scale): two allocated results, an optional tensor, a bool and a str.
std::tuple<tp::Tensor, tp::Tensor> shift_and_scale(tp::TensorView x, std::optional<tp::TensorView> bias,
                                                   double scale, bool negate, std::string mode) {
  TENSORPLUG_CHECK(mode == "plain" || mode == "square", ValueError) << "shift_and_scale: unknown mode '" << mode << "'";
  tp::Tensor a = tp::Tensor::FromEnvAlloc(x.shape(), x.dtype(), x.device());
  tp::Tensor b = tp::Tensor::FromEnvAlloc(x.shape(), x.dtype(), x.device());
  const float* in = x.data_ptr<float>();
  float* pa = a.mutable_data_ptr<float>();
  float* pb = b.mutable_data_ptr<float>();
  for (int64_t i = 0; i < x.numel(); ++i) {
    float v = mode == "square" ? in[i] * in[i] : in[i];
    pa[i] = v + (bias ? bias->data_ptr<float>()[i] : 0.0f);
    pb[i] = (negate ? -1.0f : 1.0f) * static_cast<float>(scale) * v;
  }
  return {a, b};
}

// y = alpha * x (allocating), for the custom_vjp example.
tp::Tensor scale(tp::TensorView x, double alpha) {
  tp::Tensor y = tp::Tensor::FromEnvAlloc(x.shape(), x.dtype(), x.device());
  for (int64_t i = 0; i < x.numel(); ++i) y.mutable_data_ptr<float>()[i] = alpha * x.data_ptr<float>()[i];
  return y;
}

// Refuses negative input: the kernel's message must reach Python from inside jax.jit.
tp::Tensor checked_sqrt(tp::TensorView x) {
  const float* a = x.data_ptr<float>();
  for (int64_t i = 0; i < x.numel(); ++i)
    TENSORPLUG_CHECK(a[i] >= 0, ValueError) << "checked_sqrt: x[" << i << "] is negative (" << a[i] << ")";
  tp::Tensor y = tp::Tensor::FromEnvAlloc(x.shape(), x.dtype(), x.device());
  for (int64_t i = 0; i < x.numel(); ++i) y.mutable_data_ptr<float>()[i] = std::sqrt(a[i]);
  return y;
}

// Allocates twice but returns one tensor: one allocation more than a one-result rule allows.
tp::Tensor allocates_twice(tp::TensorView x) {
  tp::Tensor y = tp::Tensor::FromEnvAlloc(x.shape(), x.dtype(), x.device());
  tp::Tensor z = tp::Tensor::FromEnvAlloc(x.shape(), x.dtype(), x.device());
  return y;
}

// Destination passing that also asks FromEnvAlloc for a scratch tensor: eagerly the
// caller's allocator gives one; inside jax.jit the op declares no result, so XLA has none.
// `note` (a str, an attribute the handler's fast path does not take) sends the second op
// of it through the general path.
void scratch_into(tp::TensorView x, tp::MutableView out, std::string note) {
  tp::Tensor scratch = tp::Tensor::FromEnvAlloc(x.shape(), x.dtype(), x.device());
  float* s = scratch.mutable_data_ptr<float>();
  for (int64_t i = 0; i < x.numel(); ++i) s[i] = 2 * x.data_ptr<float>()[i];
  for (int64_t i = 0; i < x.numel(); ++i) out.mutable_data_ptr<float>()[i] = s[i] + static_cast<float>(note.size());
}
void scratch_into_fast(tp::TensorView x, tp::MutableView out) { scratch_into(x, out, ""); }

// Host memory of the kernel's own (for own_buffer).
struct HeapAlloc {
  void AllocData(DLTensor* t) {
    int64_t n = 1;
    for (int32_t i = 0; i < t->ndim; ++i) n *= t->shape[i];
    t->data = std::malloc(static_cast<size_t>(n) * 4 + 4);
  }
  void FreeData(DLTensor* t) { std::free(t->data); }
};

// Returns a tensor from its own allocator, not FromEnvAlloc: copied into XLA's result on CPU.
tp::Tensor own_buffer(tp::TensorView x) {
  tp::Tensor y = tp::Tensor::FromNDAlloc(HeapAlloc{}, x.shape(), x.dtype(), x.device());
  for (int64_t i = 0; i < x.numel(); ++i) y.mutable_data_ptr<float>()[i] = x.data_ptr<float>()[i] + 10;
  return y;
}

// Shares its result between copies (inside jax.jit a lent XLA buffer, whose count lives in
// the lender's scratch bytes): y = [use_count with a copy alive, use_count after, x...].
tp::Tensor shared_counts(tp::TensorView x) {
  tp::Tensor y = tp::Tensor::FromEnvAlloc(x.shape(), x.dtype(), x.device());
  float* o = y.mutable_data_ptr<float>();
  for (int64_t i = 0; i < x.numel(); ++i) o[i] = x.data_ptr<float>()[i];
  {
    tp::Tensor copy = y;
    tp::Tensor exported = tp::Tensor::FromDLPackVersioned(copy.ToDLPackVersioned());
    o[0] = static_cast<float>(y.use_count());
  }
  o[1] = static_cast<float>(y.use_count());
  return y;
}
"""

FUNCTIONS = ["axpy", "outer_range", "shift_and_scale", "scale", "checked_sqrt", "allocates_twice", "own_buffer",
             "shared_counts", "scratch_into", "scratch_into_fast"]


@pytest.fixture(scope="module")
def mod():
    return cpp.load_inline("op_jax_kernels", "#include <cmath>\n#include <cstdlib>\n#include <tuple>\n#include <optional>\n" + SOURCE,
                           functions=FUNCTIONS)


@pytest.fixture(scope="module")
def ops(mod):
    """The kernels declared as ops once per process (op names are process-wide)."""
    like_x = tensorplug.like("x")
    made = {
        "axpy": tensorplug.op("tpjax::axpy", mod.axpy),
        "outer_range": tensorplug.op("tpjax::outer_range", mod.outer_range,
                                     returns=tensorplug.Output(("x.shape[0]", "n"), "x")),
        "shift_and_scale": tensorplug.op("tpjax::shift_and_scale", mod.shift_and_scale, returns=(like_x, like_x)),
        "scale": tensorplug.op("tpjax::scale", mod.scale, returns=like_x),
        "checked_sqrt": tensorplug.op("tpjax::checked_sqrt", mod.checked_sqrt, returns=like_x),
        "allocates_twice": tensorplug.op("tpjax::allocates_twice", mod.allocates_twice, returns=like_x),
        "own_buffer": tensorplug.op("tpjax::own_buffer", mod.own_buffer, returns=like_x),
        "shared_counts": tensorplug.op("tpjax::shared_counts", mod.shared_counts, returns=like_x),
        "scratch_into": tensorplug.op("tpjax::scratch_into", mod.scratch_into),
        "scratch_into_fast": tensorplug.op("tpjax::scratch_into_fast", mod.scratch_into_fast),
        # A rule that disagrees with what the kernel allocates: (n, x.shape[0]) for (x.shape[0], n).
        "bad_rule": tensorplug.op("tpjax::outer_range_bad_rule", mod.outer_range,
                                  returns=tensorplug.Output(("n", "x.shape[0]"), "x")),
        # A rule that declares another dtype than the kernel allocates: int32 for float32.
        "bad_dtype_rule": tensorplug.op("tpjax::outer_range_declared_int32", mod.outer_range,
                                        returns=tensorplug.Output(("x.shape[0]", "n"), "int32")),
    }
    return made


def f32(*values):
    return np.asarray(values, dtype=np.float32)


def raises_xla_error(match):
    """An error of an XLA computation: jax raises JaxRuntimeError (a RuntimeError), except
    on its C++ fast dispatch path (a jitted function's later calls), which raises ValueError
    for the INVALID_ARGUMENT status that tensorplug gives ValueError, TypeError, IndexError,
    KeyError and OverflowError."""
    return pytest.raises((jax.errors.JaxRuntimeError, ValueError), match=match)


# -------------------------------------------------------------- jit equals eager ----

def test_jit_of_destination_passing_op_returns_the_written_value(ops):
    axpy = ops["axpy"]
    x, out = f32(1, 2, 3, 4), f32(10, 10, 10, 10)

    expected = out.copy()
    assert axpy(x, expected, 2.0) is None  # numpy, eagerly: written in place
    np.testing.assert_array_equal(expected, f32(12, 14, 16, 18))

    jx, jout = jnp.asarray(x), jnp.asarray(out)
    jitted = jax.jit(lambda x, out: axpy(x, out, 2.0))(jx, jout)
    eager = axpy(jx, jout, 2.0)  # jax, eagerly: the written parameter's new value
    assert isinstance(jitted, jax.Array) and jitted.dtype == jnp.float32 and jitted.shape == (4,)
    np.testing.assert_array_equal(np.asarray(jitted), expected)
    np.testing.assert_array_equal(np.asarray(eager), expected)
    np.testing.assert_array_equal(np.asarray(jout), out)  # jax arrays stay immutable


def test_jit_of_destination_passing_op_composes_with_jax_ops(ops):
    axpy = ops["axpy"]

    def f(x):
        out = jnp.zeros_like(x) + 1.0
        return axpy(x * 2, out, 0.5).sum()

    x = jnp.arange(5, dtype=jnp.float32)
    assert float(jax.jit(f)(x)) == pytest.approx(float(f(x))) == pytest.approx(5 + 10.0)


def test_jit_of_allocating_op_with_shape_rule(ops, mod):
    outer_range = ops["outer_range"]
    x = f32(1, 2, 3)
    expected = f32(1, 2, 3, 4, 2, 4, 6, 8, 3, 6, 9, 12).reshape(3, 4)
    np.testing.assert_array_equal(np.asarray(mod.outer_range(x, 4)), expected)

    jitted = jax.jit(outer_range, static_argnames="n")(jnp.asarray(x), n=4)
    eager = outer_range(jnp.asarray(x), 4)
    assert isinstance(jitted, jax.Array) and jitted.shape == (3, 4)
    assert isinstance(eager, jax.Array)
    np.testing.assert_array_equal(np.asarray(jitted), expected)
    np.testing.assert_array_equal(np.asarray(eager), expected)


def test_jit_of_op_with_two_results_optional_tensor_bool_and_str(ops):
    op = ops["shift_and_scale"]
    x, bias = jnp.asarray(f32(1, 2, 3)), jnp.asarray(f32(10, 20, 30))

    a, b = jax.jit(lambda x, bias: op(x, bias, 2.0, True, "square"))(x, bias)
    np.testing.assert_array_equal(np.asarray(a), f32(11, 24, 39))
    np.testing.assert_array_equal(np.asarray(b), f32(-2, -8, -18))

    a, b = jax.jit(lambda x: op(x, None, 3.0, False, "plain"))(x)  # optional tensor left out
    np.testing.assert_array_equal(np.asarray(a), f32(1, 2, 3))
    np.testing.assert_array_equal(np.asarray(b), f32(3, 6, 9))

    eager = op(np.asarray(x), np.asarray(bias), 2.0, True, "square")
    np.testing.assert_array_equal(np.asarray(eager[0]), f32(11, 24, 39))


def test_kernel_can_return_a_buffer_of_its_own_on_cpu(ops):
    y = jax.jit(ops["own_buffer"])(jnp.asarray(f32(1, 2)))
    np.testing.assert_array_equal(np.asarray(y), f32(11, 12))


def test_result_buffer_shared_between_tensor_copies_counts_them(ops):
    # FromEnvAlloc inside jax.jit lends XLA's result buffer (TPLentTensorDeleter): copies
    # and exports of the Tensor count in the lender's scratch, as for any other allocator.
    op = ops["shared_counts"]
    x = f32(7, 7, 3)
    for y in (jax.jit(op)(jnp.asarray(x)), op(x)):
        np.testing.assert_array_equal(np.asarray(y), f32(3, 1, 3))


KEEP_SOURCE = r"""
namespace tp = tensorplug;
// A kernel with a bug: it keeps its result past the call. Inside jax.jit that result is
// XLA's buffer, lent for the call only; dropping the kept Tensor later (at the next call,
// or in drop_kept) must touch only memory the lender still owns.
tp::Tensor kept;
tp::Tensor keep_result(tp::TensorView x) {
  tp::Tensor y = tp::Tensor::FromEnvAlloc(x.shape(), x.dtype(), x.device());
  for (int64_t i = 0; i < x.numel(); ++i) y.mutable_data_ptr<float>()[i] = x.data_ptr<float>()[i] * 2;
  kept = y;  // drops the previous call's result
  return y;
}
int64_t drop_kept() {
  int64_t count = kept.use_count();
  kept = tp::Tensor();
  return count;
}
"""


def test_a_result_kept_past_the_call_is_dropped_safely():
    # Memory errors would crash the interpreter: the calls run in a subprocess (and under
    # the sanitizer suite, with ASan watching every access).
    code = textwrap.dedent(f"""
        import jax, jax.numpy as jnp, numpy as np, threading
        import tensorplug
        from tensorplug import cpp
        mod = cpp.load_inline("op_jax_keep", {KEEP_SOURCE!r}, functions=["keep_result", "drop_kept"])
        op = tensorplug.op("tpjax_keep::keep_result", mod.keep_result, returns=tensorplug.like("x"))
        f = jax.jit(op)
        for i in range(5):
            y = f(jnp.asarray(np.full(3, i, np.float32)))
            assert np.asarray(y).tolist() == [2.0 * i] * 3, y
        # Other threads lend their own blocks; the kept Tensor moves between them.
        def run(i):
            assert np.asarray(f(jnp.asarray(np.full(3, i, np.float32)))).tolist() == [2.0 * i] * 3
        threads = [threading.Thread(target=run, args=(i,)) for i in range(4)]
        [t.start() for t in threads]
        [t.join() for t in threads]
        g = jax.jit(lambda x: op(op(x)))  # two calls in one computation
        assert np.asarray(g(jnp.ones(3, jnp.float32))).tolist() == [4.0] * 3
        assert mod.drop_kept() == 1  # the kept reference alone
        assert np.asarray(f(jnp.ones(3, jnp.float32))).tolist() == [2.0] * 3
        print("ok")
    """)
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=os.environ, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.strip() == "ok"


# ------------------------------------------------------------------- transforms ----

def test_vmap_runs_the_kernel_per_batch_element(ops):
    axpy, outer_range = ops["axpy"], ops["outer_range"]
    xs = jnp.asarray(np.arange(12, dtype=np.float32).reshape(3, 4))
    outs = jnp.ones((3, 4), jnp.float32)

    batched = jax.vmap(lambda x, out: axpy(x, out, 3.0))(xs, outs)
    np.testing.assert_array_equal(np.asarray(batched), 1 + 3 * np.asarray(xs))

    rows = jax.jit(jax.vmap(lambda x: outer_range(x, 2)))(xs)
    assert rows.shape == (3, 4, 2)
    for i in range(3):
        np.testing.assert_array_equal(np.asarray(rows[i]), np.asarray(outer_range(xs[i], 2)))


def test_grad_through_custom_vjp(ops):
    scale = ops["scale"]

    @jax.custom_vjp
    def scaled(x, alpha):
        return scale(x, alpha)

    def scaled_fwd(x, alpha):
        return scale(x, alpha), alpha

    def scaled_bwd(alpha, g):
        return scale(g, alpha), None

    scaled.defvjp(scaled_fwd, scaled_bwd)

    x = jnp.asarray(f32(1, 2, 3))
    loss = lambda x: (scaled(x, 3.0) ** 2).sum()  # noqa: E731  d/dx = 2 * 9 * x
    np.testing.assert_allclose(np.asarray(jax.grad(loss)(x)), f32(18, 36, 54))
    np.testing.assert_allclose(np.asarray(jax.jit(jax.grad(loss))(x)), f32(18, 36, 54))


def test_grad_without_a_backward_names_the_op(ops):
    # scale declares no backward (tests/jax/test_grad_jax.py has ops that do)
    with pytest.raises(TypeError, match=r"^tpjax::scale has no backward: declare one with tensorplug.op"):
        jax.grad(lambda x: ops["scale"](x, 2.0).sum())(jnp.asarray(f32(1, 2)))


# ------------------------------------------------------------------------ errors ----

def test_kernel_error_inside_jit_reaches_python_with_its_message(ops):
    f = jax.jit(ops["checked_sqrt"])
    np.testing.assert_allclose(np.asarray(f(jnp.asarray(f32(4, 9)))), f32(2, 3))
    for _ in range(2):  # the first call of a jitted function and a later one (two dispatch paths)
        with raises_xla_error(r"tpjax::checked_sqrt\(\): ValueError: checked_sqrt: x\[1\] is negative \(-1\)"):
            np.asarray(f(jnp.asarray(f32(4, -1))))
    # The failed call left the thread's env as it was: the next call works.
    np.testing.assert_allclose(np.asarray(f(jnp.asarray(f32(16)))), f32(4))


def test_allocation_that_disagrees_with_the_shape_rule_names_the_op(ops):
    with raises_xla_error((r"op 'tpjax::outer_range_bad_rule': Tensor::FromEnvAlloc call 1 asked "
                                            r"for float32\[3, 2\], but the op's shape rule declares "
                                            r"float32\[2, 3\] for result 0")):
        np.asarray(jax.jit(lambda x: ops["bad_rule"](x, 2))(jnp.asarray(f32(1, 2, 3))))


def test_allocation_of_another_dtype_than_the_rule_names_the_op(ops):
    with raises_xla_error((r"op 'tpjax::outer_range_declared_int32': Tensor::FromEnvAlloc call 1 asked "
                           r"for float32\[3, 2\], but the op's shape rule declares int32\[3, 2\] for result 0")):
        np.asarray(jax.jit(lambda x: ops["bad_dtype_rule"](x, 2))(jnp.asarray(f32(1, 2, 3))))


def test_one_allocation_too_many_names_the_op(ops):
    with raises_xla_error((r"op 'tpjax::allocates_twice': Tensor::FromEnvAlloc call 2 "
                                            r"\(float32\[2\]\) is one more than the 1 result\(s\) its shape rule "
                                            r"declares")):
        np.asarray(jax.jit(ops["allocates_twice"])(jnp.asarray(f32(1, 2))))


@pytest.mark.parametrize("name, extra", [("scratch_into_fast", ()), ("scratch_into", ("abc",))])
def test_allocation_in_a_destination_passing_op_names_the_op(ops, name, extra):
    # Eagerly the scratch tensor comes from the caller's allocator, and the op works.
    out = np.zeros(2, np.float32)
    ops[name](f32(1, 2), out, *extra)
    np.testing.assert_array_equal(out, f32(2, 4) + len("".join(extra)))
    # Inside jax.jit the op declares no result, so there is no XLA buffer to give: refused,
    # with the op's name, whichever path of the handler (fast, or general for a str) runs.
    with raises_xla_error(rf"tpjax::{name}\(\): ValueError: cannot allocate 8 bytes \(shape \[2\]\) on cpu:0: "
                          r"the op's shape rule declares no result, and inside jax.jit Tensor::FromEnvAlloc "
                          r"can only hand out XLA's result buffers"):
        np.asarray(jax.jit(lambda x, o: ops[name](x, o, *extra))(jnp.asarray(f32(1, 2)), jnp.zeros(2, jnp.float32)))
    # The refusal left the thread's env as it was: an allocating op runs next.
    np.testing.assert_allclose(np.asarray(jax.jit(ops["checked_sqrt"])(jnp.asarray(f32(4)))), f32(2))


def test_traced_scalar_argument_is_a_type_error(ops):
    with pytest.raises(TypeError, match=(r"tpjax::scale\(\) argument 'alpha': a traced value cannot be a "
                                         r"kernel's float argument inside jax.jit")):
        jax.jit(lambda x, a: ops["scale"](x, a))(jnp.asarray(f32(1)), 2.0)


def test_wrong_scalar_type_names_the_argument(ops):
    with pytest.raises(TypeError, match=r"tpjax::outer_range\(\) argument 'n': expected int, got float"):
        jax.jit(lambda x: ops["outer_range"](x, 2.5))(jnp.asarray(f32(1)))


def test_handler_of_a_slot_without_a_plan_is_an_error():
    # Each plan slot has its own handler; one registered by hand before any plan filled
    # its slot (the last one: the tests define far fewer) reports that, without crashing.
    last = 2047
    jax.ffi.register_ffi_target("tpjax_test::empty_slot", _native.xla_ffi_handler("cpu", last), platform="cpu")
    x = jnp.asarray(f32(1))
    out = jax.ShapeDtypeStruct((1,), jnp.float32)
    with raises_xla_error(f"tensorplug XLA handler {last} has no plan"):
        np.asarray(jax.jit(lambda x: jax.ffi.ffi_call("tpjax_test::empty_slot", out)(x))(x))
    with pytest.raises(ValueError, match=r"xla_ffi_handler\(\): slot must be in \[0, 2048\), got 2048"):
        _native.xla_ffi_handler("cpu", 2048)
    with pytest.raises(ValueError, match=r"xla_ffi_handler\(\): platform must be 'cpu' or 'cuda', got 'tpu'"):
        _native.xla_ffi_handler("tpu", 0)


def test_a_plan_key_keeps_its_slot(mod):
    params = [("x", 0, 0, "", "view"), ("alpha", 2, 0, "alpha", "float")]
    plan = plans.make(tensorplug.op("tpjax_test::slot", mod.scale, returns=like("x")), rules=False)
    first = _native.xla_ffi_define("tpjax_test::slot", plan, params, 1, 0, 1)
    again = _native.xla_ffi_define("tpjax_test::slot", plan, params, 1, 0, 1)
    other = _native.xla_ffi_define("tpjax_test::slot/other", plan, params, 1, 0, 1)
    assert first == again and other != first
    # The call form must fit the plan: its parameters and its allocated results.
    with pytest.raises(ValueError, match="the plan of 'tpjax_test::bad' has 2 parameters, the call form 1"):
        _native.xla_ffi_define("tpjax_test::bad", plan, params[:1], 1, 0, 1)
    with pytest.raises(ValueError, match="the plan of 'tpjax_test::bad' returns 1 tensor"):
        _native.xla_ffi_define("tpjax_test::bad", plan, params, 1, 0, 2)
    with pytest.raises(TypeError):  # a function is not a plan
        _native.xla_ffi_define("tpjax_test::bad", mod.scale, params, 1, 0, 1)
    assert 0 <= first < 2048 and 0 <= other < 2048


def test_plan_slots_run_out_with_a_clear_error():
    # A fresh process: 2048 keys fill every slot; the next is a RuntimeError, and a key
    # already defined keeps its slot.
    code = textwrap.dedent(f"""
        import tensorplug
        from tensorplug import cpp, plans
        from tensorplug_adapters.jax import _native
        mod = cpp.load_inline("op_jax_slots", {SOURCE.split("// A new (x.shape")[0]!r}, functions=["axpy"])
        plan = plans.make(tensorplug.op("slots::axpy", mod.axpy), rules=False)
        params = [("x", 0, 0, "", "view"), ("out", 1, 0, "", "view"), ("alpha", 2, 0, "alpha", "float")]
        slots = [_native.xla_ffi_define(f"slots::op{{i}}", plan, params, 1, 1, 0) for i in range(2048)]
        assert sorted(slots) == list(range(2048)), slots[:5]
        try:
            _native.xla_ffi_define("slots::one_more", plan, params, 1, 1, 0)
        except RuntimeError as e:
            print(e)
        assert _native.xla_ffi_define("slots::op7", plan, params, 1, 1, 0) == slots[7]
    """)
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=os.environ, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.strip() == ("tensorplug: at most 2048 op call forms can run inside XLA in one process (each "
                                   "op, and each combination of None arguments and list lengths it is called with, "
                                   "is one); 'slots::one_more' is one more")


def test_handler_checks_the_number_of_operands(ops):
    x = jnp.asarray(f32(1))
    jax.jit(lambda x: ops["scale"](x, 1.0))(x)  # traced: defines the plan and registers its target
    out = jax.ShapeDtypeStruct((1,), jnp.float32)
    with raises_xla_error((r"op 'tpjax::scale': XLA passed 2 argument\(s\) and 1 result\(s\), "
                                            r"expected 1 and 1")):
        np.asarray(jax.jit(lambda x: jax.ffi.ffi_call("tpjax::scale", out)(x, x, alpha=np.float64(1)))(x))
    with raises_xla_error((r"op 'tpjax::scale': XLA passed 0 attribute\(s\), its plan expects 1 \(one per "
                           r"non-None scalar or int list argument\)")):
        np.asarray(jax.jit(lambda x: jax.ffi.ffi_call("tpjax::scale", out)(x))(x))


# ------------------------------------------------------------------ eager calls ----

def test_eager_calls_behave_as_the_function(ops, mod):
    x = f32(1, 2)
    np.testing.assert_array_equal(ops["scale"](x, 2.0), mod.scale(x, 2.0))
    assert type(ops["scale"](x, 2.0)) is np.ndarray
    # Concrete jax arrays with a kernel that writes none of them: the direct call.
    y = ops["scale"](jnp.asarray(x), 2.0)
    assert isinstance(y, jax.Array)
    np.testing.assert_array_equal(np.asarray(y), f32(2, 4))
    with pytest.raises(ValueError, match="checked_sqrt: x\\[0\\] is negative"):
        ops["checked_sqrt"](f32(-1))


def test_plain_function_still_refuses_tracers_and_points_at_tensorplug_op(mod):
    with pytest.raises(TypeError, match="declare the function with tensorplug.op"):
        jax.jit(lambda x: mod.scale(x, 2.0))(jnp.asarray(f32(1)))


def test_declaring_and_eager_numpy_calls_import_no_jax(tmp_path):
    code = textwrap.dedent(f"""
        import sys
        import numpy as np
        import tensorplug
        from tensorplug import cpp
        mod = cpp.load_inline("op_jax_noimport", {SOURCE.split("// A new (x.shape")[0]!r}, functions=["axpy"])
        op = tensorplug.op("noimport::axpy", mod.axpy)
        out = np.zeros(2, np.float32)
        op(np.ones(2, np.float32), out, 3.0)
        assert list(out) == [3.0, 3.0], out
        assert "jax" not in sys.modules, "jax was imported"
        print("ok")
    """)
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=os.environ, timeout=300)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "ok"


# ------------------------------------------------------ the XLA FFI declarations ----

def test_xla_ffi_declarations_match_jax_headers(tmp_path):
    """The jax plugin's xla_ffi_api.h declares the XLA FFI C API from its specification; compiled
    next to the headers of the installed jax, every struct the handler reads has the same
    layout."""
    compiler = shutil.which(os.environ.get("CXX", "c++"))
    if compiler is None:
        pytest.skip("no C++ compiler")
    include = jax.ffi.include_dir()
    # The extension chain's node: XLA_FFI_Extension_Base until XLA FFI API 0.3 (jax 0.10),
    # XLA_FFI_InternalExtension from 0.5 (jax 0.12), the same three fields.
    header = (Path(include) / "xla" / "ffi" / "api" / "c_api.h").read_text()
    extension = "XLA_FFI_Extension_Base" if "XLA_FFI_Extension_Base" in header else "XLA_FFI_InternalExtension"
    pairs = {  # ours: theirs
        "ExtensionBase": extension, "ApiVersion": "XLA_FFI_Api_Version",
        "ErrorCreateArgs": "XLA_FFI_Error_Create_Args", "Buffer": "XLA_FFI_Buffer", "ByteSpan": "XLA_FFI_ByteSpan",
        "Scalar": "XLA_FFI_Scalar", "Array": "XLA_FFI_Array", "Args": "XLA_FFI_Args", "Rets": "XLA_FFI_Rets", "Attrs": "XLA_FFI_Attrs",
        "MetadataExtension": "XLA_FFI_Metadata_Extension", "StreamGetArgs": "XLA_FFI_Stream_Get_Args",
        "DeviceOrdinalGetArgs": "XLA_FFI_DeviceOrdinal_Get_Args",
    }
    fields = [
        ("ExtensionBase", extension, ["struct_size", "type", "next"]),
        ("CallFrame", "XLA_FFI_CallFrame", ["api", "ctx", "stage", "args", "rets", "attrs"]),
        ("Metadata", "XLA_FFI_Metadata", ["api_version", "traits"]),
        ("Api", "XLA_FFI_Api", [("error_create", "XLA_FFI_Error_Create"), ("stream_get", "XLA_FFI_Stream_Get"),
                                ("device_ordinal_get", "XLA_FFI_DeviceOrdinal_Get")]),
        ("Buffer", "XLA_FFI_Buffer", ["dtype", "data", "rank", "dims"]),
        ("Attrs", "XLA_FFI_Attrs", ["size", "types", "names", "attrs"]),
    ]
    lines = ['#include "xla/ffi/api/c_api.h"', '#include "xla_ffi_api.h"', "using namespace tensorplug::xla_ffi;"]
    for ours, theirs in pairs.items():
        lines.append(f'static_assert(sizeof({ours}) == sizeof({theirs}), "{ours}");')
    for ours, theirs, names in fields:
        for name in names:
            mine, other = name if isinstance(name, tuple) else (name, name)
            lines.append(f'static_assert(offsetof({ours}, {mine}) == offsetof({theirs}, {other}), "{ours}.{mine}");')
    for ours, theirs in [("kPred", "PRED"), ("kS64", "S64"), ("kF32", "F32"), ("kBF16", "BF16"), ("kC128", "C128"),
                         ("kU64", "U64"), ("kF16", "F16")]:
        lines.append(f'static_assert(int({ours}) == int(XLA_FFI_DataType_{theirs}), "{ours}");')
    lines.append('static_assert(int(kAttrString) == int(XLA_FFI_AttrType_STRING), "string");')
    lines.append('static_assert(int(kAttrScalar) == int(XLA_FFI_AttrType_SCALAR), "scalar");')
    lines.append('static_assert(int(kAttrArray) == int(XLA_FFI_AttrType_ARRAY), "array");')
    lines.append('static_assert(offsetof(Array, data) == offsetof(XLA_FFI_Array, data), "Array.data");')
    lines.append('static_assert(int(kExtensionMetadata) == int(XLA_FFI_Extension_Metadata), "metadata");')
    lines.append('static_assert(int(kExecute) == int(XLA_FFI_ExecutionStage_EXECUTE), "execute");')
    source = tmp_path / "layout.cc"
    source.write_text("\n".join(lines) + "\n")
    done = subprocess.run([compiler, "-std=c++17", "-fsyntax-only", f"-I{include}",
                           f"-I{ROOT / 'plugins' / 'tensorplug_adapters' / 'jax'}", str(source)], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr


# ---------------------------------------------------------------------------- GPU ----

def test_jit_on_gpu_runs_on_xlas_stream():
    """On a CUDA machine: inside jax.jit on the GPU the kernel sees the stream XLA runs it on."""
    try:
        gpus = jax.devices("gpu")
    except RuntimeError:
        gpus = []
    if not gpus or shutil.which("nvcc") is None:
        pytest.skip("no CUDA device")
    source = r"""
    __global__ void plus_one_kernel(const float* x, float* y, int64_t n) {
      int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
      if (i < n) y[i] = x[i] + 1.0f;
    }
    // y = x + 1 on the env stream, which it records for the test.
    tensorplug::Tensor plus_one_gpu(tensorplug::TensorView x) {
      TENSORPLUG_CHECK(x.device().device_type == kDLCUDA, ValueError) << "x must be on the GPU";
      auto y = tensorplug::Tensor::FromEnvAlloc(x.shape(), x.dtype(), x.device());
      cudaStream_t stream = tensorplug::GetCurrentCUDAStream(x.device().device_id);
      tensorplug::Storage::Set("test_op_jax.stream", reinterpret_cast<void*>(stream));
      plus_one_kernel<<<(x.numel() + 255) / 256, 256, 0, stream>>>(x.data_ptr<float>(), y.mutable_data_ptr<float>(),
                                                                   x.numel());
      TENSORPLUG_CUDA_CHECK(cudaGetLastError());
      return y;
    }
    // The stream plus_one_gpu last saw.
    int64_t last_stream() { return reinterpret_cast<int64_t>(tensorplug::Storage::Get("test_op_jax.stream")); }
    """
    gpu_mod = cpp.load_inline("op_jax_gpu", "", cuda_sources=source, functions=["plus_one_gpu", "last_stream"])
    op = tensorplug.op("tpjax_gpu::plus_one", gpu_mod.plus_one_gpu, returns=tensorplug.like("x"))
    x = jax.device_put(jnp.arange(1000, dtype=jnp.float32), gpus[0])
    y = jax.jit(op)(x)
    np.testing.assert_array_equal(np.asarray(y), np.arange(1000, dtype=np.float32) + 1)
    # XLA runs GPU computations on a stream of its own, never the legacy default stream.
    assert gpu_mod.last_stream() != 0
