"""Bad input gets a clear Python exception naming the argument; nothing crashes."""

import re

import pytest

import tensorplug

np = pytest.importorskip("numpy")


@pytest.mark.parametrize("array, dtype_text", [
    (np.array([object()], dtype=object), "dtype('O')"),
    (np.zeros(2, dtype=[("a", "i4")]), "dtype([('a', '<i4')])"),
    (np.arange(3, dtype=">f4"), "dtype('>f4')"),
    (np.zeros(3, dtype="M8[s]"), "dtype('<M8[s]')"),
], ids=["object", "structured", "big-endian", "datetime"])
def test_numpy_dtypes_without_dlpack_equivalent(kernels, array, dtype_text):
    with pytest.raises(BufferError, match=rf"^numel\(\) argument 1 'x': numpy dtype {re.escape(dtype_text)} "
                                          "has no DLPack equivalent$"):
        kernels.numel(array)


def test_many_dimensions(kernels):
    assert kernels.numel(np.zeros((1,) * 32)) == 1


def test_object_whose_dlpack_returns_junk(kernels):
    class Liar:
        def __dlpack__(self, **kwargs):
            return 5

        def __dlpack_device__(self):
            return (1, 0)

    with pytest.raises(TypeError, match=r"^numel\(\) argument 1 'x': __dlpack__\(\) returned int, expected a DLPack capsule$"):
        kernels.numel(Liar())


def test_consumed_capsule():
    capsule = np.ones(3).__dlpack__()
    assert tensorplug.from_dlpack(capsule).shape == (3,)
    with pytest.raises(ValueError, match="a DLPack capsule can be consumed only once"):
        tensorplug.from_dlpack(capsule)


def test_tensor_cannot_be_constructed_directly():
    with pytest.raises(TypeError, match="cannot be created directly"):
        tensorplug.Tensor()


def test_callback_errors(kernels):
    with pytest.raises(OverflowError, match=r"^apply\(\) argument 2 'x': int too big to convert$"):
        kernels.apply(lambda v: v, 2**70)
    with pytest.raises(TypeError, match=r"^apply\(\) argument 1 'f': a Python callback returned object, which has no "
                                        r"tensorplug value kind$"):
        kernels.apply(lambda v: object(), 3)
    with pytest.raises(TypeError, match="takes 0 positional arguments but 1 was given"):
        kernels.apply(lambda: 1, 3)


def test_too_many_arguments(kernels):
    with pytest.raises(TypeError, match=r"^noop\(\) takes 0 arguments \(\), got 100$"):
        kernels.noop(*range(100))




def test_torch_tensors_without_data(kernels):
    torch = pytest.importorskip("torch", reason="torch not installed")
    with pytest.raises(RuntimeError, match=r"^numel\(\) argument 1 'x': Cannot pack tensors on meta$"):
        kernels.numel(torch.empty(3, device="meta"))  # torch's backtrace is cut off
    with pytest.raises(RuntimeError, match=r"^numel\(\) argument 1 'x': Cannot access data pointer"):
        kernels.numel(torch.eye(3).to_sparse())


def test_torch_conjugate_view_is_refused(kernels):
    torch = pytest.importorskip("torch", reason="torch not installed")
    z = torch.tensor([1 + 2j, 3 - 1j], dtype=torch.complex64)
    with pytest.raises(ValueError, match=r"^numel\(\) argument 1 'x': expected a tensor whose memory holds its values .*, got a torch "
                                         r"conjugate view \(x.is_conj\(\)\); call .resolve_conj\(\) first$"):
        kernels.numel(z.conj())
    assert kernels.numel(z.conj().resolve_conj()) == 2


def test_torch_requires_grad_passes_data(kernels):
    torch = pytest.importorskip("torch", reason="torch not installed")
    x = torch.ones(3, requires_grad=True)
    assert kernels.sum(x) == 3.0
    y = kernels.add(x, x)
    assert type(y) is torch.Tensor and not y.requires_grad and y.tolist() == [2.0, 2.0, 2.0]


def test_jax_values_that_have_no_data(kernels):
    jax = pytest.importorskip("jax", reason="jax not installed")
    with pytest.raises(TypeError, match=r"numel\(\) argument 1 'x': a traced jax value \(\w+\) has no data.*jax.jit"):
        jax.jit(lambda v: kernels.numel(v))(jax.numpy.ones(3))
    deleted = jax.numpy.ones(3)
    deleted.delete()
    with pytest.raises(jax.errors.JaxRuntimeError, match=r"^numel\(\) argument 1 'x': INVALID_ARGUMENT: .* called on "
                                                         r"deleted or donated buffer$"):
        kernels.numel(deleted)


@pytest.mark.parametrize("name, expected", [
    ("complex64", "complex64"), ("complex128", "complex128"), ("float32x4", "float32x4"),
    ("torch.bfloat16", "bfloat16"), ("int8", "int8"),
])
def test_dtype_names(name, expected):
    assert tensorplug._core.empty((2,), name).dtype == expected


@pytest.mark.parametrize("name", ["comple", "float32x", "float32x99999999", "tensor"])
def test_bad_dtype_names(name):
    with pytest.raises(TypeError, match=rf"empty\(\) argument 'dtype': expected a dtype: bool, int8/16/32/64, "
                                        rf"uint8/16/32/64, float16/32/64, bfloat16, complex64/128, .*, got '{name}'"):
        tensorplug._core.empty((2,), name)
