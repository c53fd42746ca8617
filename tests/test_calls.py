"""Calling compiled kernels with numpy and torch: values, types, argument errors."""

import inspect

import pytest

import tensorplug

np = pytest.importorskip("numpy")


def torch_or_skip():
    return pytest.importorskip("torch", reason="torch not installed")


def test_numpy_in_place_kernel(kernels):
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    out = np.zeros_like(x)
    assert kernels.add_one(x, out) is None
    np.testing.assert_array_equal(out, x + 1)


def test_torch_in_place_kernel(kernels):
    torch = torch_or_skip()
    x = torch.arange(6, dtype=torch.float64).reshape(2, 3)
    out = torch.zeros_like(x)
    kernels.add_one(x, out)
    assert torch.equal(out, x + 1)


def test_scalars_and_keywords(kernels):
    x = np.arange(4, dtype=np.float64)
    y = np.zeros_like(x)
    kernels.scale(x, y, 2.5)
    np.testing.assert_array_equal(y, 2.5 * x)
    kernels.scale(x, y=y, alpha=-1)  # an int is accepted where a float is expected
    np.testing.assert_array_equal(y, -x)


def test_allocating_kernel_returns_the_callers_type(kernels):
    a = np.arange(5, dtype=np.float32)
    r = kernels.add(a, a)
    assert type(r) is np.ndarray and r.flags.owndata
    np.testing.assert_array_equal(r, 2 * a)
    torch = torch_or_skip()
    t = torch.arange(5, dtype=torch.float32)
    r = kernels.add(t, t)
    assert type(r) is torch.Tensor
    assert torch.equal(r, 2 * t)


def test_scalar_string_and_tuple_results(kernels):
    x = np.ones((2, 3), dtype=np.float32)
    assert kernels.numel(x) == 6
    assert kernels.sum(x) == 6.0
    assert kernels.describe(x) == "float32[2,3] cpu:0"
    first, second = kernels.split(np.arange(3, dtype=np.float32))
    assert type(first) is np.ndarray and type(second) is np.ndarray
    np.testing.assert_array_equal(first, [0, 1, 2])
    np.testing.assert_array_equal(second, [0, 2, 4])


def test_owning_tensor_parameter_round_trips(kernels):
    x = np.arange(3, dtype=np.float32)
    y = kernels.identity(x)
    assert y is x  # the numpy table hands back the very array it exported
    torch = torch_or_skip()
    t = torch.arange(3)
    r = kernels.identity(t)
    assert type(r) is torch.Tensor and r.data_ptr() == t.data_ptr()


def test_no_argument_call_and_tensorplug_results(kernels):
    assert kernels.noop() is None
    t = kernels.nd_alloc(4)  # no framework tensor among the arguments
    assert type(t) is tensorplug.Tensor
    assert t.shape == (4,) and t.dtype == "float32" and str(t.device) == "cpu:0"
    np.testing.assert_array_equal(np.from_dlpack(t), [0, 1, 2, 3])


def test_strided_views(kernels):
    x = np.arange(12, dtype=np.float64).reshape(3, 4)[:, ::2]
    assert kernels.strided_sum(x) == x.sum()
    assert kernels.strided_sum(x[::-1]) == x.sum()  # negative strides


def test_python_callable_argument(kernels):
    assert kernels.apply(lambda v: v * 3, 7) == 21


def test_wrong_argument_kind_names_position_and_parameter(kernels):
    x = np.zeros(3, dtype=np.float32)
    with pytest.raises(TypeError, match=r"^scale\(\) argument 2 'y': expected a tensor, got str$"):
        kernels.scale(x, "y", 1.0)
    with pytest.raises(TypeError, match=r"^scale\(\) argument 3 'alpha': expected a float, got str$"):
        kernels.scale(x, x, "fast")
    with pytest.raises(TypeError, match=r"^apply\(\) argument 2 'x': expected an int, got float$"):
        kernels.apply(len, 1.5)


def test_wrong_arity(kernels):
    x = np.zeros(3, dtype=np.float32)
    with pytest.raises(TypeError, match=r"^scale\(\) takes 3 arguments \(x, y, alpha\), got 2$"):
        kernels.scale(x, x)
    with pytest.raises(TypeError, match=r"unexpected keyword argument 'beta'"):
        kernels.scale(x, x, beta=1.0)
    with pytest.raises(TypeError, match=r"multiple values for argument 'x'"):
        kernels.scale(x, x, 1.0, x=x)


def test_kernel_error_keeps_type_and_message(kernels):
    with pytest.raises(ValueError, match="^custom failure 42$"):
        kernels.fails("custom failure 42")
    a = np.zeros(3, dtype=np.float32)
    b = np.zeros(4, dtype=np.float32)
    with pytest.raises(ValueError, match="shape"):
        kernels.add_one(a, b)


def test_unsupported_object_is_a_type_error(kernels):
    with pytest.raises(TypeError, match=r"^numel\(\) argument 1 'x': expected a tensor, got object$"):
        kernels.numel(object())


def test_inspect_signature_of_every_function(kernels):
    for name in kernels.functions:
        sig = inspect.signature(kernels[name])
        assert all(p.kind is inspect.Parameter.POSITIONAL_OR_KEYWORD for p in sig.parameters.values())
