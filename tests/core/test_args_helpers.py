"""Public C++ helpers of kernel libraries: GetDataSize and TENSORPLUG_CHECK_EQ/NE/LT/LE/GT/GE."""


import pytest


np = pytest.importorskip("numpy")


def test_get_data_size(args_kernels):
    assert args_kernels.data_size(np.zeros((3, 4), np.float32)) == 48
    assert args_kernels.data_size(np.zeros(5, np.float64)) == 40
    assert args_kernels.data_size(np.zeros(7, np.bool_)) == 7
    assert args_kernels.data_size(np.zeros((0, 3), np.int16)) == 0
    assert args_kernels.data_size(np.zeros((), np.complex128)) == 16


def test_check_ops_pass(args_kernels):
    assert args_kernels.check_ops(2, 2, "eq") == 4
    assert args_kernels.check_ops(1, 2, "ne") == 3
    assert args_kernels.check_ops(1, 2, "lt") == 3
    assert args_kernels.check_ops(3, 2, "le") == 5
    assert args_kernels.check_ops(3, 2, "gt") == 5
    assert args_kernels.check_ops(4, 2, "ge") == 6


@pytest.mark.parametrize("a, b, op, kind, message", [
    (2, 3, "eq", ValueError, "a must equal b (check failed: a == b (2 vs. 3))"),
    (4, 4, "ne", ValueError, "check failed: a != b (4 vs. 4)"),
    (5, 5, "lt", IndexError, "index out of range (check failed: a < b (5 vs. 5))"),
    (9, 2, "le", ValueError, "check failed: a + 1 <= b * 2 (10 vs. 4)"),
    (1, 2, "gt", TypeError, "check failed: a > b (1 vs. 2)"),
    (3, 2, "ge", ValueError, "check failed: double(a) / 2 >= double(b) (1.5 vs. 2)"),
])
def test_check_ops_fail_with_both_values(args_kernels, a, b, op, kind, message):
    with pytest.raises(kind) as info:
        args_kernels.check_ops(a, b, op)
    assert str(info.value) == message
