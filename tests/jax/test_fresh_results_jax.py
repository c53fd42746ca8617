"""A written parameter given as ``jax.ShapeDtypeStruct``: a fresh XLA result (issue 42 item 6).

The kernel gets an uninitialized XLA result buffer, as ``jax.ffi.ffi_call``'s results, instead of
an operand aliased to the result that the caller must fill (``jnp.empty_like(x)``). Kernels: the
shared destination-passing ``tptest::axpy`` (``out = alpha * x + y``, every element written;
tests/support/op_kernels.py) and a binary built by ``tvm_ffi.cpp.build_inline`` whose
``scale_into`` writes its second argument (tests/support/tvm_ffi_kernels.py).
"""

from __future__ import annotations

import pytest

jax = pytest.importorskip("jax", reason="jax not installed")
jnp = jax.numpy
np = pytest.importorskip("numpy", reason="numpy not installed")

import tensorplug  # noqa: E402


def arrays():
    x = jnp.asarray([1.0, 2.0, 3.0, 4.0], dtype=jnp.float32)
    y = jnp.asarray([10.0, 20.0, 30.0, 40.0], dtype=jnp.float32)
    return x, y


def struct_like(a):
    return jax.ShapeDtypeStruct(a.shape, a.dtype)


def test_fresh_result_equals_the_aliased_form_inside_jit(ops):
    axpy = ops.axpy
    x, y = arrays()
    aliased = jax.jit(lambda x, y: axpy(x, y, jnp.zeros_like(x), 2.0))(x, y)
    fresh = jax.jit(lambda x, y: axpy(x, y, struct_like(x), 2.0))(x, y)
    assert isinstance(fresh, jax.Array) and fresh.shape == (4,) and fresh.dtype == jnp.float32
    np.testing.assert_array_equal(np.asarray(fresh), [12.0, 24.0, 36.0, 48.0])
    np.testing.assert_array_equal(np.asarray(fresh), np.asarray(aliased))


def test_fresh_result_equals_the_aliased_form_eagerly(ops):
    axpy = ops.axpy
    x, y = arrays()
    fresh = axpy(x, y, struct_like(x), 0.5)
    aliased = axpy(x, y, jnp.zeros_like(x), 0.5)
    assert isinstance(fresh, jax.Array) and fresh.shape == (4,) and fresh.dtype == jnp.float32
    np.testing.assert_array_equal(np.asarray(fresh), [10.5, 21.0, 31.5, 42.0])
    np.testing.assert_array_equal(np.asarray(fresh), np.asarray(aliased))


def test_fresh_result_is_no_operand_and_no_alias_and_has_a_plan_of_its_own(ops):
    # Both forms of one op in one process: had they one plan key, the second would reach the
    # first's plan, whose operand count differs (the XLA handler refuses the call).
    axpy = ops.axpy
    x, y = arrays()
    aliased = jax.jit(lambda x, y: axpy(x, y, jnp.zeros_like(x), 1.0))
    fresh = jax.jit(lambda x, y: axpy(x, y, struct_like(x), 1.0))
    aliased_text, fresh_text = aliased.lower(x, y).as_text(), fresh.lower(x, y).as_text()
    assert 'custom_call @"tptest::axpy"(%arg0, %arg1, ' in aliased_text and "output_operand_aliases" in aliased_text
    assert 'custom_call @"tptest::axpy/fresh:out"(%arg0, %arg1)' in fresh_text
    assert "output_operand_aliases" not in fresh_text
    for _ in range(2):  # alternating, each form compiled and run
        np.testing.assert_array_equal(np.asarray(aliased(x, y)), [11.0, 22.0, 33.0, 44.0])
        np.testing.assert_array_equal(np.asarray(fresh(x, y)), [11.0, 22.0, 33.0, 44.0])


def test_fresh_result_under_vmap_and_in_a_loop(ops):
    axpy = ops.axpy
    xs = jnp.arange(12, dtype=jnp.float32).reshape(3, 4)
    batched = jax.jit(jax.vmap(lambda x: axpy(x, x, struct_like(x), 2.0)))(xs)
    np.testing.assert_array_equal(np.asarray(batched), 3 * np.asarray(xs))
    # Each iteration's result a fresh buffer, the loop carrying it: x -> 2x + x.
    looped = jax.jit(lambda x: jax.lax.fori_loop(0, 3, lambda i, v: axpy(v, v, struct_like(v), 2.0), x))
    np.testing.assert_array_equal(np.asarray(looped(xs[0])), 27 * np.asarray(xs[0]))


def test_a_struct_for_a_parameter_the_kernel_reads_is_a_type_error(ops):
    axpy = ops.axpy
    x, y = arrays()
    message = ("tptest::axpy() argument 'y': expected an array, got a jax.ShapeDtypeStruct; 'y' is a tensor the kernel "
               "reads, and a ShapeDtypeStruct (a fresh result buffer) stands only for a tensor parameter the kernel "
               "writes (this op writes 'out')")
    with pytest.raises(TypeError) as eager:
        axpy(x, struct_like(y), jnp.zeros_like(x), 1.0)
    assert str(eager.value).splitlines()[0] == message  # jax may add a note below
    with pytest.raises(TypeError) as traced:
        jax.jit(lambda x, y: axpy(x, struct_like(y), jnp.zeros_like(x), 1.0))(x, y)
    assert str(traced.value).splitlines()[0] == message
    with pytest.raises(TypeError, match=r"^tptest::axpy\(\) argument 'x': expected an array, got a "
                                        r"jax.ShapeDtypeStruct; 'x' is a tensor the kernel reads"):
        axpy(struct_like(x), y, struct_like(x), 1.0)  # the struct first: the jax adapter still takes the call


def test_a_struct_for_a_scalar_is_a_type_error(ops):
    x, y = arrays()
    with pytest.raises(TypeError, match=r"^tptest::axpy\(\) argument 'alpha': expected a float, got a "
                                        r"jax.ShapeDtypeStruct; 'alpha' is a float argument"):
        ops.axpy(x, y, struct_like(x), struct_like(x))


def test_a_struct_of_no_tensor_is_a_value_error(ops):
    x, y = arrays()
    with pytest.raises(ValueError, match=r"^tptest::axpy\(\) argument 'out': expected a jax.ShapeDtypeStruct of a "
                                         r"numeric or bool dtype, got dtype <U3"):
        ops.axpy(x, y, jax.ShapeDtypeStruct((4,), np.dtype("U3")), 1.0)
    with pytest.raises(ValueError, match=r"^tptest::axpy\(\) argument 'out': expected a jax.ShapeDtypeStruct whose "
                                         r"shape holds non-negative ints, got shape \(-4,\)"):
        ops.axpy(x, y, jax.ShapeDtypeStruct((-4,), jnp.float32), 1.0)


def test_a_struct_the_kernel_refuses_reaches_python_with_the_kernels_error(ops):
    x, y = arrays()
    with pytest.raises((jax.errors.JaxRuntimeError, ValueError), match="axpy: x, y and out must have one shape"):
        jax.block_until_ready(jax.jit(lambda x, y: ops.axpy(x, y, jax.ShapeDtypeStruct((5,), jnp.float32), 1.0))(x, y))


# Writes `out` (out = x + 1) and returns a new tensor of out's length holding out * 2: an
# output rule over the written parameter.
WRITE_AND_ALLOCATE = r"""
namespace tp = tensorplug;
tp::Tensor plus_one_into_and_twice(tp::TensorView x, tp::MutableView out) {
  TENSORPLUG_CHECK(x.numel() == out.numel(), ValueError) << "plus_one_into_and_twice: x and out differ in size";
  float* o = out.mutable_data_ptr<float>();
  for (int64_t i = 0; i < x.numel(); ++i) o[i] = x.data_ptr<float>()[i] + 1;
  tp::Tensor y = tp::Tensor::FromEnvAlloc({out.numel()}, out.dtype(), out.device());
  for (int64_t i = 0; i < out.numel(); ++i) y.mutable_data_ptr<float>()[i] = 2 * o[i];
  return y;
}
"""


def test_the_output_rule_sees_the_struct():
    mod = tensorplug.cpp.load_inline("fresh_results_jax_kernels", WRITE_AND_ALLOCATE,
                                     functions=["plus_one_into_and_twice"])
    op = tensorplug.op("tpfresh::plus_one_into_and_twice", mod.plus_one_into_and_twice,
                       returns=tensorplug.Output(shape=("out.shape[0]",), dtype="out"))
    x = jnp.asarray([1.0, 2.0, 3.0], dtype=jnp.float32)
    for call in (jax.jit(lambda x: op(x, struct_like(x))), lambda x: op(x, struct_like(x))):
        written, twice = call(x)
        assert written.shape == twice.shape == (3,) and written.dtype == twice.dtype == jnp.float32
        np.testing.assert_array_equal(np.asarray(written), [2.0, 3.0, 4.0])
        np.testing.assert_array_equal(np.asarray(twice), [4.0, 6.0, 8.0])
    # The rule read the struct's dtype: a float16 struct declares a float16 result, which the
    # kernel (float32 only) refuses.
    with pytest.raises((jax.errors.JaxRuntimeError, ValueError), match="float16"):
        jax.block_until_ready(jax.jit(lambda x: op(x, jax.ShapeDtypeStruct((3,), jnp.float16)))(x))


def test_a_sharded_op_takes_the_struct_eagerly_and_inside_jit(ops):
    # On one device; over several, tests/jax/test_sharding_jax.py (the struct split as its term).
    op = tensorplug.op("tpfresh::axpy_split", ops.module.axpy, sharding="n, n, n ->")
    x, y = arrays()
    fresh = jax.jit(lambda x, y: op(x, y, struct_like(x), 2.0))
    for result in (op(x, y, struct_like(x), 2.0), fresh(x, y)):
        assert isinstance(result, jax.Array) and result.shape == (4,) and result.dtype == jnp.float32
        np.testing.assert_array_equal(np.asarray(result), [12.0, 24.0, 36.0, 48.0])
    assert 'custom_call @"tpfresh::axpy_split/fresh:out"' in fresh.lower(x, y).as_text()
    # A struct for a parameter the kernel reads: the TypeError of an op without a rule.
    with pytest.raises(TypeError) as traced:
        jax.jit(lambda x, y: op(x, struct_like(y), jnp.zeros_like(x), 2.0))(x, y)
    assert str(traced.value).splitlines()[0] == (
        "tpfresh::axpy_split() argument 'y': expected an array, got a jax.ShapeDtypeStruct; 'y' is a tensor the "
        "kernel reads, and a ShapeDtypeStruct (a fresh result buffer) stands only for a tensor parameter the "
        "kernel writes (this op writes 'out')")


# ---------------------------------------------------------------- a tvm-ffi binary ----
@pytest.fixture(scope="module")
def tvm_ffi_ops(tmp_path_factory):
    pytest.importorskip("tvm_ffi", reason="apache-tvm-ffi not installed (pip install \"tensorplug[tvm-ffi]\")")
    import tvm_ffi_kernels

    return tvm_ffi_kernels.declare(tvm_ffi_kernels.build(tmp_path_factory.mktemp("fresh_tvm_ffi")),
                                   namespace="tpfresh_tvmffi")


def test_a_tvm_ffi_destination_function_writes_a_fresh_result_inside_jit(tvm_ffi_ops):
    scale_into = tvm_ffi_ops["scale_into"]  # out = alpha * x, a tvm-ffi binary's function, writes arg1
    x = jnp.asarray([1.0, -2.0, 3.0], dtype=jnp.float32)
    fresh = jax.jit(lambda x: scale_into(x, struct_like(x), 3.0))
    result = fresh(x)
    assert isinstance(result, jax.Array) and result.shape == (3,) and result.dtype == jnp.float32
    np.testing.assert_array_equal(np.asarray(result), [3.0, -6.0, 9.0])
    np.testing.assert_array_equal(np.asarray(result),
                                  np.asarray(jax.jit(lambda x: scale_into(x, jnp.zeros_like(x), 3.0))(x)))
    assert 'custom_call @"tpfresh_tvmffi::scale_into/fresh:arg1"(%arg0)' in fresh.lower(x).as_text()
    np.testing.assert_array_equal(np.asarray(scale_into(x, struct_like(x), 0.5)), [0.5, -1.0, 1.5])  # eagerly
