"""A kernel written in plain C11 against c_api.h only."""

import pytest

np = pytest.importorskip("numpy")


def test_c_kernel_computes(c_kernel):
    x = np.arange(5, dtype=np.float32)
    out = np.zeros_like(x)
    assert c_kernel.add_one(x, out) == 0
    np.testing.assert_array_equal(out, x + 1)




def test_c_kernel_reports_errors_through_the_error_api(c_kernel):
    x = np.arange(5, dtype=np.float32)
    with pytest.raises(ValueError, match="shape"):
        c_kernel.add_one(x, np.zeros(4, dtype=np.float32))
    with pytest.raises(TypeError, match="float32"):
        c_kernel.add_one(x.astype(np.float64), np.zeros(5))


def test_c_kernel_signature_checks_before_the_call(c_kernel):
    x = np.arange(5, dtype=np.float32)
    with pytest.raises(TypeError, match=r"^add_one\(\) takes 2 arguments \(x, out\), got 1$"):
        c_kernel.add_one(x)
