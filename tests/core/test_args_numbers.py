"""Numbers from numpy and the frameworks for int/float/bool parameters (docs/calling.md, "Numbers")."""

from fractions import Fraction
from pathlib import Path

import pytest

import tensorplug

np = pytest.importorskip("numpy")


@pytest.fixture(scope="module")
def k():
    from tensorplug import cpp

    return tensorplug.load_module(cpp.build("args_kernels", [Path(__file__).parents[1] / "support" / "args_kernels.cc"]))


@pytest.mark.parametrize("value", [np.int8(-3), np.int16(-3), np.int32(-3), np.int64(-3), np.uint64(3)])
def test_numpy_integer_scalars_for_int(k, value):
    expected = int(value)
    result = k.echo_int(value)
    assert type(result) is int and result == expected


def test_numpy_reductions_for_int_and_float(k):
    a = np.arange(5)
    assert k.echo_int(a.sum()) == 10
    assert k.echo_int(a.shape[0]) == 5
    f = np.linspace(0.0, 1.0, 5, dtype=np.float32)
    out = k.echo_float(f.sum())
    assert type(out) is float and out == pytest.approx(2.5)
    assert k.echo_float(np.float16(0.5)) == 0.5
    assert k.echo_float(np.float64(1.25)) == 1.25
    assert k.echo_float(np.int64(7)) == 7.0  # an integer is a real number
    assert k.echo_float(Fraction(3, 4)) == 0.75


def test_numpy_bool_for_bool(k):
    assert k.echo_bool(np.True_) is True
    assert k.echo_bool(np.bool_(False)) is False
    assert k.echo_bool(np.array([1, 2]).any()) is True


def test_bools_are_not_numbers(k):
    with pytest.raises(TypeError, match=r"^echo_int\(\) argument 1 'n': expected an int, got bool$"):
        k.echo_int(True)
    with pytest.raises(TypeError, match=r"^echo_int\(\) argument 1 'n': expected an int, got numpy.bool$"):
        k.echo_int(np.True_)
    with pytest.raises(TypeError, match=r"^echo_float\(\) argument 1 'v': expected a float, got numpy.bool$"):
        k.echo_float(np.False_)
    with pytest.raises(TypeError, match=r"^echo_bool\(\) argument 1 'b': expected a bool, got int$"):
        k.echo_bool(1)
    with pytest.raises(TypeError, match=r"^echo_bool\(\) argument 1 'b': expected a bool, got numpy.int64$"):
        k.echo_bool(np.int64(1))


def test_floats_are_not_ints(k):
    with pytest.raises(TypeError, match=r"^echo_int\(\) argument 1 'n': expected an int, got numpy.float64$"):
        k.echo_int(np.float64(3.0))
    with pytest.raises(TypeError, match=r"^echo_int\(\) argument 1 'n': expected an int, got float$"):
        k.echo_int(3.0)
    with pytest.raises(TypeError, match=r"^echo_float\(\) argument 1 'v': expected a float, got numpy.complex128$"):
        k.echo_float(np.complex128(1 + 2j))
    with pytest.raises(TypeError, match=r"^echo_float\(\) argument 1 'v': expected a float, got str$"):
        k.echo_float("1.0")


def test_numpy_uint64_past_int64_overflows(k):
    with pytest.raises(OverflowError, match=r"^echo_int\(\) argument 1 'n': "):
        k.echo_int(np.uint64(2**63))


def test_zero_d_arrays_numpy(k):
    assert k.echo_int(np.array(4)) == 4
    assert k.echo_int(np.array(250, dtype=np.uint8)) == 250
    assert k.echo_float(np.array(1.5, dtype=np.float32)) == 1.5
    assert k.echo_float(np.array(3, dtype=np.int16)) == 3.0
    assert k.echo_bool(np.array(True)) is True
    with pytest.raises(TypeError, match=r"^echo_int\(\) argument 1 'n': expected an int, got a 1-d array "
                                        r"\(only 0-d arrays are read as scalars\)$"):
        k.echo_int(np.array([4]))
    with pytest.raises(TypeError, match=r"^echo_int\(\) argument 1 'n': expected an int, got a 0-d array of dtype float64$"):
        k.echo_int(np.array(4.0))
    with pytest.raises(TypeError, match=r"^echo_bool\(\) argument 1 'b': expected a bool, got a 0-d array of dtype int64$"):
        k.echo_bool(np.array(1))
    with pytest.raises(OverflowError, match=r"^echo_int\(\) argument 1 'n': value does not fit in int64$"):
        k.echo_int(np.array(2**63, dtype=np.uint64))


def test_zero_d_arrays_torch(k):
    torch = pytest.importorskip("torch")
    assert k.echo_int(torch.tensor(9)) == 9
    assert k.echo_int(torch.arange(5).sum()) == 10
    assert k.echo_float(torch.tensor(0.5, dtype=torch.bfloat16)) == 0.5
    assert k.echo_float(torch.tensor(0.25, dtype=torch.float16)) == 0.25
    assert k.echo_bool(torch.tensor(False)) is False
    with pytest.raises(TypeError, match=r"^echo_int\(\) argument 1 'n': expected an int, got a 2-d array "):
        k.echo_int(torch.ones(1, 1, dtype=torch.int64))
    with pytest.raises(TypeError, match=r"^echo_int\(\) argument 1 'n': expected an int, got bool$"):
        k.echo_int(True)


def test_zero_d_arrays_jax(k):
    jnp = pytest.importorskip("jax.numpy")
    assert k.echo_int(jnp.arange(4).sum()) == 6
    assert k.echo_float(jnp.float32(2.0) * 1.5) == 3.0


def test_optional_int_takes_numpy_and_none(k):
    assert k.opt_int(np.int32(5)) == 5
    assert k.opt_int(None) == -1


def test_untyped_functions_take_numpy_scalars():
    tensorplug.register_global_func("test_args.echo", lambda v: v, override=True)
    try:
        echo = tensorplug.get_global_func("test_args.echo")
        for value, expected in [(np.int64(3), 3), (np.float32(0.5), 0.5), (np.float64(2.5), 2.5), (np.True_, True)]:
            result = echo(value)
            assert type(result) is type(expected) and result == expected
    finally:
        tensorplug.remove_global_func("test_args.echo")
