"""Property-based tests (hypothesis) of the paths that convert and allocate, over generated
shapes, strides (negative, zero, size-1 dimensions, offsets), dtypes (sub-byte and vector
lanes included) and every installed framework: argument conversion, results converted to
every framework, output rules, ``is_contiguous``/``ForEachOffset``, the XLA handler's copies,
the compat accessors, and an op's two call loops (C and Python) over generated arguments.

Each test is bounded (``BOUNDED``: a fixed number of examples, no deadline, derandomized so
a CI run is reproducible and costs the same each time; no example database written to
disk). Raise ``max_examples`` locally to search harder:
``TENSORPLUG_HYPOTHESIS_EXAMPLES=500 pytest tests/core/test_properties.py``.
"""

from __future__ import annotations

import functools
import itertools
import math
import os
import re

import pytest

hypothesis = pytest.importorskip("hypothesis", reason="hypothesis not installed")
np = pytest.importorskip("numpy", reason="numpy not installed")

from hypothesis import HealthCheck, assume, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

import tensorplug  # noqa: E402
from tensorplug import cpp  # noqa: E402
from tensorplug import Output  # noqa: E402
from tensorplug.testing import DTYPES  # noqa: E402
from tensorplug.testing.checks import assert_values, needs_host, plus_one, same_strides, seen  # noqa: E402
from tensorplug.testing.framework import Unsupported, contiguous_strides, numpy_view, sample  # noqa: E402

EXAMPLES = int(os.environ.get("TENSORPLUG_HYPOTHESIS_EXAMPLES", "25"))


def bounded(examples: int = EXAMPLES):
    return settings(max_examples=examples, deadline=None, derandomize=True, database=None,
                    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])


# ------------------------------------------------------------------ strategies ----
@st.composite
def layouts(draw, max_ndim=4, max_extent=4, negative=True):
    """``(shape, strides, offset)``: strides in elements, any sign (zero included), and an
    offset of extra elements before element 0 of the view."""
    ndim = draw(st.integers(0, max_ndim))
    shape = tuple(draw(st.lists(st.integers(0, max_extent), min_size=ndim, max_size=ndim)))
    low = -7 if negative else 0
    strides = tuple(draw(st.lists(st.integers(low, 7), min_size=ndim, max_size=ndim)))
    return shape, strides, draw(st.integers(0, 3))


def strided(framework, shape, strides, offset, dtype):
    """``(tensor, expected, strides)``: a ``framework`` view of ``shape`` with ``strides``
    into a buffer, element 0 at ``offset`` plus what negative strides need, holding the
    kit's sample values (aliased elements: the last written); the strides the tensor has.
    Empty tensors are made compact. Raises Unsupported when the framework cannot."""
    expected = sample(shape, dtype)
    if expected.size == 0:
        return framework.from_numpy(expected, dtype=dtype), expected, contiguous_strides(shape)
    start = offset + sum(-s * (e - 1) for e, s in zip(shape, strides) if s < 0)
    size = start + sum(s * (e - 1) for e, s in zip(shape, strides) if s > 0) + 1
    base = np.zeros(size, expected.dtype)
    view = numpy_view(base, shape, strides, start)
    view[...] = expected
    base_tensor = framework.from_numpy(base, dtype=dtype)
    return framework.as_strided(base_tensor, shape, strides, start), view.copy(), strides


def real_sum(values) -> float:
    return float(np.real(values).astype(np.float64).sum())


_negative_strides: dict[str, bool] = {}


def takes_negative_strides(framework) -> bool:
    """Whether the framework can make a view with a negative stride (torch cannot)."""
    if framework.name not in _negative_strides:
        try:
            strided(framework, (2,), (-1,), 0, "float32")
            _negative_strides[framework.name] = True
        except Unsupported:
            _negative_strides[framework.name] = False
    return _negative_strides[framework.name]


# ------------------------------------------------------------ argument conversion ----
@bounded()
@given(data=st.data(), dtype=st.sampled_from(DTYPES))
def test_kernels_see_every_layout_as_it_is(tensorplug_adapter, tensorplug_kernels, data, dtype):
    fw = tensorplug_adapter
    needs_host(fw)
    assume(not fw.unsupported_dtype(dtype))  # a dtype the framework lacks (a skip would end the whole test)
    shape, strides, offset = data.draw(layouts(negative=takes_negative_strides(fw)), label="layout")
    try:
        x, expected, made = strided(fw, shape, strides, offset, dtype)
    except Unsupported:
        # jax: no strided views at all; the compact tensor of the shape instead.
        x, expected, made = fw.from_numpy(sample(shape, dtype), dtype=dtype), sample(shape, dtype), None
    got = seen(tensorplug_kernels, x)
    assert (got.dtype, got.shape, got.device) == (dtype, shape, "cpu:0")
    assert same_strides(got.strides, made or contiguous_strides(shape), shape), (got.strides, made)
    assert tensorplug_kernels.strided_sum(x) == pytest.approx(real_sum(expected), rel=1e-6, abs=1e-6)


@bounded()
@given(values=st.lists(st.integers(-2**63, 2**63 - 1), max_size=6), step=st.sampled_from([1, 2, 3, -1, -2]),
       dtype=st.sampled_from(["int64", "int32", "uint8"]))
def test_integer_arrays_of_any_stride_come_in_as_their_values(tensorplug_kernels, values, step, dtype):
    info = np.iinfo(dtype)
    values = [min(max(v, info.min), info.max) for v in values]
    base = np.zeros(max(1, len(values) * abs(step)), dtype)
    view = base[::step][:len(values)] if step > 0 else base[::step][:len(values)]
    view[...] = values
    assert tensorplug_kernels.echo_ints(view) == values


# ----------------------------------------------------------- results everywhere ----
@bounded()
@given(layout=layouts(), dtype=st.sampled_from(DTYPES))
def test_results_reach_every_framework(tensorplug_adapter, tensorplug_kernels, layout, dtype):
    """A numpy view of any layout, as this framework's tensor: add_one allocates through the
    framework; identity returns the view itself, converted, or refuses it as declared."""
    from tensorplug_adapters.testing.numpy import NumpyFramework

    fw = tensorplug_adapter
    needs_host(fw)
    assume(not fw.unsupported_dtype(dtype))
    assume(dtype != "bfloat16" or NumpyFramework().unsupported_dtype(dtype) is None)  # ml_dtypes installed
    shape, strides, offset = layout
    negative = any(s < 0 for s, e in zip(strides, shape) if e > 1) and 0 not in shape
    refusals = fw.refusals()
    # Converting a negative-stride view is where torch aborts the process; the kit checks
    # that refusal in a forked child (TestLayouts). Here: only what the framework takes.
    assume(not (negative and "negative" in refusals))
    x, expected, _ = strided(NumpyFramework(), shape, strides, offset, dtype)
    with tensorplug.output_framework(fw.name):
        y = tensorplug_kernels.add_one(x)
        try:
            z = tensorplug_kernels.identity(x)
        except Exception as exc:  # noqa: BLE001  (judged against the declaration below)
            declared = [r for r in refusals.values() if isinstance(exc, r.error) and re.search(r.match, str(exc))]
            assert declared, f"an undeclared refusal of {shape} strides {strides}: {type(exc).__name__}: {exc}"
            z = None
    assert type(y) is fw.output_type()
    assert_values(fw, y, plus_one(expected), f"add_one of {dtype} {shape} strides {strides}")
    if z is not None:
        assert type(z) is fw.output_type()
        assert_values(fw, z, expected, f"identity of {dtype} {shape} strides {strides}")


# ----------------------------------------------------------------- output rules ----
_op_names = itertools.count()


@st.composite
def dim_expressions(draw, ndim):
    """An output-rule dimension over tensor ``x`` (``ndim`` dims) and int ``n``: literals,
    ``x.shape[i]`` (negative i included) and ``n``, negated or not, joined by + - * // %."""
    plain = st.one_of(st.integers(0, 9).map(str), st.integers(-ndim, ndim - 1).map(lambda i: f"x.shape[{i}]"),
                      st.just("n"))
    atoms = st.one_of(plain, plain.map(lambda a: f"(-{a})"))
    text = draw(atoms)
    for _ in range(draw(st.integers(0, 3))):
        op = draw(st.sampled_from(["+", "-", "*", "//", "%"]))
        right = draw(st.integers(1, 5).map(str)) if op in ("//", "%") else draw(atoms)
        text = f"({text} {op} {right})"
    return text


@pytest.fixture(scope="module")
def rule_kernel(kernels):
    return kernels.shaped


@bounded(50)
@given(data=st.data(), shape=st.lists(st.integers(1, 9), min_size=1, max_size=4), n=st.integers(0, 20),
       dtype=st.sampled_from(DTYPES))
def test_output_rules_evaluate_like_python(rule_kernel, data, shape, n, dtype):
    shape = tuple(shape)
    dims = data.draw(st.lists(dim_expressions(len(shape)), min_size=1, max_size=3), label="dims")
    expected = tuple(eval(d, {}, {"x": np.empty(shape), "n": n}) for d in dims)  # noqa: S307  (the test's oracle)
    op = tensorplug.op(f"tpprop::rule_{next(_op_names)}", rule_kernel, returns=Output(shape=tuple(dims), dtype="x"))
    spec = tensorplug.TensorSpec(shape, "float32", tensorplug.Device("cpu", 0))
    if any(d < 0 for d in expected):
        with pytest.raises(ValueError, match=r"output rule: result 0 has shape \(.*\), with a negative dimension"):
            op.output_specs({"x": spec, "n": n})
        return
    (got,) = op.output_specs({"x": spec, "n": n})
    assert got == tensorplug.TensorSpec(expected, "float32", tensorplug.Device("cpu", 0))
    like = tensorplug.op(f"tpprop::like_{next(_op_names)}", rule_kernel, returns=tensorplug.like("x", dtype=dtype))
    assert like.output_specs({"x": spec, "n": n}) == (tensorplug.TensorSpec(shape, dtype, spec.device),)


# --------------------------------------------------- is_contiguous, ForEachOffset ----
LAYOUT_KERNELS = r"""
// The offsets ForEachOffset visits, in order.
std::vector<int64_t> offsets(tp::TensorView x) {
  std::vector<int64_t> out;
  tp::ForEachOffset(x, [&](int64_t offset) { out.push_back(offset); });
  return out;
}
bool is_contiguous(tp::TensorView x) { return x.is_contiguous(); }
"""


@pytest.fixture(scope="module")
def layout_kernels(kernels):
    return kernels


def compact(shape, strides) -> bool:
    """Row-major compact as docs/cpp.md states it: strides of size-1 dims ignored, empty
    tensors contiguous."""
    if 0 in shape:
        return True
    step = 1
    for extent, stride in reversed(list(zip(shape, strides))):
        if extent == 1:
            continue
        if stride != step:
            return False
        step *= extent
    return True


@bounded(60)
@given(layout=layouts(max_ndim=5, max_extent=3))
def test_for_each_offset_and_is_contiguous_follow_the_strides(layout_kernels, layout):
    from tensorplug_adapters.testing.numpy import NumpyFramework

    shape, strides, offset = layout
    x, _, made = strided(NumpyFramework(), shape, strides, offset, "float32")
    expected = [sum(i * s for i, s in zip(index, made)) for index in np.ndindex(*shape)]
    assert list(layout_kernels.offsets(x)) == expected
    assert layout_kernels.is_contiguous(x) is compact(shape, made)


# ---------------------------------------------------------- compat accessors ----
COMPAT_KERNELS = r"""
int64_t data_size(int64_t numel, int64_t code, int64_t bits, int64_t lanes) {
  DLDataType dtype{static_cast<uint8_t>(code), static_cast<uint8_t>(bits), static_cast<uint16_t>(lanes)};
  return static_cast<int64_t>(tvm::ffi::GetDataSize(static_cast<size_t>(numel), dtype));
}
// (GetDataSize(x), IsContiguous(*x), x.IsContiguous(), x.is_contiguous(), x.strides() as a list)
std::tuple<int64_t, bool, bool, bool> facts(tvm::ffi::TensorView x) {
  return {static_cast<int64_t>(tvm::ffi::GetDataSize(x)), tvm::ffi::IsContiguous(*x.operator->()),
          x.IsContiguous(), x.is_contiguous()};
}
"""


@pytest.fixture(scope="module")
def compat_kernels():
    return cpp.load_inline("property_compat", "#include <tuple>\n" + COMPAT_KERNELS, functions=["data_size", "facts"],
                           compat="tvm_ffi")


@bounded(60)
@given(numel=st.integers(0, 10**6), bits=st.sampled_from([1, 2, 4, 6, 8, 16, 32, 64]),
       lanes=st.sampled_from([1, 2, 3, 4, 16]), code=st.sampled_from([0, 1, 2]))
def test_compat_get_data_size_is_bits_times_lanes_rounded_up(compat_kernels, numel, bits, lanes, code):
    assert compat_kernels.data_size(numel, code, bits, lanes) == math.ceil(numel * bits * lanes / 8)


@bounded(40)
@given(layout=layouts(max_ndim=4, max_extent=3), dtype=st.sampled_from(["float32", "int8", "float64", "complex64"]))
def test_compat_accessors_agree_with_the_native_ones(compat_kernels, layout, dtype):
    from tensorplug_adapters.testing.numpy import NumpyFramework

    shape, strides, offset = layout
    x, expected, made = strided(NumpyFramework(), shape, strides, offset, dtype)
    size, free_function, member, native = compat_kernels.facts(x)
    assert size == expected.size * expected.itemsize
    assert free_function is member is native is compact(shape, made)


# -------------------------------------------------------- allocation sizes ----
ALLOC_KERNEL = r"""
tp::Tensor alloc_dtype(tp::TensorView like, int64_t code, int64_t bits, int64_t lanes, int64_t n) {
  DLDataType dtype{static_cast<uint8_t>(code), static_cast<uint8_t>(bits), static_cast<uint16_t>(lanes)};
  return tp::Tensor::FromEnvAlloc({n}, dtype, like.device());
}
"""


@pytest.fixture(scope="module")
def alloc_kernel(kernels):
    return kernels.alloc_dtype


@bounded(40)
@given(n=st.integers(1, 10**5), bits=st.sampled_from([1, 2, 4, 6, 8, 16]), lanes=st.sampled_from([1, 2, 3, 4]))
def test_allocations_name_the_bytes_of_sub_byte_and_vector_dtypes(alloc_kernel, n, bits, lanes):
    # numpy has none of these dtypes (int4, int8x2, ...): its allocator refuses, naming the size.
    assume(not (bits >= 8 and lanes == 1))
    with pytest.raises(TypeError) as info:
        alloc_kernel(np.zeros(1, np.float32), 0, bits, lanes, n)
    assert str(info.value) == (f"cannot allocate {math.ceil(n * bits * lanes / 8)} bytes (shape [{n}]) on cpu:0: "
                               "numpy has no dtype for the requested tensor")


# --------------------------------------------------------- the XLA handler ----
XLA_KERNEL = r"""
struct Owned {
  DLManagedTensorVersioned managed;
  int64_t shape[2];
  int64_t strides[2];
};
void DeleteOwned(DLManagedTensorVersioned* m) {
  std::free(m->dl_tensor.data);
  delete reinterpret_cast<Owned*>(m);
}
// x + 100 in the kernel's own memory (not FromEnvAlloc): `skip` floats of -1 first (the
// byte_offset), column-major when `transposed`.
tp::Tensor owned_result(tp::TensorView x, int64_t skip, bool transposed) {
  const int64_t rows = x.size(0), cols = x.size(1);
  auto* owned = new Owned{};
  float* data = static_cast<float*>(std::malloc(sizeof(float) * static_cast<size_t>(skip + rows * cols + 1)));
  for (int64_t k = 0; k < skip; ++k) data[k] = -1;
  owned->shape[0] = rows;
  owned->shape[1] = cols;
  owned->strides[0] = transposed ? 1 : cols;
  owned->strides[1] = transposed ? rows : 1;
  for (int64_t i = 0; i < rows; ++i)
    for (int64_t j = 0; j < cols; ++j)
      data[skip + i * owned->strides[0] + j * owned->strides[1]] = x.data_ptr<float>()[i * cols + j] + 100;
  DLManagedTensorVersioned& m = owned->managed;
  m.version = {DLPACK_MAJOR_VERSION, DLPACK_MINOR_VERSION};
  m.deleter = DeleteOwned;
  m.dl_tensor = DLTensor{data, DLDevice{kDLCPU, 0}, 2, DLDataType{kDLFloat, 32, 1}, owned->shape, owned->strides,
                         static_cast<uint64_t>(skip) * sizeof(float)};
  return tp::Tensor::FromDLPackVersioned(&m);
}
"""


@pytest.fixture(scope="module")
def owned_op(kernels):
    pytest.importorskip("jax", reason="jax not installed")
    return tensorplug.op("tpprop::owned_result", kernels.owned_result, returns=tensorplug.like("x"))


@pytest.fixture(scope="module")
def kernels():
    """The native kernels of this module, compiled once (one compile: they cost seconds each)."""
    source = ("#include <cstdlib>\n#include <vector>\nnamespace tp = tensorplug;\n"
              "tp::Tensor shaped(tp::TensorView x, int64_t n) {\n  (void)n;\n"
              "  return tp::Tensor::FromEnvAlloc(x.shape(), x.dtype(), x.device());\n}\n"
              + LAYOUT_KERNELS + ALLOC_KERNEL + XLA_KERNEL)
    return cpp.load_inline("property_kernels", source,
                           functions=["shaped", "offsets", "is_contiguous", "alloc_dtype", "owned_result"])


@bounded(12)
@given(rows=st.integers(1, 4), cols=st.integers(1, 4), skip=st.integers(0, 5), transposed=st.booleans())
def test_jit_copies_or_refuses_kernel_owned_results(owned_op, rows, cols, skip, transposed):
    import jax

    x = np.arange(rows * cols, dtype=np.float32).reshape(rows, cols) - 3
    run = jax.jit(lambda x: owned_op(x, skip, transposed))
    if transposed and rows > 1 and cols > 1:  # not compact: XLA's buffer cannot take it as it is
        with pytest.raises((jax.errors.JaxRuntimeError, ValueError), match="in memory XLA does not own"):
            jax.block_until_ready(run(x))
    else:
        np.testing.assert_array_equal(np.asarray(run(x)), x + 100)


class _Claimed:
    """A tensor type of its own, claimed for ops by _ClaimingAdapter."""


class _NotAList(list):
    """Not a list to an op: only exact lists and tuples stand for their first item."""


class _ClaimingAdapter:
    @tensorplug.hookimpl
    def tensorplug_adapter_info(self):
        return tensorplug.AdapterInfo(name="claiming", framework="numpy", tensor_types=("_Claimed",),
                                      capabilities=(), fast_path=False)

    @tensorplug.hookimpl
    def tensorplug_op_impl(self, op, arg_type):
        if arg_type is not _Claimed:
            return None
        return lambda *args, **kwargs: ("claimed", tuple(map(id, args)), tuple(kwargs))


@pytest.fixture(scope="module")
def claimed_op(kernels):
    adapter = _ClaimingAdapter()
    tensorplug.register_adapter(adapter)
    try:
        yield tensorplug.op("tpprop::shaped", kernels.shaped, returns=tensorplug.like("x"))
    finally:
        tensorplug.unregister_adapter(adapter)


_ARRAY = np.arange(3, dtype=np.float32)
_CLAIMED = _Claimed()
_SCALARS = st.sampled_from([_ARRAY, _CLAIMED, None, 2, 1.5, "s", object()])
_ARGS = st.recursive(_SCALARS, lambda inner: st.one_of(st.lists(inner, max_size=3),
                                                       st.lists(inner, max_size=3).map(tuple),
                                                       st.lists(inner, max_size=2).map(_NotAList)),
                     max_leaves=6)


def _outcome(call, args, kwargs):
    try:
        result = call(*args, **kwargs)
    except Exception as error:  # the function's own refusals: compared by type and text
        return ("raised", type(error), str(error))
    if isinstance(result, np.ndarray):
        return ("array", result.dtype, result.shape, result.tobytes())
    return ("returned", result)


@bounded(200)
@given(args=st.lists(_ARGS, max_size=4),
       kwargs=st.dictionaries(st.sampled_from(["x", "n", "other"]), _ARGS, max_size=2))
def test_an_op_s_c_call_and_its_python_call_agree(claimed_op, args, kwargs):
    # The C loop (plain calls) and Op.__call__ (what dynamo inlines) pick the same callable,
    # or the kernel function, for any mix of arguments: the same result or the same error.
    python_call = functools.partial(tensorplug.Op.__call__, claimed_op)
    assert _outcome(claimed_op, args, kwargs) == _outcome(python_call, args, kwargs)
