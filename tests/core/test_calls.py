"""Calling compiled kernels: scalars, strings, tuples, callables, keywords, argument errors.

How each framework's tensors go in and come back (zero copy, dtypes, layouts, allocation,
result types, kernel errors) is checked for every adapter by the conformance kit
(tests/kit/test_conformance.py)."""

import inspect

import pytest

import tensorplug

np = pytest.importorskip("numpy")






def test_scalars_and_keywords(kernels):
    x = np.arange(4, dtype=np.float64)
    y = np.zeros_like(x)
    kernels.scale(x, y, 2.5)
    np.testing.assert_array_equal(y, 2.5 * x)
    kernels.scale(x, y=y, alpha=-1)  # an int is accepted where a float is expected
    np.testing.assert_array_equal(y, -x)




def test_scalar_string_and_tuple_results(kernels):
    x = np.ones((2, 3), dtype=np.float32)
    assert kernels.numel(x) == 6
    assert kernels.sum(x) == 6.0
    assert kernels.describe(x) == "float32[2,3] cpu:0"
    first, second = kernels.split(np.arange(3, dtype=np.float32))
    assert type(first) is np.ndarray and type(second) is np.ndarray
    np.testing.assert_array_equal(first, [0, 1, 2])
    np.testing.assert_array_equal(second, [0, 2, 4])




def test_no_argument_call_and_tensorplug_results(kernels):
    assert kernels.noop() is None
    t = kernels.nd_alloc(4)  # no framework tensor among the arguments
    assert type(t) is tensorplug.Tensor
    assert t.shape == (4,) and t.dtype == "float32" and str(t.device) == "cpu:0"
    np.testing.assert_array_equal(np.from_dlpack(t), [0, 1, 2, 3])




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
    with pytest.raises(TypeError, match=r"^scale\(\) got an unexpected keyword argument 'beta'; its parameters are 'x', "
                                        r"'y', 'alpha'$"):
        kernels.scale(x, x, beta=1.0)
    with pytest.raises(TypeError, match=r"multiple values for argument 'x'"):
        kernels.scale(x, x, 1.0, x=x)




def test_unsupported_object_is_a_type_error(kernels):
    with pytest.raises(TypeError, match=r"^numel\(\) argument 1 'x': expected a tensor, got object$"):
        kernels.numel(object())


def test_inspect_signature_of_every_function(kernels):
    for name in kernels.functions:
        sig = inspect.signature(kernels[name])
        assert all(p.kind is inspect.Parameter.POSITIONAL_OR_KEYWORD for p in sig.parameters.values())
