"""The global function registry, from Python and from C++."""

import pytest

import tensorplug

np = pytest.importorskip("numpy")


def test_cpp_function_registered_at_static_init(kernels):
    assert "examples.add_ints" in tensorplug.list_global_func_names()
    add_ints = tensorplug.get_global_func("examples.add_ints")
    assert add_ints(2, 40) == 42
    with pytest.raises(TypeError, match=r"argument 2 'b': expected an int, got str"):
        add_ints(1, "x")


def test_python_function_called_from_cpp(kernels):
    calls = []

    @tensorplug.register_global_func("tests.triple", override=True)
    def triple(v):
        calls.append(v)
        return v * 3

    try:
        f = tensorplug.get_global_func("tests.triple")
        assert kernels.apply(f, 5) == 15  # a registered Function passed into C++
        assert f(2) == 6  # and called from Python through the C ABI
        assert calls == [5, 2]
    finally:
        tensorplug.remove_global_func("tests.triple")
    assert "tests.triple" not in tensorplug.list_global_func_names()


def test_python_exception_crosses_cpp_unchanged(kernels):
    class Custom(Exception):
        pass

    def boom(v):
        raise Custom(f"bad value {v}")

    with pytest.raises(Custom, match="bad value 3"):
        kernels.apply(boom, 3)


def test_registry_errors():
    tensorplug.register_global_func("tests.once", lambda: 1)
    try:
        with pytest.raises(KeyError, match="already registered"):
            tensorplug.register_global_func("tests.once", lambda: 2)
        tensorplug.register_global_func("tests.once", lambda: 3, override=True)
        assert tensorplug.get_global_func("tests.once")() == 3
    finally:
        tensorplug.remove_global_func("tests.once")
    with pytest.raises(ValueError, match="global function 'tests.missing' is not registered"):
        tensorplug.get_global_func("tests.missing")
    assert tensorplug.get_global_func("tests.missing", allow_missing=True) is None
    with pytest.raises(TypeError, match="expected a callable, got int"):
        tensorplug.register_global_func("tests.bad", 5)


def test_tensor_views_passed_to_a_python_callback(tmp_path):
    from tensorplug import cpp

    mod = cpp.load_inline("callback_views", r"""
double call_with(tensorplug::Function f, tensorplug::TensorView x) { return f(x).cast<double>(); }
""", functions=["call_with"])
    x = np.arange(6, dtype=np.float32).reshape(2, 3)[:, ::2]  # a strided view

    def inspect_view(t):
        assert type(t) is tensorplug.Tensor  # valid for the duration of the callback
        assert (t.shape, t.strides, t.dtype) == ((2, 2), (3, 2), "float32")
        return float(np.from_dlpack(t).sum())

    assert mod.call_with(inspect_view, x) == float(x.sum())
