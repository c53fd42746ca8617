"""Documented behaviour at edges the suite once left untested (issue 22: 17 planted bugs
survived every test). Each test asserts what the docs promise, at the input that tells the
right code from the plausible slip: a strided int64 array of exactly two items, a size-1
dimension with an odd stride, sub-byte and vector-lane dtypes, a NULL pointer result, a
numpy subclass, a nested call's Python table, a second store of the same pointer, a
kernel-owned result with a byte offset inside jax.jit. Each is planted as a mutation in
tests/mutation/mutations.py."""

from __future__ import annotations

import numpy as np
import pytest

import tensorplug
from tensorplug import _core, cpp
from tensorplug.testing import DTYPES
from tensorplug.testing.checks import assert_values, call_state

from fake_device import CPU, CUDA, FakeDeviceAdapter, registered

KERNELS = r"""
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <tuple>
#include <vector>
namespace tp = tensorplug;

int64_t g_deletions = 0;
void CountDeletion(void* p) {
  ++g_deletions;
  std::free(p);
}
// Stores one pointer (with a counting deleter) under `key`, then the same pointer again:
// (deletions so far, the stored pointer is still it).
std::tuple<int64_t, bool> store_same_pointer_twice(std::string key) {
  g_deletions = 0;
  char* label = static_cast<char*>(std::malloc(16));
  std::strcpy(label, "still here");
  TENSORPLUG_CHECK(TPEnvStorageSet(key.c_str(), label, CountDeletion) == 0, RuntimeError) << "first store";
  TENSORPLUG_CHECK(TPEnvStorageSet(key.c_str(), label, CountDeletion) == 0, RuntimeError) << "second store";
  return {g_deletions, TPEnvStorageGet(key.c_str()) == label};
}
int64_t deletions() { return g_deletions; }

// Writes x[0] = 1 through the owning tensor's mutable_view().
void write_through_mutable_view(tp::Tensor x) { x.mutable_view().mutable_data_ptr<float>()[0] = 1; }

// A bare pointer result: NULL, or the address of a static.
void* pointer_result(bool null) {
  static int target;
  return null ? nullptr : &target;
}

// The same through the C ABI, as a C kernel returns it: a kTPOpaquePtr holding NULL.
extern "C" TP_EXPORT int __tensorplug_raw_null_pointer(void* self, const TPAny* args, int32_t nargs, TPAny* result) {
  (void)self;
  (void)args;
  (void)nargs;
  result->type_index = kTPOpaquePtr;
  result->flags = 0;
  result->v_ptr = nullptr;
  return 0;
}

// f(true) called through the C ABI (f: pointer_result): whether a C++ caller gets None too.
bool null_result_is_none(tp::Function f) { return f(true).is_none(); }

// The address of a fresh (3, 3, ...) int32 tensor of `ndim` dims from the env allocator
// (no tensor argument: the default CPU allocator).
int64_t fresh_address(int64_t ndim) {
  std::vector<int64_t> shape(static_cast<size_t>(ndim), 3);
  tp::Tensor y = tp::Tensor::FromEnvAlloc(shape, DLDataType{kDLInt, 32, 1}, DLDevice{kDLCPU, 0});
  return static_cast<int64_t>(reinterpret_cast<uintptr_t>(y.data_ptr()));
}

// A 1-d tensor of n items of the dtype (code, bits, lanes) from the env allocator.
tp::Tensor alloc_dtype(tp::TensorView like, int64_t code, int64_t bits, int64_t lanes, int64_t n) {
  DLDataType dtype{static_cast<uint8_t>(code), static_cast<uint8_t>(bits), static_cast<uint16_t>(lanes)};
  return tp::Tensor::FromEnvAlloc({n}, dtype, like.device());
}

bool is_contiguous(tp::TensorView x) { return x.is_contiguous(); }

// Calls f (which may call other kernels), then allocates like x.
tp::Tensor call_then_alloc(tp::TensorView x, tp::Function f) {
  f();
  return tp::Tensor::FromEnvAlloc(x.shape(), x.dtype(), x.device());
}
"""

FUNCTIONS = ["store_same_pointer_twice", "deletions", "write_through_mutable_view", "pointer_result",
             "null_result_is_none", "fresh_address", "alloc_dtype", "is_contiguous",
             "call_then_alloc"]


@pytest.fixture(scope="module")
def mod():
    return cpp.load_inline("contract_edges", KERNELS, functions=FUNCTIONS)


# ------------------------------------------------------------ the C++ kernel API ----
def test_mutable_view_of_read_only_data_is_refused(mod):
    x = np.zeros(3, np.float32)
    x.flags.writeable = False
    with pytest.raises(ValueError) as info:
        mod.write_through_mutable_view(x)
    assert str(info.value) == "tensor is read-only"
    np.testing.assert_array_equal(x, [0, 0, 0])
    writable = np.zeros(3, np.float32)
    mod.write_through_mutable_view(writable)
    np.testing.assert_array_equal(writable, [1, 0, 0])


@pytest.mark.parametrize("odd_stride", [7, 0, -5, 1])
def test_a_size_1_dimensions_stride_does_not_decide_contiguity(mod, odd_stride):
    base = np.arange(40, dtype=np.float32)
    # (3, 1) with element strides (1, odd_stride): compact, whatever the size-1 dim's stride.
    x = np.lib.stride_tricks.as_strided(base, shape=(3, 1), strides=(4, 4 * odd_stride))
    assert mod.is_contiguous(x) is True
    y = np.lib.stride_tricks.as_strided(base, shape=(1, 4, 1), strides=(4 * odd_stride, 4, 4 * odd_stride))
    assert mod.is_contiguous(y) is True
    assert mod.is_contiguous(base[::2].reshape(4, 5)[:, None, :]) is False  # a stride of 2 on a real dim


# ------------------------------------------------------------ provider storage ----
def test_storing_the_same_pointer_again_keeps_it(mod):
    key = "tests.contract_edges.same_pointer"
    try:
        assert mod.store_same_pointer_twice(key) == (0, True)  # no deleter ran: the pointer is still stored
        assert tensorplug.storage.contains(key)
    finally:
        tensorplug.storage.erase(key)
    assert mod.deletions() == 1  # the erase ran the deleter, once


# ------------------------------------------------------------------ allocation ----
def test_the_default_cpu_allocator_aligns_data_to_64_bytes(mod):
    # The header before the data grows with ndim: every ndim must still land on 64 bytes.
    addresses = [mod.fresh_address(ndim) for ndim in range(8) for _ in range(4)]
    assert [a % 64 for a in addresses] == [0] * len(addresses)


@pytest.mark.parametrize("bits, n, nbytes", [(4, 3, 2), (4, 5, 3), (1, 9, 2), (4, 2, 1)])
def test_sub_byte_tensors_count_their_last_partial_byte(mod, bits, n, nbytes):
    # numpy has no int4: its allocator refuses, and the message names the bytes asked for.
    with pytest.raises(TypeError) as info:
        mod.alloc_dtype(np.zeros(2, np.float32), 0, bits, 1, n)
    assert str(info.value) == (f"cannot allocate {nbytes} bytes (shape [{n}]) on cpu:0: numpy has no dtype for the "
                               "requested tensor")


def test_vector_lanes_count_in_the_size(mod):
    with pytest.raises(TypeError) as info:
        mod.alloc_dtype(np.zeros(2, np.float32), 2, 32, 4, 3)  # float32x4
    assert str(info.value) == "cannot allocate 48 bytes (shape [3]) on cpu:0: numpy has no dtype for the requested tensor"


# --------------------------------------------------------------------- results ----
def test_a_null_pointer_result_is_none(mod):
    assert mod.pointer_result(True) is None  # the C++ caster's nullptr
    assert mod.raw_null_pointer() is None  # a C kernel's kTPOpaquePtr of NULL
    assert mod.null_result_is_none(mod.pointer_result) is True  # C++ calling C++: None, not a NULL pointer
    handle = mod.pointer_result(False)
    assert type(handle) is tensorplug.Handle and handle.address != 0


def test_numpy_subclasses_are_numpy_arrays(tensorplug_kernels):
    class Tagged(np.ndarray):
        pass

    x = np.arange(6, dtype=np.float32).reshape(2, 3).view(Tagged)
    assert tensorplug_kernels.describe(x) == "float32|2,3|3,1|cpu:0|0"
    assert tensorplug_kernels.data_ptr(x) == x.__array_interface__["data"][0]  # in place, not through DLPack
    y = tensorplug_kernels.add_one(x)
    assert type(y) is np.ndarray  # numpy's output type, not tensorplug.Tensor
    np.testing.assert_array_equal(y, np.arange(1, 7, dtype=np.float32).reshape(2, 3))
    matrix = np.asmatrix(np.ones((2, 2), np.float32))
    z = tensorplug_kernels.add_one(matrix)
    assert type(z) is np.ndarray and z.tolist() == [[2, 2], [2, 2]]


# ------------------------------------------------------------ argument conversion ----
@pytest.mark.parametrize("step", [2, -1, -3, 3])
def test_strided_int64_arrays_of_two_items_come_in_as_their_values(tensorplug_kernels, step):
    base = np.arange(10, dtype=np.int64) * 11
    values = base[::step][:2]
    assert values.shape == (2,) and values.strides[0] == 8 * step
    assert tensorplug_kernels.echo_ints(values) == [int(v) for v in values]


def test_strided_torch_int64_tensor_of_two_items(tensorplug_kernels):
    torch = pytest.importorskip("torch", reason="torch not installed")
    values = torch.arange(6, dtype=torch.int64)[::3]
    assert values.stride() == (3,)
    assert tensorplug_kernels.echo_ints(values) == [0, 3]


# ----------------------------------------------------------- the call environment ----
def test_a_nested_call_restores_the_outer_calls_python_table(mod, tensorplug_kernels):
    outer_adapter = FakeDeviceAdapter("outerfw", stream_base=0xA0)
    inner_adapter = FakeDeviceAdapter("innerfw", stream_base=0xB0)
    with registered(outer_adapter), registered(inner_adapter):
        x = outer_adapter.tensor(np.ones((2, 3), np.float32), (CUDA, 0))
        inner_x = inner_adapter.tensor(np.ones(4, np.float32), (CUDA, 0))
        inner_results = []
        before = call_state("cuda:0")
        y = mod.call_then_alloc(x, lambda: inner_results.append(tensorplug_kernels.alloc_like(inner_x)))
        assert call_state("cuda:0") == before
    assert type(inner_results[0]) is inner_adapter.tensor_type
    assert inner_adapter.allocations == [((4,), "float32", "cuda:0")]
    # After the inner call returned, the outer call's allocation is the outer framework's.
    assert outer_adapter.allocations == [((2, 3), "float32", "cuda:0")]
    assert type(y) is outer_adapter.tensor_type and y.shape == (2, 3)


# ------------------------------------------------------------------------ the kit ----
def test_the_kits_call_state_includes_the_streams():
    outside = call_state("cpu", "cuda:0")
    assert outside == (_core.bound_allocator(), tensorplug.get_raw_stream("cpu"), tensorplug.get_raw_stream("cuda:0"))
    with tensorplug.use_raw_stream("cuda:0", 0x5151):
        inside = call_state("cpu", "cuda:0")
    assert inside[2] == 0x5151 and inside != outside
    with tensorplug.use_raw_stream("cpu", 0x5252):
        assert call_state("cpu")[1:] == (0x5252,)


@pytest.mark.parametrize("dtype", ["float64", "int32", "float16"])
def test_the_kits_value_check_refuses_another_dtype(dtype):
    from tensorplug_adapters.testing.numpy import NumpyFramework

    expected = np.arange(3, dtype=np.float32)
    with pytest.raises(AssertionError) as info:
        assert_values(NumpyFramework(), expected.astype(dtype), expected, "identity(x)")
    assert str(info.value).startswith(f"identity(x): dtype {dtype}, expected float32")
    assert_values(NumpyFramework(), expected.copy(), expected, "identity(x)")
    assert "float32" in DTYPES


# ------------------------------------------------------------ the compat layer ----
COMPAT_SOURCE = r"""
#include <tuple>
int64_t data_size(int64_t numel, int64_t code, int64_t bits, int64_t lanes) {
  DLDataType dtype{static_cast<uint8_t>(code), static_cast<uint8_t>(bits), static_cast<uint16_t>(lanes)};
  return static_cast<int64_t>(tvm::ffi::GetDataSize(static_cast<size_t>(numel), dtype));
}
// (the free function on the DLTensor, the member)
std::tuple<bool, bool> compat_contiguous(tvm::ffi::TensorView x) {
  return {tvm::ffi::IsContiguous(*x.operator->()), x.IsContiguous()};
}
"""


@pytest.mark.parametrize("numel, code, bits, lanes, nbytes", [
    (3, 2, 32, 4, 48),   # float32x4: 3 items of 16 bytes
    (5, 0, 8, 2, 10),    # int8x2
    (3, 0, 4, 1, 2),     # int4: 12 bits round up to 2 bytes
    (3, 0, 4, 2, 3),     # int4x2: 24 bits
    (0, 2, 32, 4, 0),
])
def test_compat_get_data_size_counts_lanes(numel, code, bits, lanes, nbytes):
    assert compat().data_size(numel, code, bits, lanes) == nbytes


def compat():
    return cpp.load_inline("contract_edges_compat", cpp_sources=COMPAT_SOURCE,
                           functions=["data_size", "compat_contiguous"], compat="tvm_ffi")


@pytest.mark.parametrize("shape", [(0, 2), (2, 0), (3, 0, 2)])
def test_compat_is_contiguous_calls_every_empty_tensor_contiguous(shape):
    # numpy gives empty arrays zero strides: whichever dimension is 0, the tensor is empty
    # (docs/migration.md: IsContiguous means native is_contiguous(), which says so).
    x = np.lib.stride_tricks.as_strided(np.zeros(1, np.float32), shape=shape, strides=(0,) * len(shape))
    assert compat().compat_contiguous(x) == (True, True)


# ------------------------------------------------------------- jax.jit results ----
XLA_SOURCE = r"""
#include <cstdlib>
#include <cstring>
namespace tp = tensorplug;

// A (rows, cols) float32 tensor in the kernel's own memory (not FromEnvAlloc), element
// (i, j) = x[i, j] + 100, placed `skip` floats after the allocation's start (its DLPack
// byte_offset) and, when `transposed`, column-major. The skipped floats hold -1.
struct Owned {
  DLManagedTensorVersioned managed;
  int64_t shape[2];
  int64_t strides[2];
};
void DeleteOwned(DLManagedTensorVersioned* m) {
  std::free(m->dl_tensor.data);
  delete reinterpret_cast<Owned*>(m);
}
tp::Tensor owned_result(tp::TensorView x, int64_t skip, bool transposed) {
  const int64_t rows = x.size(0), cols = x.size(1);
  auto* owned = new Owned{};
  float* data = static_cast<float*>(std::malloc(sizeof(float) * static_cast<size_t>(skip + rows * cols)));
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
  m.dl_tensor.data = data;
  m.dl_tensor.device = DLDevice{kDLCPU, 0};
  m.dl_tensor.ndim = 2;
  m.dl_tensor.dtype = DLDataType{kDLFloat, 32, 1};
  m.dl_tensor.shape = owned->shape;
  m.dl_tensor.strides = owned->strides;
  m.dl_tensor.byte_offset = static_cast<uint64_t>(skip) * sizeof(float);
  return tp::Tensor::FromDLPackVersioned(&m);
}
"""


@pytest.fixture(scope="module")
def owned_op():
    pytest.importorskip("jax", reason="jax not installed")
    mod = cpp.load_inline("contract_edges_xla", XLA_SOURCE, functions=["owned_result"])
    return tensorplug.op("tpedges::owned_result", mod.owned_result, returns=tensorplug.like("x"))


@pytest.mark.parametrize("skip", [0, 1, 5])
def test_jit_copies_a_kernel_owned_result_from_its_byte_offset(owned_op, skip):
    import jax

    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    eager = owned_op(x, skip, False)  # numpy, eagerly: the kernel's own tensor, as numpy
    np.testing.assert_array_equal(eager, x + 100)
    jitted = jax.jit(lambda x: owned_op(x, skip, False))(x)
    assert isinstance(jitted, jax.Array) and jitted.shape == (2, 3)
    np.testing.assert_array_equal(np.asarray(jitted), x + 100)


def test_jit_refuses_a_non_compact_kernel_owned_result(owned_op):
    import jax

    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    np.testing.assert_array_equal(owned_op(x, 2, True), x + 100)  # eagerly: a strided numpy view
    with pytest.raises((jax.errors.JaxRuntimeError, ValueError)) as info:
        jax.block_until_ready(jax.jit(lambda x: owned_op(x, 2, True))(x))
    assert ("op 'tpedges::owned_result' returned result 0 in memory XLA does not own; allocate results with "
            "Tensor::FromEnvAlloc") in str(info.value)
