"""Numba kernels through tensorplug.numba: a real Numba @cfunc entry on the packed C ABI,
called with numpy, torch, jax and paddle tensors and as an op inside torch.compile and jax.jit."""

import pytest

np = pytest.importorskip("numpy")
pytest.importorskip("numba", reason="numba not installed (pip install '.[test]')")

import tensorplug  # noqa: E402
from tensorplug import _core  # noqa: E402


@pytest.fixture(scope="module")
def tpn():
    import tensorplug.numba

    return tensorplug.numba


@pytest.fixture(scope="module")
def add_one(tpn):
    @tpn.kernel({"x": "float32[:]", "out": "float32[:]"}, writes="out")
    def add_one(x, out):
        for i in range(x.shape[0]):
            out[i] = x[i] + 1

    return add_one


@pytest.fixture(scope="module")
def scale(tpn):
    @tpn.kernel({"x": "float64[:, :]", "alpha": "float64"}, returns=tensorplug.like("x"))
    def scale(x, alpha, out):
        for i in range(x.shape[0]):
            for j in range(x.shape[1]):
                out[i, j] = alpha * x[i, j]

    return scale


@pytest.fixture(scope="module")
def ops(add_one, tpn):
    @tpn.kernel({"x": "float32[:]", "alpha": "float64"}, returns=tensorplug.like("x"))
    def scale1(x, alpha, out):
        for i in range(x.shape[0]):
            out[i] = alpha * x[i]

    return (tensorplug.op("test_numba::add_one", add_one),
            tensorplug.op("test_numba::scale1", scale1, returns=tensorplug.like("x")))


def test_a_kernel_is_a_function_with_a_signature(add_one, scale):
    assert isinstance(add_one, tensorplug.Function)
    assert add_one.signature_text == "x:view;out:mview->void"
    assert scale.signature_text == "x:view;alpha:float->tensor"
    assert add_one.__name__ == "add_one"


def test_destination_passing_writes_the_callers_array(add_one):
    x = np.arange(6, dtype=np.float32)
    out = np.zeros(6, np.float32)
    assert add_one(x, out) is None
    assert out.tolist() == [1, 2, 3, 4, 5, 6]


def test_strided_inputs_and_outputs_are_read_and_written_in_place(add_one, scale):
    x = np.arange(6, dtype=np.float32)
    out = np.zeros(3, np.float32)
    add_one(x[::-2], out)
    assert out.tolist() == [6, 4, 2]
    wide = np.zeros(6, np.float32)
    add_one(x[:3], wide[1::2])  # a strided output
    assert wide.tolist() == [0, 1, 0, 2, 0, 3]
    a = np.arange(6.0).reshape(2, 3)
    assert scale(a.T, 2.0).tolist() == (2 * a.T).tolist()
    assert scale(a[:, ::2], 1.0).tolist() == [[0, 2], [3, 5]]


def test_empty_and_broadcast_tensors(scale):
    assert scale(np.zeros((0, 3)), 2.0).shape == (0, 3)
    row = np.broadcast_to(np.arange(3.0), (2, 3))  # stride 0
    assert scale(row, 2.0).tolist() == [[0, 2, 4], [0, 2, 4]]


def test_outputs_come_from_each_callers_framework(scale):
    torch = pytest.importorskip("torch", reason="torch not installed")
    paddle = pytest.importorskip("paddle", reason="paddle not installed")
    a = np.arange(6.0).reshape(2, 3)
    results = {
        "numpy": scale(a, 3.0),
        "torch": scale(torch.from_numpy(a), 3.0),
        "torch strided": scale(torch.from_numpy(a).t(), 3.0),
        "paddle": scale(paddle.to_tensor(a), 3.0),
    }
    assert type(results["numpy"]) is np.ndarray
    assert isinstance(results["torch"], torch.Tensor) and results["torch"].tolist() == (3 * a).tolist()
    assert results["torch strided"].tolist() == (3 * a.T).tolist()
    assert isinstance(results["paddle"], paddle.Tensor) and results["paddle"].numpy().tolist() == (3 * a).tolist()


def test_jax_arrays(ops):
    jnp = pytest.importorskip("jax.numpy", reason="jax not installed")
    _, scale1 = ops
    y = scale1.function(jnp.arange(4, dtype=jnp.float32), 2.0)
    assert type(y).__module__.startswith("jax") and y.tolist() == [0, 2, 4, 6]


def test_bad_arguments_raise_with_the_argument_named(add_one, scale):
    x = np.arange(6, dtype=np.float32)
    out = np.zeros(6, np.float32)
    with pytest.raises(TypeError, match=r"^add_one\(\) argument 1 'x': expected a float32 tensor, got float64$"):
        add_one(x.astype(np.float64), out)
    with pytest.raises(ValueError, match=r"^add_one\(\) argument 1 'x': expected a tensor of 1 dimension, got 2$"):
        add_one(x.reshape(2, 3), out)
    with pytest.raises(TypeError, match=r"^scale\(\) argument 1 'x': expected a float64 tensor, got int32$"):
        scale(np.zeros((2, 2), np.int32), 1.0)
    with pytest.raises(TypeError, match=r"^add_one\(\) takes 2 arguments \(x, out\), got 1$"):
        add_one(x)
    read_only = np.zeros(6, np.float32)
    read_only.flags.writeable = False
    with pytest.raises(ValueError, match=r"^add_one\(\) argument 2 'out': expected a writable tensor"):
        add_one(x, read_only)
    assert read_only.tolist() == [0] * 6
    assert _core.bound_allocator() == 0  # the call's allocator was unbound on every error


def test_the_entry_itself_checks_what_a_c_caller_passes(add_one):
    # Through the global registry the call is a C call (TPFunctionCall) with no signature
    # check in front of the entry: the entry's own checks answer.
    tensorplug.register_global_func("test_numba.add_one", add_one, override=True)
    try:
        relay = tensorplug.get_global_func("test_numba.add_one")
        x = np.arange(3, dtype=np.float32)
        out = np.zeros(3, np.float32)
        relay(x, out)
        assert out.tolist() == [1, 2, 3]
    finally:
        tensorplug.remove_global_func("test_numba.add_one")


def test_an_exception_in_the_kernel_is_a_runtime_error(tpn):
    @tpn.kernel({"n": "int64"})
    def divide(n):
        if 10 // n == 3:
            pass

    divide(2)
    with pytest.raises(RuntimeError, match=r"^divide\(\): the Numba kernel raised an exception"):
        divide(0)


def test_the_function_keeps_the_compiled_code_alive(tpn):
    import gc

    @tpn.kernel({"x": "float32[:]"}, returns=tensorplug.like("x", dtype="float64"))
    def widen(x, out):
        for i in range(x.shape[0]):
            out[i] = x[i]

    tensorplug.register_global_func("test_numba.widen", widen, override=True)
    del widen
    gc.collect()
    try:
        y = tensorplug.get_global_func("test_numba.widen")(np.arange(3, dtype=np.float32))
        assert y.dtype == np.float64 and y.tolist() == [0, 1, 2]
    finally:
        tensorplug.remove_global_func("test_numba.widen")


def test_an_op_inside_torch_compile(ops):
    torch = pytest.importorskip("torch", reason="torch not installed")
    add_one, scale1 = ops

    def step(x):
        out = torch.empty_like(x)
        add_one(x, out)
        return scale1(out, 0.5) + 1

    t = torch.arange(4, dtype=torch.float32)
    compiled = torch.compile(step, backend="aot_eager", fullgraph=True)
    assert compiled(t).tolist() == [1.5, 2.0, 2.5, 3.0]
    assert torch._dynamo.explain(step)(t).graph_break_count == 0


def test_an_op_inside_jax_jit(ops):
    jax = pytest.importorskip("jax", reason="jax not installed")
    jnp = jax.numpy
    add_one, scale1 = ops

    @jax.jit
    def step(x):
        return scale1(add_one(x, jnp.zeros_like(x)), 0.5) + 1

    assert step(jnp.arange(4, dtype=jnp.float32)).tolist() == [1.5, 2.0, 2.5, 3.0]
    with pytest.raises(jax.errors.JaxRuntimeError, match=r"expected a float32 tensor, got int32"):
        step(jnp.arange(4, dtype=jnp.int32)).block_until_ready()


@pytest.mark.parametrize("kwargs, fn, message", [
    ({"params": {"x": "float32[:"}}, lambda x: None, r"parameter 'x': expected a Numba type such as 'float32\[:\]'"),
    ({"params": {"x": "float16[:]"}}, lambda x: None, r"arrays of float16 are not supported"),
    ({"params": {"x": "str"}}, lambda x: None, r"expected an array type \('str\[:\]'\) or a scalar"),
    ({"params": {"x": "int32"}}, lambda x: None, r"or a scalar of int64, float64, float32, bool, got 'int32'"),
    ({"params": {"x": "float32[]"}}, lambda x: None, r"an array needs at least one dimension \('float32\[:\]'\)"),
    ({"params": {"x": "float32[:]"}, "writes": "y"}, lambda x: None, r"'writes': 'y' is not a parameter"),
    ({"params": {"x": "float32[:]"}}, lambda y: None, r"the function's parameters \(y\) do not match 'params' \(x\)"),
    ({"params": {"x": "float32[:]"}, "returns": tensorplug.like("x")}, lambda x: None,
     r"do not match 'params' \(x, <output>\); an allocating kernel takes its output last"),
    ({"params": {"x": "float32[:]", "n": "int64"}, "returns": tensorplug.Output(shape=("n",), dtype="x")},
     lambda x, n, out: None, r"'returns': expected tensorplug.like\(<array parameter>\)"),
])
def test_declarations_that_do_not_fit_are_refused(tpn, kwargs, fn, message):
    params = kwargs.pop("params")
    with pytest.raises(ValueError, match=message):
        tpn.kernel(params, **kwargs)(fn)

