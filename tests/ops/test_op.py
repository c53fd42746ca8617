"""tensorplug.op without a compiler: eager calls, output rules, declaration errors, and the
two adapter hooks (tensorplug_op_declared, tensorplug_op_impl) as a third party uses them.
Each framework's compiler is tested in tests/<framework>/test_op_<framework>.py."""

import functools
import gc
import inspect
import subprocess
import sys
import weakref

import pytest

import tensorplug
from tensorplug import Device, Output, TensorSpec, like

np = pytest.importorskip("numpy")

import op_kernels  # noqa: E402  (tests/support/op_kernels.py)


def test_eager_numpy_calls_are_the_function_calls(ops):
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    out = np.empty_like(x)
    assert ops.axpy(x, x, out, 2.0) is None
    np.testing.assert_array_equal(out, 3 * x)
    assert type(ops.scale(x, 2.0, None)) is np.ndarray
    np.testing.assert_array_equal(ops.scale(x, alpha=2.0, bias=x), 3 * x)
    np.testing.assert_array_equal(ops.row_sum(x), x.sum(1))
    plus, twice = ops.plus_and_twice(x)
    np.testing.assert_array_equal(plus, x + 1)
    with pytest.raises(ValueError, match=r"^axpy: x, y and out must have one shape"):
        ops.axpy(x, x, out[0], 1.0)
    with pytest.raises(TypeError, match=r"^scale\(\) argument 2 'alpha': expected a float, got str$"):
        ops.scale(x, "2", None)
    # nothing of numpy's claims the op: the kernel function runs
    assert ops.scale._impls[np.ndarray] is None


def test_op_attributes(ops):
    op = ops.axpy
    assert (op.name, op.namespace, op.opname) == ("tptest::axpy", "tptest", "axpy")
    assert op.function is ops.module.axpy
    assert op.result == "void" and op.n_outputs == 0 and op.written == ("out",)
    assert [(p.name, p.kind, p.optional, p.written) for p in ops.scale.params] == [
        ("x", "view", False, False), ("alpha", "float", False, False), ("bias", "view", True, False)]
    assert str(inspect.signature(ops.scale)) == str(inspect.signature(ops.module.scale))
    assert ops.plus_and_twice.n_outputs == 2
    assert tensorplug.get_op("tptest::axpy") is op and tensorplug.get_op("tptest::nope") is None


def test_every_signature_kind_is_classified():
    from tensorplug import _core, ops

    params, results = set(_core.VOCABULARY["param_kinds"]), set(_core.VOCABULARY["result_kinds"])
    classified = ops.TENSOR_KINDS | ops.SCALAR_KINDS | ops.LIST_KINDS | ops.UNTRACEABLE_KINDS
    assert classified == params
    assert ops.RESULT_KINDS <= results and ops.WRITTEN_KINDS <= ops.TENSOR_KINDS


def _spec(*shape, dtype="float32", device=("cpu", 0)):
    return TensorSpec(shape, dtype, Device(*device))


def test_output_rules_evaluate_from_specs(ops):
    x = _spec(4, 5, dtype="float64")
    assert ops.scale.output_specs({"x": x, "alpha": 1.0, "bias": None}) == (x,)
    assert ops.row_sum.output_specs({"x": x}) == (_spec(4, dtype="float64"),)
    assert ops.pad.output_specs({"x": _spec(3), "before": 2, "after": 4, "value": 0.0}) == (_spec(9),)
    assert ops.arange.output_specs({"n": 7, "dtype": "float64", "device": "cpu"}) == (_spec(7, dtype="float64"),)
    assert ops.axpy.output_specs({"x": x, "y": x, "out": x, "alpha": 1.0}) == ()


def test_declarative_expressions(ops):
    mod = ops.module
    conv = tensorplug.op("tptest_rules::conv_like", mod.pad, returns=Output(
        shape=("(x.shape[-1] + 2 * before - after) // 2 + 1", 3, "before % 3"), dtype="float16", device="cuda:1"))
    (spec,) = conv.output_specs({"x": _spec(2, 11), "before": 4, "after": 3, "value": 0.0})
    assert spec == TensorSpec((9, 3, 1), "float16", Device("cuda", 1))
    # the primary device: the first tensor on a device other than the CPU
    on_gpu = tensorplug.op("tptest_rules::scale_like", mod.scale, returns=Output(shape="bias", dtype="x"))
    (spec,) = on_gpu.output_specs({"x": _spec(2), "alpha": 1.0, "bias": _spec(3, device=("cuda", 2))})
    assert spec == TensorSpec((3,), "float32", Device("cuda", 2))


def test_negative_shape_indices_count_from_the_last_dimension(ops):
    mod = ops.module
    last = tensorplug.op("tptest_rules::last_dims", mod.pad,
                         returns=Output(shape=("x.shape[-1]", "x.shape[-2]", "x.shape[-3]", "x.shape[1]"), dtype="x"))
    (spec,) = last.output_specs({"x": _spec(2, 5, 11), "before": 0, "after": 0, "value": 0.0})
    assert spec.shape == (11, 5, 2, 5)


def test_a_rule_giving_a_negative_dimension_is_an_error_naming_the_op(ops):
    mod = ops.module
    short = tensorplug.op("tptest_rules::negative", mod.pad, returns=Output(shape=("x.shape[0] - before",), dtype="x"))
    with pytest.raises(ValueError) as info:
        short.output_specs({"x": _spec(2, 3), "before": 5, "after": 0, "value": 0.0})
    assert str(info.value) == ("tptest_rules::negative: output rule: result 0 has shape (-3,), with a negative "
                               "dimension (arguments: x.shape=(2, 3), before=5, after=0, value=0.0)")
    assert short.output_specs({"x": _spec(5, 3), "before": 5, "after": 0, "value": 0.0}) == (_spec(0),)


def test_unary_minus_and_the_default_device_without_tensor_arguments(ops):
    mod = ops.module
    negated = tensorplug.op("tptest_rules::negated", mod.pad, returns=Output(shape=("-before + 10", "-(-after)"),
                                                                          dtype="x"))
    (spec,) = negated.output_specs({"x": _spec(2), "before": 4, "after": 3, "value": 0.0})
    assert spec.shape == (6, 3)
    # No tensor argument and no device in the rule: the CPU, device 0.
    on_cpu = tensorplug.op("tptest_rules::arange_default_device", mod.arange,
                           returns=Output(shape=("n",), dtype="dtype"))
    assert on_cpu.output_specs({"n": 7, "dtype": "float64", "device": "cuda:1"}) == (_spec(7, dtype="float64"),)


def test_like_with_a_dtype_keeps_shape_and_device_and_takes_the_dtype(ops):
    mod = ops.module
    x = _spec(4, 5, dtype="float64", device=("cuda", 1))
    for dtype in ("float16", np.int32):
        half = tensorplug.op(f"tptest_rules::scale_as_{tensorplug.shapes.dtype_name(dtype)}", mod.scale,
                             returns=like("x", dtype=dtype))
        assert half.output_specs({"x": x, "alpha": 1.0, "bias": None}) == (
            TensorSpec((4, 5), tensorplug.shapes.dtype_name(dtype), Device("cuda", 1)),)
    assert like("x", dtype="float16").dtype == "float16" and like("x").dtype == "x"


@pytest.mark.parametrize("returns, message", [
    (like("y"), "returns shape: 'y' is not a tensor parameter (tensor parameters: x)"),
    (Output(shape=("x.shape[0]", "value + 1"), dtype="x"),
     "returns shape[1]: 'value' in 'value + 1' is not an integer parameter"),
    (Output(shape=("before ** 2",), dtype="x"),
     "returns shape[0]: 'before ** 2': only integers, integer parameters, x.shape[i], sizes[i], xs[i].shape[j], "
     "len(xs), + - * // % and parentheses are allowed (use a shape function for the rest)"),
    (Output(shape=("x.shape[before]",), dtype="x"), "returns shape[0]: 'x.shape[before]': a shape index must be an "
     "integer literal"),
    (Output(shape=("before",), dtype="float33"), "returns dtype: 'float33' is neither a parameter nor a dtype name "
     "such as 'float32'"),
    (Output(shape=("before",), dtype="before"), "returns dtype: parameter 'before' is a int, not a tensor or a dtype"),
    (Output(shape=("before",), dtype="x", device="tpu"), "returns device: 'tpu' is neither a parameter nor a device"),
    (Output(shape=("before",), dtype="x", device="value"),
     "returns device: parameter 'value' is a float, not a tensor or a device"),
    (Output(shape=("x.shape[",), dtype="x"), "returns shape[0]: 'x.shape[' is not an expression"),
    (Output(shape=("x.size[0]",), dtype="x"),
     "returns shape[0]: 'x.size[0]': only integers, integer parameters, x.shape[i], sizes[i], xs[i].shape[j], "
     "len(xs), + - * // % and parentheses are allowed (use a shape function for the rest)"),
    ("x", "returns: expected a tensorplug.Output, tensorplug.like(...) or a shape function (a tuple of them, one "
          "per output, for a kernel returning several tensors), got 'x'"),
])
def test_rules_that_do_not_fit_the_signature_are_refused(ops, returns, message):
    kernel = tensorplug.load_module(ops.module.path).pad  # x:view;before:int;after:int;value:float->tensor
    assert kernel.signature_text == "x:view;before:int;after:int;value:float->tensor"
    with pytest.raises(ValueError) as info:
        tensorplug.op("tptest_rules::bad", kernel, returns=returns)
    assert str(info.value) == f"tensorplug.op('tptest_rules::bad'): {message}"


def test_declaration_errors(ops):
    mod = ops.module
    with pytest.raises(ValueError, match=r"^tensorplug.op\(\) argument 'name': expected 'namespace::name' "
                                         r"\(identifiers\), got 'axpy'$"):
        tensorplug.op("axpy", mod.axpy)
    with pytest.raises(TypeError, match=r"^tensorplug.op\('a::b'\) argument 'function': expected a tensorplug "
                                        r"Function \(a kernel library's function\), got function$"):
        tensorplug.op("a::b", lambda x: x)
    with pytest.raises(ValueError, match=r"^tensorplug.op: an op named 'tptest::axpy' is already declared \(for "
                                         r"function 'axpy'\); op names are process-wide$"):
        tensorplug.op("tptest::axpy", mod.axpy, writes="out")
    with pytest.raises(ValueError, match=r"^tensorplug.op\('tptest_rules::w'\) argument 'writes': \('alpha',\) does "
                                         r"not match the parameters axpy declares written \(kind mview\): \('out',\); "
                                         r"leave writes= out, the signature says it$"):
        tensorplug.op("tptest_rules::w", mod.axpy, writes=("alpha",))
    with pytest.raises(ValueError, match=r"^tensorplug.op\('tptest_rules::v'\): axpy returns nothing \(destination "
                                         r"passing\): it needs no 'returns' rule$"):
        tensorplug.op("tptest_rules::v", mod.axpy, returns=like("x"))
    with pytest.raises(ValueError, match=r"^tensorplug.op\('tptest_rules::t'\): plus_and_twice returns a tuple of "
                                         r"tensors: declare 'returns' as a tuple of rules, one per tensor$"):
        tensorplug.op("tptest_rules::t", mod.plus_and_twice, returns=like("x"))
    with pytest.raises(ValueError, match=r"^tensorplug.op\('tptest_rules::s'\): scale returns one tensor, 'returns' "
                                         r"declares 2$"):
        tensorplug.op("tptest_rules::s", mod.scale, returns=(like("x"), like("x")))
    assert tensorplug.get_op("tptest_rules::s") is None  # a refused op is not declared


def test_kinds_no_compiler_can_trace_are_refused(kernels):
    # examples/kernels: apply(f: func, v: int) -> int, describe(x) -> str
    with pytest.raises(ValueError, match=r"^tensorplug.op\('tptest_rules::apply'\): parameter 'f' is a func; "
                                         r"operators take tensors, lists of tensors \(views\), int, float, bool, str, "
                                         r"device, dtype and int list \(ints\) arguments only$"):
        tensorplug.op("tptest_rules::apply", kernels.apply)
    with pytest.raises(ValueError, match=r"^tensorplug.op\('tptest_rules::describe'\): describe returns a str; "
                                         r"operators return tensors \(tensor, std::tuple of tensors\) or nothing "
                                         r"\(destination passing\)$"):
        tensorplug.op("tptest_rules::describe", kernels.describe)


class _Box:
    """A one-tensor framework of a third party's own, whose 'compiler' records ops."""

    def __init__(self, data):
        self.data = data

    def __dlpack__(self, **kwargs):
        return self.data.__dlpack__(**kwargs)

    def __dlpack_device__(self):
        return self.data.__dlpack_device__()


class _BoxAdapter:
    def __init__(self):
        self.declared = []
        self.asked = []
        self.table = tensorplug.ExchangeTable.from_python(
            "box", from_dlpack=lambda t: _Box(np.from_dlpack(t)),
            allocate=lambda shape, dtype, device: _Box(np.empty(shape, dtype)))

    @tensorplug.hookimpl
    def tensorplug_adapter_info(self):
        return tensorplug.AdapterInfo(name="box", framework="numpy", tensor_types=("_Box",),
                                      capabilities=("exchange",), fast_path=False)

    @tensorplug.hookimpl
    def tensorplug_exchange_table(self, tensor_type):
        return self.table if tensor_type is _Box else None

    @tensorplug.hookimpl
    def tensorplug_op_declared(self, op):
        self.declared.append(op.name)

    @tensorplug.hookimpl
    def tensorplug_op_impl(self, op, arg_type):
        self.asked.append((op.name, arg_type.__name__))
        if arg_type is not _Box:
            return None

        def traced(*args, **kwargs):  # what a compiler would record; here: run and tag
            return ("box-op", op.name, op.function(*args, **kwargs))

        return traced


def test_adapter_hooks_declare_and_dispatch(ops):
    adapter = _BoxAdapter()
    tensorplug.register_adapter(adapter)
    try:
        # registered later: told of every op already declared
        assert "tptest::scale" in adapter.declared and "tptest::axpy" in adapter.declared
        x = np.arange(3, dtype=np.float32)
        tag, name, result = ops.scale(_Box(x), 2.0, None)
        assert (tag, name) == ("box-op", "tptest::scale") and type(result) is _Box
        np.testing.assert_array_equal(result.data, 2 * x)
        asked = len(adapter.asked)
        ops.scale(_Box(x), 2.0, None)
        assert len(adapter.asked) == asked  # cached per type
        np.testing.assert_array_equal(ops.scale(x, 2.0, None), 2 * x)  # numpy: the function
        late = tensorplug.op("tptest_rules::late_scale", ops.module.scale, returns=like("x"))
        assert adapter.declared[-1] == "tptest_rules::late_scale"
        assert late(_Box(x), 1.0, None)[0] == "box-op"
    finally:
        tensorplug.unregister_adapter(adapter)
    # without the adapter: the kernel function, through the generic DLPack adapter
    assert type(ops.scale(_Box(x), 2.0, None)) is tensorplug.Tensor
    assert ops.scale._impls[_Box] is None


def test_declaring_an_op_imports_no_framework():
    code = ("import sys, tensorplug\n"
            "sys.path.insert(0, %r)\n"
            "import op_kernels\n"
            "op_kernels.ops()\n"
            "print(sorted(m for m in ('numpy', 'torch', 'jax', 'paddle', 'cupy') if m in sys.modules))\n"
            % str(op_kernels.SOURCE.parent))
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"


class _Tag:
    """A tensor type of its own, claimed by _ChoiceAdapter."""


class _ChoiceAdapter:
    """Claims ops for _Tag arguments with a callable that reports the call it got."""

    def __init__(self):
        self.asked = []

    @tensorplug.hookimpl
    def tensorplug_adapter_info(self):
        return tensorplug.AdapterInfo(name="choice", framework="numpy", tensor_types=("_Tag",),
                                      capabilities=(), fast_path=False)

    @tensorplug.hookimpl
    def tensorplug_op_impl(self, op, arg_type):
        self.asked.append((op.name, arg_type.__name__, arg_type))
        return (lambda *args, **kwargs: ("chosen", args, kwargs)) if arg_type is _Tag else None


class _List(list):
    """Not a list to the op: only exact lists and tuples stand for their first item."""


def test_a_plain_call_chooses_as_the_call_tracers_read(ops):
    # A plain call runs _core.OpCall's loop in C; Op.__call__, which torch.compile inlines,
    # is the same loop in Python. Each way an argument can decide, through both:
    adapter = _ChoiceAdapter()
    tensorplug.register_adapter(adapter)
    try:
        op = tensorplug.op("tpchoice::scale", ops.module.scale, returns=like("x"))
        x, tag = np.arange(3, dtype=np.float32), _Tag()
        chosen = [
            ((tag, 2.0, None), {}),  # the first argument
            ((x,), {"alpha": 2.0, "bias": tag}),  # numpy and float decide nothing; a keyword does
            (([tag], 2.0, None), {}),  # a list stands for its first item
            (((), tag, None), {}),  # an empty tuple is skipped
        ]
        for args, kwargs in chosen:
            assert op(*args, **kwargs) == ("chosen", args, kwargs)
            assert tensorplug.Op.__call__(op, *args, **kwargs) == ("chosen", args, kwargs)
        # Nothing decides: the kernel function, with its own errors.
        np.testing.assert_array_equal(op(x, 2.0, None), 2 * x)
        np.testing.assert_array_equal(tensorplug.Op.__call__(op, x, alpha=2.0, bias=None), 2 * x)
        for call in (op, functools.partial(tensorplug.Op.__call__, op)):
            with pytest.raises(TypeError, match=r"^scale\(\) argument 1 'x': expected a tensor"):
                call([x, tag], 2.0, None)  # the list's first item (numpy) decides nothing
            with pytest.raises(TypeError, match=r"^scale\(\) argument 1 'x': expected a tensor"):
                call(_List([tag]), 2.0, None)
        # Each type was asked of the adapters once (Python's scalars when the op was declared), then cached.
        # (By type: torch's and paddle's tensor types, both asked ahead, are both named Tensor.)
        asked = [t for name, t, _ in adapter.asked if name == op.name]
        types = [t for name, _, t in adapter.asked if name == op.name]
        assert len(types) == len(set(types)) and {"_Tag", "ndarray", "_List", "float"} <= set(asked)
        assert "list" not in asked and "tuple" not in asked  # their items were asked
    finally:
        tensorplug.unregister_adapter(adapter)


def test_an_op_refuses_a_call_before_its_init_and_collects_its_cycles(ops):
    bare = tensorplug.Op.__new__(tensorplug.Op)
    with pytest.raises(TypeError, match=r"^Op object called before its __init__ set '_impls' \(a dict\) and "
                                        r"'function'$"):
        bare(np.ones(2), 1.0, None)
    # The collector sees what the C part holds: a cycle through it is freed.
    op = ops.scale
    assert any(r is op._impls for r in gc.get_referents(op)) and any(r is op.function for r in gc.get_referents(op))

    class Held(tensorplug._core.OpCall):
        pass

    held = Held()
    held._impls, held.function = {_Tag: held}, ops.module.scale
    ref = weakref.ref(held)
    del held
    gc.collect()
    assert ref() is None


def test_a_subclass_keeps_the_c_call_unless_it_defines_its_own(ops):
    class Plain(tensorplug.Op):
        pass

    class Own(tensorplug.Op):
        def __call__(self, *args, **kwargs):
            return "its own"

    x = np.arange(3, dtype=np.float32)
    plain = Plain("tpsub::scale", ops.module.scale, returns=like("x"))
    np.testing.assert_array_equal(plain(x, 2.0, None), 2 * x)
    assert Own("tpown::scale", ops.module.scale, returns=like("x"))(x, 2.0, None) == "its own"
