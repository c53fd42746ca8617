"""Numbers from numpy and the frameworks for int/float/bool parameters (docs/calling.md, "Numbers")."""

from fractions import Fraction

import pytest

import tensorplug

np = pytest.importorskip("numpy")


@pytest.mark.parametrize("value", [np.int8(-3), np.int16(-3), np.int32(-3), np.int64(-3), np.uint64(3)])
def test_numpy_integer_scalars_for_int(args_kernels, value):
    expected = int(value)
    result = args_kernels.echo_int(value)
    assert type(result) is int and result == expected


def test_numpy_reductions_for_int_and_float(args_kernels):
    a = np.arange(5)
    assert args_kernels.echo_int(a.sum()) == 10
    assert args_kernels.echo_int(a.shape[0]) == 5
    f = np.linspace(0.0, 1.0, 5, dtype=np.float32)
    out = args_kernels.echo_float(f.sum())
    assert type(out) is float and out == pytest.approx(2.5)
    assert args_kernels.echo_float(np.float16(0.5)) == 0.5
    assert args_kernels.echo_float(np.float64(1.25)) == 1.25
    assert args_kernels.echo_float(np.int64(7)) == 7.0  # an integer is a real number
    assert args_kernels.echo_float(Fraction(3, 4)) == 0.75


def test_numpy_bool_for_bool(args_kernels):
    assert args_kernels.echo_bool(np.True_) is True
    assert args_kernels.echo_bool(np.bool_(False)) is False
    assert args_kernels.echo_bool(np.array([1, 2]).any()) is True


def test_bools_are_not_numbers(args_kernels):
    with pytest.raises(TypeError, match=r"^echo_int\(\) argument 1 'n': expected an int, got bool$"):
        args_kernels.echo_int(True)
    with pytest.raises(TypeError, match=r"^echo_int\(\) argument 1 'n': expected an int, got numpy.bool$"):
        args_kernels.echo_int(np.True_)
    with pytest.raises(TypeError, match=r"^echo_float\(\) argument 1 'v': expected a float, got numpy.bool$"):
        args_kernels.echo_float(np.False_)
    with pytest.raises(TypeError, match=r"^echo_bool\(\) argument 1 'b': expected a bool, got int$"):
        args_kernels.echo_bool(1)
    with pytest.raises(TypeError, match=r"^echo_bool\(\) argument 1 'b': expected a bool, got numpy.int64$"):
        args_kernels.echo_bool(np.int64(1))


def test_floats_are_not_ints(args_kernels):
    with pytest.raises(TypeError, match=r"^echo_int\(\) argument 1 'n': expected an int, got numpy.float64$"):
        args_kernels.echo_int(np.float64(3.0))
    with pytest.raises(TypeError, match=r"^echo_int\(\) argument 1 'n': expected an int, got float$"):
        args_kernels.echo_int(3.0)
    with pytest.raises(TypeError, match=r"^echo_float\(\) argument 1 'v': expected a float, got numpy.complex128$"):
        args_kernels.echo_float(np.complex128(1 + 2j))
    with pytest.raises(TypeError, match=r"^echo_float\(\) argument 1 'v': expected a float, got str$"):
        args_kernels.echo_float("1.0")


def test_numpy_uint64_past_int64_overflows(args_kernels):
    with pytest.raises(OverflowError, match=r"^echo_int\(\) argument 1 'n': "):
        args_kernels.echo_int(np.uint64(2**63))


def test_zero_d_arrays_numpy(args_kernels):
    assert args_kernels.echo_int(np.array(4)) == 4
    assert args_kernels.echo_int(np.array(250, dtype=np.uint8)) == 250
    assert args_kernels.echo_float(np.array(1.5, dtype=np.float32)) == 1.5
    assert args_kernels.echo_float(np.array(3, dtype=np.int16)) == 3.0
    assert args_kernels.echo_bool(np.array(True)) is True
    with pytest.raises(TypeError, match=r"^echo_int\(\) argument 1 'n': expected an int, got a 1-d array "
                                        r"\(only 0-d arrays are read as scalars\)$"):
        args_kernels.echo_int(np.array([4]))
    with pytest.raises(TypeError, match=r"^echo_int\(\) argument 1 'n': expected an int, got a 0-d array of dtype float64$"):
        args_kernels.echo_int(np.array(4.0))
    with pytest.raises(TypeError, match=r"^echo_bool\(\) argument 1 'b': expected a bool, got a 0-d array of dtype int64$"):
        args_kernels.echo_bool(np.array(1))
    with pytest.raises(OverflowError, match=r"^echo_int\(\) argument 1 'n': value does not fit in int64$"):
        args_kernels.echo_int(np.array(2**63, dtype=np.uint64))


def test_zero_d_arrays_torch(args_kernels):
    torch = pytest.importorskip("torch")
    assert args_kernels.echo_int(torch.tensor(9)) == 9
    assert args_kernels.echo_int(torch.arange(5).sum()) == 10
    assert args_kernels.echo_float(torch.tensor(0.5, dtype=torch.bfloat16)) == 0.5
    assert args_kernels.echo_float(torch.tensor(0.25, dtype=torch.float16)) == 0.25
    assert args_kernels.echo_bool(torch.tensor(False)) is False
    with pytest.raises(TypeError, match=r"^echo_int\(\) argument 1 'n': expected an int, got a 2-d array "):
        args_kernels.echo_int(torch.ones(1, 1, dtype=torch.int64))
    with pytest.raises(TypeError, match=r"^echo_int\(\) argument 1 'n': expected an int, got bool$"):
        args_kernels.echo_int(True)


def test_zero_d_arrays_jax(args_kernels):
    jnp = pytest.importorskip("jax.numpy")
    assert args_kernels.echo_int(jnp.arange(4).sum()) == 6
    assert args_kernels.echo_float(jnp.float32(2.0) * 1.5) == 3.0


def test_optional_int_takes_numpy_and_none(args_kernels):
    assert args_kernels.opt_int(np.int32(5)) == 5
    assert args_kernels.opt_int(None) == -1


def test_untyped_functions_take_numpy_scalars():
    tensorplug.register_global_func("test_args.echo", lambda v: v, override=True)
    try:
        echo = tensorplug.get_global_func("test_args.echo")
        for value, expected in [(np.int64(3), 3), (np.float32(0.5), 0.5), (np.float64(2.5), 2.5), (np.True_, True)]:
            result = echo(value)
            assert type(result) is type(expected) and result == expected
    finally:
        tensorplug.remove_global_func("test_args.echo")
