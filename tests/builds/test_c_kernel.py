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


def test_c_kernel_declares_its_written_parameter(c_kernel):
    assert c_kernel.add_one.signature_text == "x:view;out:mview->int"
    out = np.zeros(5, dtype=np.float32)
    out.flags.writeable = False
    with pytest.raises(ValueError, match=r"^add_one\(\) argument 2 'out': expected a writable tensor \(the kernel "
                                         r"writes it\), got a read-only numpy array$"):
        c_kernel.add_one(np.arange(5, dtype=np.float32), out)
    assert out.tolist() == [0.0] * 5


def test_c_kernel_written_parameter_refuses_jax_arrays(c_kernel):
    jnp = pytest.importorskip("jax.numpy")
    with pytest.raises(ValueError, match=r"^add_one\(\) argument 2 'out': expected a writable tensor \(the kernel "
                                         r"writes it\), got a read-only jax array$"):
        c_kernel.add_one(np.arange(5, dtype=np.float32), jnp.zeros(5, dtype=jnp.float32))
