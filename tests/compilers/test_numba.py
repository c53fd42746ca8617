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
    ({"params": {"x": "float32[]"}}, lambda x: None, r"an array needs its dimensions \('float32\[:\]', 'float32\[:, :\]', or 'float32\[\.\.\.\]' for any number\)"),
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



# ----------------------------------------- undeclared writes are refused (issue 39 item 4) ----
def test_a_kernel_that_writes_an_undeclared_parameter_is_refused(tpn):
    # Every array not in writes= reaches the kernel read-only: Numba finds the write when it
    # compiles, and the declaration is refused naming the kernel and the parameter.
    def overwrite(a, b, out):
        for i in range(a.shape[0]):
            b[i] = 0
            out[i] = a[i]

    with pytest.raises(ValueError, match=r"^tensorplug.numba.kernel\('overwrite'\): the kernel writes parameter 'b', "
                                         r"not declared in 'writes' .*; add it to writes=$"):
        tpn.kernel({"a": "float32[:]", "b": "float32[:]", "out": "float32[:]"}, writes="out")(overwrite)
    # declared, the same kernel is accepted and writes
    accepted = tpn.kernel({"a": "float32[:]", "b": "float32[:]", "out": "float32[:]"}, writes=("b", "out"))(overwrite)
    b, out = np.ones(2, np.float32), np.zeros(2, np.float32)
    accepted(np.arange(2, dtype=np.float32), b, out)
    assert b.tolist() == [0, 0] and out.tolist() == [0, 1]


def test_read_only_numpy_and_jax_arrays_are_never_modified(tpn):
    @tpn.kernel({"x": "float32[:]"}, returns=tensorplug.like("x"))
    def copy(x, out):
        for i in range(x.shape[0]):
            out[i] = x[i]

    frozen = np.arange(3, dtype=np.float32)
    frozen.flags.writeable = False
    assert copy(frozen).tolist() == [0, 1, 2] and frozen.tolist() == [0, 1, 2]

    @tpn.kernel({"x": "float32[...]"}, returns=tensorplug.like("x"))
    def zero_input(x, out):
        for idx in np.ndindex(x.shape):
            x[idx] = 0
            out[idx] = 1

    # any rank: the entry is compiled at the first call, which is refused before the kernel runs
    for value in (frozen, np.ones(3, np.float32)):
        before = value.tolist()
        with pytest.raises(ValueError, match=r"^tensorplug.numba.kernel\('zero_input'\): the kernel writes parameter "
                                             r"'x', not declared in 'writes'"):
            zero_input(value)
        assert value.tolist() == before
    jnp = pytest.importorskip("jax.numpy", reason="jax not installed")
    array = jnp.arange(3, dtype=jnp.float32)
    with pytest.raises(ValueError, match=r"the kernel writes parameter 'x'"):
        zero_input(array)
    assert array.tolist() == [0, 1, 2]


# ----------------------------------------------- arrays of any rank (issue 39 item 5) ----
@pytest.fixture(scope="module")
def any_rank(tpn):
    @tpn.kernel({"x": "float32[...]", "y": "float32[...]", "alpha": "float64"}, returns=tensorplug.like("x"))
    def axpy_any(x, y, alpha, out):
        for idx in np.ndindex(x.shape):
            out[idx] = alpha * x[idx] + y[idx]

    @tpn.kernel({"x": "float32[...]", "out": "float32[...]"}, writes="out")
    def negate_into(x, out):
        for idx in np.ndindex(x.shape):
            out[idx] = -x[idx]

    return axpy_any, negate_into


def _ranked_owner(function_name):
    import gc

    from tensorplug.numba import _Ranked

    return next(o for o in gc.get_objects() if type(o) is _Ranked and o.fname == function_name)


def test_any_rank_from_numpy_contiguous_and_strided(any_rank):
    axpy_any, negate_into = any_rank
    for rank in range(5):
        shape = tuple(range(2, 2 + rank))
        x = np.arange(int(np.prod(shape)), dtype=np.float32).reshape(shape)
        y = np.full(shape, 0.5, np.float32)
        assert axpy_any(x, y, 2.0).shape == shape
        np.testing.assert_array_equal(axpy_any(x, y, 2.0), 2 * x + 0.5)
        out = np.zeros(shape, np.float32)
        negate_into(x, out)
        np.testing.assert_array_equal(out, -x)
        if rank >= 2:  # transposed, every other element, and a broadcast (stride 0) read
            xt = x.T
            np.testing.assert_array_equal(axpy_any(xt, np.broadcast_to(np.float32(1), xt.shape), -1.0), 1 - xt)
            sliced = x[..., ::2]
            out = np.zeros((*shape[:-1], 2 * sliced.shape[-1]), np.float32)[..., ::2]
            negate_into(sliced, out)
            np.testing.assert_array_equal(out, -sliced)
    # one entry per combination of the ranks of (x, y), compiled once: (r, r) for r = 0..4
    assert sorted(_ranked_owner("axpy_any").entries) == sorted(
        (((1 << 7) | r) << 7) | r for r in range(5))


def test_any_rank_from_torch_contiguous_and_strided(any_rank):
    torch = pytest.importorskip("torch", reason="torch not installed")
    axpy_any, negate_into = any_rank
    for rank in range(5):
        shape = tuple(range(2, 2 + rank))
        x = torch.arange(float(np.prod(shape)), dtype=torch.float32).reshape(shape)
        y = torch.ones(shape)
        got = axpy_any(x, y, 3.0)
        assert type(got) is torch.Tensor and got.shape == x.shape and torch.equal(got, 3 * x + 1)
        if rank >= 2:
            xp = x.permute(*reversed(range(rank)))[..., 1:]
            out = torch.zeros(xp.shape)
            negate_into(xp, out)
            assert torch.equal(out, -xp)
            assert torch.equal(axpy_any(xp, torch.zeros(()).expand(xp.shape), 1.0), xp)


def test_any_rank_errors_name_the_argument(any_rank):
    axpy_any, negate_into = any_rank
    x = np.zeros((2, 3), np.float32)
    with pytest.raises(TypeError, match=r"^axpy_any\(\) argument 2 'y': expected a tensor, got int$"):
        axpy_any(x, 1, 1.0)
    with pytest.raises(TypeError, match=r"^axpy_any\(\) argument 1 'x': expected a float32 tensor, got float64$"):
        axpy_any(x.astype(np.float64), x, 1.0)
    frozen = np.zeros((2, 3), np.float32)
    frozen.flags.writeable = False
    with pytest.raises(ValueError, match=r"^negate_into\(\) argument 2 'out': expected a writable tensor"):
        negate_into(x, frozen)


def test_any_rank_ops_in_jax_jit_and_torch_compile(any_rank):
    axpy_any, _ = any_rank
    op = tensorplug.op("test_numba::axpy_any", axpy_any, returns=tensorplug.like("x"))
    jax = pytest.importorskip("jax", reason="jax not installed")
    jnp = jax.numpy

    @jax.jit
    def step(x, y):
        return op(x, y, 2.0) + 1

    for shape in ((), (3,), (2, 2, 2)):
        x = jnp.ones(shape, jnp.float32)
        assert step(x, x).shape == shape and step(x, x).tolist() == np.full(shape, 4.0).tolist()
    torch = pytest.importorskip("torch", reason="torch not installed")
    compiled = torch.compile(lambda x: op(x, x, 0.5), backend="aot_eager", fullgraph=True)
    assert compiled(torch.ones(2, 1, 3)).tolist() == [[[1.5] * 3]] * 2


def test_any_rank_arrays_have_ranks_of_their_own(tpn):
    @tpn.kernel({"x": "float32[...]", "total": "float32[...]"}, writes="total")
    def sum_into(x, total):
        s = np.float32(0)
        for idx in np.ndindex(x.shape):
            s += x[idx]
        for idx in np.ndindex(total.shape):
            total[idx] = s

    total = np.zeros((), np.float32)
    sum_into(np.ones((2, 3, 4), np.float32), total)
    assert total == 24
    torch = pytest.importorskip("torch", reason="torch not installed")
    totals = torch.zeros(2, 2)
    sum_into(torch.tensor(5.0), totals)
    assert totals.tolist() == [[5, 5], [5, 5]]
    with pytest.raises(ValueError, match=r"^sum_into\(\) argument 2 'total': expected a writable tensor"):
        sum_into(np.ones(2, np.float32), np.broadcast_to(np.float32(0), (2,)))


def test_parameter_names_never_clash_with_the_entrys_own(tpn):
    # The entry once bound each argument to a local of the parameter's name: a parameter
    # named 'o' (or 'result', 'managed') was the output's DLTensor words, not the caller's array.
    @tpn.kernel({"x": "float32[:]", "o": "float32[:]", "result": "float64", "managed": "int64"}, writes="o",
                returns=tensorplug.like("x"))
    def clash(x, o, result, managed, out):
        for i in range(x.shape[0]):
            out[i] = x[i] + 1
            o[i] = x[i] * result + managed

    o = np.zeros(3, np.float32)
    got = clash(np.arange(3, dtype=np.float32), o, 2.0, 10)
    assert got.tolist() == [1, 2, 3] and o.tolist() == [10, 12, 14]
