"""A result whose strides are a transposition becomes a jax array with the right elements, on
every supported jax (plugins/tensorplug_adapters/jax/dlpack_strides.py). jax 0.6.2, jax's last
release for Python 3.10, reads such a tensor of aligned memory in memory order (jax-ml/jax#17784):
the adapter asks jax once and, where it does, copies such a result into a row-major array
first; jax 0.10.2 reads strides and takes the result as it is.
"""

import numpy as np
import pytest

jax = pytest.importorskip("jax", reason="jax not installed")

import tensorplug  # noqa: E402
from tensorplug_adapters.jax import dlpack_strides  # noqa: E402


def _transposed(shape, axes):
    """A view of tensorplug's own (64-byte-aligned: the memory jax 0.6.2 wraps without a
    copy) float32 ``shape`` tensor holding 0, 1, 2, ... with its axes permuted by ``axes``;
    and the numpy array it should become."""
    memory = tensorplug.empty(shape, "float32")
    host = np.from_dlpack(memory)
    host[...] = np.arange(host.size, dtype=np.float32).reshape(shape)
    view = host.transpose(axes)
    return tensorplug.from_dlpack(view), view.copy()


def _to_jax(tensor):
    return tensorplug.output_table("jax").to_framework(tensor)


@pytest.mark.parametrize("shape, axes", [((2, 3), (1, 0)), ((2, 3, 4), (2, 0, 1)), ((2, 3, 4), (0, 2, 1)),
                                         ((1, 3, 4), (2, 0, 1))])
def test_a_transposed_result_comes_back_transposed(shape, axes):
    tensor, expected = _transposed(shape, axes)
    y = _to_jax(tensor)
    assert isinstance(y, jax.Array) and y.shape == expected.shape
    np.testing.assert_array_equal(np.asarray(y), expected)
    np.testing.assert_array_equal(np.asarray(y + 0), expected)  # through an XLA computation too


def test_the_probe_says_what_this_jax_does():
    # jax's own from_dlpack of an aligned transposed view: by its strides, or in memory order.
    tensor, expected = _transposed((3, 4), (1, 0))
    read = np.asarray(jax.numpy.from_dlpack(tensor))
    assert dlpack_strides.reads_strides(jax) is bool(np.array_equal(read, expected)), jax.__version__


@pytest.mark.parametrize("shape, axes", [((2, 3), (1, 0)), ((2, 3, 4), (2, 0, 1)), ((1, 3, 4), (2, 0, 1))])
def test_where_jax_reads_memory_order_the_result_is_copied_row_major(monkeypatch, shape, axes):
    # The path jax 0.6.2 takes, on the jax in hand: the probe's answer set to "memory order".
    monkeypatch.setattr(dlpack_strides, "_reads_strides", False)
    tensor, expected = _transposed(shape, axes)
    y = _to_jax(tensor)
    np.testing.assert_array_equal(np.asarray(y), expected)
    assert y.unsafe_buffer_pointer() != tensor.data_ptr  # a copy, not the kernel's memory
    assert y.devices() == {jax.devices("cpu")[0]}


def test_a_copied_result_keeps_a_dtype_numpy_cannot_import(monkeypatch):
    # bfloat16: numpy's DLPack import refuses it; the copy reads the bytes by the strides.
    torch = pytest.importorskip("torch", reason="torch not installed (the one framework here that exports a "
                                                "transposed bfloat16 tensor)")
    monkeypatch.setattr(dlpack_strides, "_reads_strides", False)
    x = torch.arange(12, dtype=torch.bfloat16).reshape(3, 4).t()
    y = _to_jax(tensorplug.from_dlpack(x))
    assert y.dtype == jax.numpy.bfloat16 and y.shape == (4, 3)
    np.testing.assert_array_equal(np.asarray(y, dtype=np.float32), x.float().numpy())


@pytest.mark.parametrize("shape, strides, row_major, transposition", [
    ((3, 4), (4, 1), True, True), ((4, 3), (1, 4), False, True), ((1, 4), (9, 1), True, True),
    ((0, 3), (7, 7), True, True), ((3, 3), (8, 2), False, False), ((3, 4), (0, 1), False, False),
    ((3, 4), (-4, 1), False, False), ((2, 3, 4), (1, 2, 6), False, True), ((), (), True, True),
])
def test_layouts_are_told_apart(shape, strides, row_major, transposition):
    assert dlpack_strides.row_major(shape, strides) is row_major
    assert dlpack_strides.transposition(shape, strides) is transposition
