"""tensorplug.op inside torch: the torch.library custom op made from a kernel's signature
and output rule, checked by torch's own tools (opcheck, dynamo's explain, functionalize,
export, gradcheck) and by results equal to eager.

Inductor compiles C++ with the system compiler (slow here): one inductor test compiles
one function that calls every kind of op.
"""

import re
import subprocess
import sys
import textwrap
import warnings

import pytest

torch = pytest.importorskip("torch")

import op_kernels  # noqa: E402  (tests/support/op_kernels.py)

import tensorplug  # noqa: E402
from tensorplug_adapters.torch import native as torch_native  # noqa: E402


@pytest.fixture(scope="module")
def ops(ops):
    """The shared ops (tests/conftest.py), with a hand-written backward for ``scale``."""
    _attach_backward(ops)
    return ops


_attached = []


def _attach_backward(ops):
    # Attached before any test traces scale: torch's compile caches do not see a backward
    # registered after a graph with the op was compiled. scale declares no backward (its
    # formula raises, tests/torch/test_grad_torch.py); a hand-written one replaces that formula
    # (torch warns that it overrides a kernel).
    if _attached:
        return
    _attached.append(True)

    def setup_context(ctx, inputs, output):
        _, alpha, bias = inputs
        ctx.alpha = alpha
        ctx.has_bias = bias is not None

    def backward(ctx, grad):
        return ops.scale(grad, ctx.alpha, None), None, grad if ctx.has_bias else None

    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", r"(?s).*Overriding a previously registered kernel", UserWarning)
        torch.library.register_autograd("tptest::scale", backward, setup_context=setup_context)


def _x(*shape, dtype=torch.float32):
    return torch.arange(int(torch.tensor(shape).prod()), dtype=dtype).reshape(shape) / 4 - 1


def test_schema_comes_from_the_exported_signature(ops):
    schemas = {name: str(getattr(torch.ops.tptest, name).default._schema)
               for name in ("axpy", "scale", "row_sum", "pad", "arange", "plus_and_twice")}
    assert schemas == {
        "axpy": "tptest::axpy(Tensor x, Tensor y, Tensor(a!) out, float alpha) -> ()",
        "scale": "tptest::scale(Tensor x, float alpha, Tensor? bias) -> Tensor",
        "row_sum": "tptest::row_sum(Tensor x) -> Tensor",
        "pad": "tptest::pad(Tensor x, SymInt before, SymInt after, float value) -> Tensor",
        "arange": "tptest::arange(SymInt n, ScalarType dtype, Device device) -> Tensor",
        "plus_and_twice": "tptest::plus_and_twice(Tensor x) -> (Tensor, Tensor)",
    }
    assert ops.axpy.written == ("out",)


def test_every_traceable_kind_has_a_schema_type():
    from tensorplug import ops as tp_ops
    from tensorplug_adapters.torch import registration

    assert set(registration._SCHEMA_TYPES) >= tp_ops.TENSOR_KINDS | tp_ops.SCALAR_KINDS | tp_ops.LIST_KINDS


def test_eager_calls_equal_the_kernel_function(ops):
    x, y = _x(2, 3), _x(2, 3) * 2
    out = torch.empty_like(x)
    assert ops.axpy(x, y, out, 3.0) is None
    torch.testing.assert_close(out, 3 * x + y)
    result = ops.scale(x, 2.0, None)
    assert type(result) is torch.Tensor
    torch.testing.assert_close(result, ops.module.scale(x, 2.0, None))
    torch.testing.assert_close(ops.scale(x, alpha=2.0, bias=y), 2 * x + y)  # keywords, as the function takes them
    torch.testing.assert_close(ops.row_sum(x), x.sum(1))
    torch.testing.assert_close(ops.pad(x[0], 1, 2, 9.0), torch.tensor([9.0, -1.0, -0.75, -0.5, 9.0, 9.0]))
    a = ops.arange(4, torch.float64, torch.device("cpu"))
    assert type(a) is torch.Tensor and a.dtype == torch.float64 and a.tolist() == [0, 1, 2, 3]
    plus, twice = ops.plus_and_twice(x)
    torch.testing.assert_close((plus, twice), (x + 1, 2 * x))


def test_kernel_errors_keep_their_kind_and_message(ops):
    # The native kernel reports through torch's dispatcher, which raises RuntimeError for
    # any error of a kernel outside libtorch; the kind leads the message (docs/decisions.md).
    x = _x(3)
    with pytest.raises(RuntimeError, match=r"^tptest::axpy\(\): ValueError: axpy: x, y and out must have one shape, "
                                           r"got \[3\], \[3\], \[4\] \(check failed"):
        ops.axpy(x, x, torch.empty(4), 1.0)
    compiled = torch.compile(lambda x, out: ops.axpy(x, x, out, 1.0), backend="aot_eager", fullgraph=True)
    with pytest.raises(RuntimeError, match=r"^tptest::axpy\(\): ValueError: axpy: x, y and out must have one shape"):
        compiled(x, torch.empty(4))


@pytest.mark.parametrize("name", ["axpy", "scale", "row_sum", "pad", "arange", "plus_and_twice"])
def test_opcheck(ops, name):
    x = _x(2, 3, dtype=torch.float64)
    args = {
        "axpy": (x, x * 2, torch.empty_like(x), 0.5),
        "scale": (x, 2.0, x + 1),
        "row_sum": (x,),
        "pad": (x[0], 2, 1, 0.25),
        "arange": (5, torch.float32, torch.device("cpu")),
        "plus_and_twice": (x,),
    }[name]
    torch.library.opcheck(getattr(torch.ops.tptest, name).default, args)


def _program(ops):
    def f(x, y):
        out = torch.empty_like(x)
        ops.axpy(x, y, out, 2.0)  # destination passing, written in place
        s = ops.scale(out, 0.5, y)  # allocating, optional tensor given
        plus, twice = ops.plus_and_twice(s)
        padded = ops.pad(ops.row_sum(plus + twice), 1, 1, 0.0)
        return padded + ops.arange(padded.shape[0], torch.float32, torch.device("cpu"))

    return f


@pytest.mark.parametrize("backend", ["eager", "aot_eager"])
def test_compile_fullgraph_has_no_graph_break_and_equals_eager(ops, backend):
    f = _program(ops)
    x, y = _x(3, 4), _x(3, 4) + 2
    torch._dynamo.reset()
    explained = torch._dynamo.explain(f)(x, y)
    assert explained.graph_break_count == 0 and explained.graph_count == 1
    targets = {str(node.target) for gm in explained.graphs for node in gm.graph.nodes if node.op == "call_function"}
    assert {"tptest.axpy.default", "tptest.scale.default", "tptest.plus_and_twice.default", "tptest.row_sum.default",
            "tptest.pad.default", "tptest.arange.default"} <= targets
    compiled = torch.compile(f, backend=backend, fullgraph=True)
    torch.testing.assert_close(compiled(x, y), f(x, y))
    x2, y2 = _x(5, 2), _x(5, 2) * 3  # other shapes: a recompile or a dynamic graph, same results
    torch.testing.assert_close(compiled(x2, y2), f(x2, y2))


def test_compile_dynamic_shapes_evaluate_the_rules_symbolically(ops):
    f = _program(ops)
    compiled = torch.compile(f, backend="aot_eager", fullgraph=True, dynamic=True)
    for rows in (2, 3, 7):
        x = _x(rows, 3)
        torch.testing.assert_close(compiled(x, x * 2), f(x, x * 2))


def test_compile_inductor(ops):
    f = _program(ops)
    x, y = _x(3, 4), _x(3, 4) - 1
    torch._dynamo.reset()
    compiled = torch.compile(f, backend="inductor", fullgraph=True)
    torch.testing.assert_close(compiled(x, y), f(x, y))


def test_functionalize(ops):
    def f(x):
        y = ops.scale(x, 2.0, None)
        y.add_(1)  # a mutation of the op's result, removed by functionalization
        return ops.row_sum(y.view(2, 2))

    x = _x(4)
    functional = torch.func.functionalize(f)
    torch.testing.assert_close(functional(x), f(x))
    code = torch.fx.experimental.proxy_tensor.make_fx(functional)(x).code
    # (.nograd: the overload below a native Autograd kernel, tests/torch/test_torch_native.py.)
    assert re.search(r"tptest\.scale\.(default|nograd)\(", code) and re.search(r"tptest\.row_sum\.(default|nograd)\(", code)
    assert "add_" not in code and "aten.add.Tensor" in code


def test_functionalize_of_a_written_argument_goes_through_auto_functionalized(ops):
    # Both functionalizations, torch.func.functionalize (C++) and the functional mode of
    # export and aot_autograd (Python), make the op auto_functionalized of its
    # functionalizable overload (more in tests/torch/test_op_functionalize.py).
    def f(x):
        out = torch.zeros_like(x)
        ops.axpy(x, x, out, 3.0)
        return out

    x = _x(4)
    gm = torch.export.export(_Wrap(f), (x,)).run_decompositions().graph_module
    assert "auto_functionalized(torch.ops.tptest.axpy.mutable" in gm.code
    torch.testing.assert_close(gm(x)[0], 4 * x)
    torch.testing.assert_close(torch.func.functionalize(f)(x), 4 * x)


class _Wrap(torch.nn.Module):
    def __init__(self, f):
        super().__init__()
        self.f = f

    def forward(self, x):
        return self.f(x)


class _Module(torch.nn.Module):
    def __init__(self, ops):
        super().__init__()
        self.ops = ops
        self.weight = torch.nn.Parameter(torch.full((4,), 0.5))

    def forward(self, x):
        out = torch.empty_like(x)
        self.ops.axpy(x, self.weight.detach().expand_as(x).contiguous(), out, 2.0)
        return self.ops.row_sum(self.ops.scale(out, 3.0, None))


@pytest.mark.parametrize("strict", [False, True])
def test_export(ops, strict):
    module = _Module(ops)
    x = _x(3, 4)
    exported = torch.export.export(module, (x,), strict=strict)
    targets = {str(node.target) for node in exported.graph.nodes if node.op == "call_function"}
    assert {"tptest.scale.default", "tptest.row_sum.default"} <= targets
    assert any("axpy" in t for t in targets)  # as itself or inside auto_functionalized
    torch.testing.assert_close(exported.module()(x), module(x))


def test_register_autograd_and_gradcheck(ops):
    # the backward: _attach_backward, with torch.library.register_autograd
    x = _x(2, 3, dtype=torch.float64).requires_grad_()
    bias = torch.ones(2, 3, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(lambda x, b: ops.scale(x, 1.5, b), (x, bias))
    y = ops.scale(x, 1.5, bias)
    assert y.requires_grad
    (gx,) = torch.autograd.grad(y.sum(), x)
    torch.testing.assert_close(gx, torch.full_like(x, 1.5))
    # and through torch.compile's autograd
    compiled = torch.compile(lambda x: ops.scale(x, -2.0, None).sum(), backend="aot_eager", fullgraph=True)
    x.grad = None
    compiled(x).backward()
    torch.testing.assert_close(x.grad, torch.full_like(x, -2.0))


def test_missing_rule_is_refused_naming_the_op_and_what_to_declare(ops):
    with pytest.raises(ValueError) as info:
        tensorplug.op("tptest::scale_without_rule", ops.module.scale)
    assert str(info.value) == (
        "tensorplug.op('tptest::scale_without_rule'): scale returns tensors it allocates, whose shapes a compiler "
        "must know before the kernel runs: declare them with returns=tensorplug.like('x'), "
        "returns=tensorplug.Output(shape=..., dtype=...) (a tuple of them for several) or a shape function "
        "(docs/compilers.md)")
    assert not hasattr(torch.ops.tptest, "scale_without_rule")


def test_shape_rule_errors_stop_the_trace_naming_the_op(ops):
    bad = tensorplug.op("tptest::scale_bad_rule", ops.module.scale, returns=lambda x, alpha, bias: (x.shape, x.dtype))
    x = _x(3)
    message = ("tptest::scale_bad_rule: output rule: shape function '<lambda>' returned ((3,), 'float32'): "
               "expected a tensorplug.TensorSpec")
    for fullgraph in (True, False):  # an error, never a silent graph break
        torch._dynamo.reset()
        compiled = torch.compile(lambda x: bad(x, 1.0, None) + 1, backend="aot_eager", fullgraph=fullgraph)
        with pytest.raises(torch._dynamo.exc.TorchRuntimeError) as info:
            compiled(x)
        assert message in str(info.value).replace("\\'", "'")


@pytest.fixture(scope="module")
def liars(ops):
    """Ops whose output rules differ from what their kernel returns: scale's float32 result
    declared float64, row_sum's (rows,) result declared (columns,)."""
    return {
        "dtype": tensorplug.op("tptest::scale_declared_float64", ops.module.scale,
                               returns=tensorplug.like("x", dtype="float64")),
        "shape": tensorplug.op("tptest::row_sum_declared_by_columns", ops.module.row_sum,
                               returns=tensorplug.Output(shape=("x.shape[1]",), dtype="x")),
    }


_LIES = {
    "dtype": ("tptest::scale_declared_float64", "float32[2, 3]", "float64[2, 3]"),
    "shape": ("tptest::row_sum_declared_by_columns", "float32[2]", "float32[3]"),
}


@pytest.fixture(scope="module")
def python_rule_liars(ops):
    """The same lies told by Python shape functions: such ops keep torch's Python kernel
    (torch_native.reason), which checks results in Python (registration._checked)."""
    return {
        "dtype": tensorplug.op("tptest::scale_shaped_float64", ops.module.scale,
                               returns=lambda x, alpha, bias: tensorplug.TensorSpec(tuple(x.shape), "float64")),
        "shape": tensorplug.op("tptest::row_sum_shaped_by_columns", ops.module.row_sum,
                               returns=lambda x: tensorplug.TensorSpec((x.shape[1],), x.dtype)),
    }


def _lying_call(op, lie, backend):
    # The lying op called eagerly, or from a compiled graph that uses its result.
    args = (_x(2, 3), 2.0, None) if lie == "dtype" else (_x(2, 3),)
    if backend == "eager op":
        return op, args
    torch._dynamo.reset()
    return torch.compile(lambda *args: op(*args) + 1, backend=backend, fullgraph=True), args


@pytest.mark.parametrize("lie", sorted(_LIES))
@pytest.mark.parametrize("backend", ["eager op", "aot_eager", "inductor"])
def test_the_python_kernel_refuses_a_result_that_differs_from_its_shape_function(python_rule_liars, lie, backend):
    op = python_rule_liars[lie]
    assert torch_native.reason(op).startswith("its output rule '<lambda>' is a Python shape function")
    _, returned, declared = _LIES[lie]
    call, args = _lying_call(op, lie, backend)
    with pytest.raises(ValueError) as info:
        call(*args)
    assert str(info.value) == (f"op '{op.name}' returned {returned} as result 0, but its shape rule declares "
                               f"{declared}")


@pytest.mark.parametrize("lie", sorted(_LIES))
@pytest.mark.parametrize("backend", ["eager op", "aot_eager", "inductor"])
def test_result_that_differs_from_the_output_rule_is_refused_naming_the_op(liars, lie, backend):
    # A compiled graph plans with the rule's tensors: a float32 result read as float64, or a
    # (2,) one as (3,), would be a wrong value or a read past the buffer. Checked as the XLA
    # handler checks (tests/jax/test_op_jax.py), in its words.
    name, returned, declared = _LIES[lie]
    op = liars[lie]
    call, args = _lying_call(op, lie, backend)
    # These ops' rules compile to torch's native kernel (tensorplug_adapters.torch.native),
    # which raises through torch's C++ boundary: RuntimeError, the message as the XLA
    # handler's with the device (docs/decisions.md, "torch's native kernel").
    with pytest.raises(RuntimeError) as info:
        call(*args)
    assert str(info.value).startswith(f"op '{name}' returned {returned} on cpu:0 as result 0, but its output rule "
                                      f"declares {declared} on cpu:0")


def test_results_are_checked_in_number_and_device(ops):
    op = ops.plus_and_twice
    spec = tensorplug.TensorSpec((2,), "float32", tensorplug.Device("cpu", 0))
    with pytest.raises(ValueError, match=r"^op 'tptest::plus_and_twice' returned 1 tensor\(s\), but its shape rule "
                                         r"declares 2$"):
        op.check_results((spec,), (spec, spec))
    with pytest.raises(ValueError, match=r"^op 'tptest::plus_and_twice' returned a non-tensor value where its shape "
                                         r"rule declares result 1$"):
        op.check_results((spec, None), (spec, spec))
    with pytest.raises(ValueError, match=r"^op 'tptest::plus_and_twice' returned result 0 on cpu:0, but its shape "
                                         r"rule declares cuda:1$"):
        op.check_results((spec,), (spec._replace(device=tensorplug.Device("cuda", 1)),))
    assert op.check_results((spec, spec), (spec, spec)) is None


def test_op_declared_before_torch_is_imported_works_in_compiled_code_first():
    # A kernel library declares its ops at import, before the user imports torch; the
    # first call is inside torch.compile (dynamo cannot run the adapter hooks).
    code = textwrap.dedent("""
        import sys
        sys.path.insert(0, %r)
        import op_kernels
        ops = op_kernels.ops()
        assert "torch" not in sys.modules
        import torch
        def f(x):
            out = torch.empty_like(x)
            ops.axpy(x, x, out, 1.0)
            return ops.scale(out, 2.0, None)
        x = torch.arange(3.0)
        print(torch.compile(f, backend="eager", fullgraph=True)(x).tolist())
        from tensorplug_adapters import after_import
        print(after_import.watched(), any(type(f).__name__ == "_AfterImportFinder" for f in sys.meta_path))
    """ % str(op_kernels.SOURCE.parent))
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.split("\n")
    assert lines[0] == "[0.0, 4.0, 8.0]"
    # torch is no longer watched; the finder stays only while another framework is (paddle's
    # adapter resolves its types after `import paddle`, when paddle is installed).
    watched, finder = lines[1].rsplit(" ", 1)
    assert "torch" not in watched and finder == str(watched != "()"), lines[1]


CUDA = pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device")


@CUDA
def test_cuda_graphs_reduce_overhead(gpu_ops):
    # The op launches its work (cuMemsetD32Async) on the stream it sees: inside CUDA graph
    # capture that must be the capture stream, or capture fails; replays give the value.
    def f(x):
        out = torch.empty_like(x)
        gpu_ops.fill(out, 2.5)
        return out + x

    compiled = torch.compile(f, mode="reduce-overhead", fullgraph=True)
    for step in range(4):  # warm-up, capture, replays
        x = torch.full((1024,), float(step), device="cuda")
        torch.testing.assert_close(compiled(x), x + 2.5)
    assert gpu_ops.module.last_stream() != 0  # captured on a side stream, not the legacy default


@CUDA
def test_compiled_op_sees_the_current_stream(gpu_ops):
    def f(x):
        out = torch.empty_like(x)
        gpu_ops.fill(out, 1.0)
        return out * x

    compiled = torch.compile(f, backend="inductor", fullgraph=True)
    stream = torch.cuda.Stream()
    x = torch.full((256,), 3.0, device="cuda")
    with torch.cuda.stream(stream):
        result = compiled(x)
        assert gpu_ops.module.last_stream() == stream.cuda_stream
    stream.synchronize()
    torch.testing.assert_close(result, torch.full_like(x, 3.0))


@pytest.fixture(scope="module")
def gpu_ops():
    return op_kernels.gpu_ops()
