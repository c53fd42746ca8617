"""Functionalization of tensorplug ops that write arguments (destination passing).

torch functionalizes a mutable custom op itself only in its Python functional mode
(``auto_functionalized``); its C++ functionalization, behind ``torch.func.functionalize``,
needs a Functionalize kernel, and an op with one is no longer auto-functionalized. The
torch adapter gives the op both: a Functionalize kernel that calls ``auto_functionalized``
on the op's ``functionalizable`` overload (plugins/tensorplug_adapters/torch_compile.py).
These tests check each functionalization, and the compilers that run one, against eager.
"""

import pytest

torch = pytest.importorskip("torch")

import op_kernels  # noqa: E402  (tests/op_kernels.py)

from torch.fx.experimental.proxy_tensor import make_fx  # noqa: E402


@pytest.fixture(scope="module")
def ops():
    return op_kernels.ops()


def _x(*shape):
    return torch.arange(int(torch.tensor(shape).prod()), dtype=torch.float32).reshape(shape) / 4 - 1


def _writes_its_input(ops):
    def f(x, out):
        ops.axpy(x, x * 2, out, 3.0)  # writes the caller's tensor
        return out.sum()

    return f


def _writes_a_view(ops):
    def f(x):
        out = torch.zeros(2, x.shape[0])
        ops.axpy(x, x, out[1], 2.0)  # writes row 1 of a fresh tensor
        return out

    return f


def _mutating_calls(gm):
    # Every call of an operator that writes one of its arguments, but copy_ (the write-back
    # into a graph input that functionalization leaves at the end).
    return [str(node.target) for node in gm.graph.nodes
            if node.op == "call_function" and isinstance(node.target, torch._ops.OpOverload)
            and node.target._schema.is_mutable and node.target is not torch.ops.aten.copy_.default]


def test_only_ops_that_write_have_a_functionalizable_overload(ops):
    axpy = torch.ops.tptest.axpy
    assert sorted(axpy.overloads()) == ["default", "functionalizable"]
    assert str(axpy.functionalizable._schema) == \
        "tptest::axpy.functionalizable(Tensor x, Tensor y, Tensor(a!) out, float alpha) -> ()"
    assert torch._C._dispatch_has_kernel_for_dispatch_key("tptest::axpy", "Functionalize")
    assert not torch._C._dispatch_has_kernel_for_dispatch_key("tptest::axpy.functionalizable", "Functionalize")
    for name in ("scale", "row_sum", "pad", "arange", "plus_and_twice"):
        assert getattr(torch.ops.tptest, name).overloads() == ["default"]
        assert not torch._C._dispatch_has_kernel_for_dispatch_key(f"tptest::{name}", "Functionalize")
    x = _x(3)
    out = torch.zeros(3)
    assert axpy.functionalizable(x, x, out, 2.0) is None  # the same kernel
    torch.testing.assert_close(out, 3 * x)
    torch.library.opcheck(axpy.functionalizable, (x.double(), x.double(), torch.zeros(3, dtype=torch.float64), 0.5))


def test_functionalize_equals_eager_and_writes_the_input_back(ops):
    f = _writes_its_input(ops)
    x = _x(2, 3)
    out_eager, out_functional = torch.zeros(2, 3), torch.zeros(2, 3)
    expected = f(x, out_eager)
    for remove in ("mutations", "mutations_and_views"):
        out_functional.zero_()
        result = torch.func.functionalize(f, remove=remove)(x, out_functional)
        torch.testing.assert_close(result, expected)
        torch.testing.assert_close(out_functional, out_eager)  # the input mutation, applied at the end
    torch.testing.assert_close(out_eager, 5 * x)


def test_make_fx_of_functionalize_calls_the_op_on_a_copy_only(ops):
    f = _writes_its_input(ops)
    x = _x(4)
    gm = make_fx(torch.func.functionalize(f, remove="mutations_and_views"))(x, torch.zeros(4))
    assert _mutating_calls(gm) == []
    calls = [node for node in gm.graph.nodes if node.op == "call_function"]
    af = next(node for node in calls if node.target is torch.ops.higher_order.auto_functionalized)
    assert af.args == (torch.ops.tptest.axpy.functionalizable,)
    assert af.kwargs["alpha"] == 3.0 and af.kwargs["out"].op == "placeholder"
    # the new value of out is auto_functionalized's result 1, copied into the input once, last
    copies = [node for node in calls if node.target is torch.ops.aten.copy_.default]
    assert len(copies) == 1 and copies[0].args[0].op == "placeholder" and copies[0].args[1].args == (af, 1)
    out = torch.zeros(4)
    torch.testing.assert_close(gm(x, out), f(x, torch.zeros(4)))
    torch.testing.assert_close(out, 5 * x)


def test_functionalize_of_a_written_view_scatters_into_its_base(ops):
    f = _writes_a_view(ops)
    x = _x(4)
    expected = f(x)
    torch.testing.assert_close(expected[1], 3 * x)
    torch.testing.assert_close(torch.func.functionalize(f)(x), expected)
    gm = make_fx(torch.func.functionalize(f, remove="mutations_and_views"))(x)
    assert _mutating_calls(gm) == []
    assert "auto_functionalized(torch.ops.tptest.axpy.functionalizable" in gm.code and "select_scatter" in gm.code
    torch.testing.assert_close(gm(x), expected)


def test_functionalize_of_a_program_of_ops(ops):
    def f(x, y):
        out = torch.empty_like(x)
        ops.axpy(x, y, out, 2.0)
        s = ops.scale(out, 0.5, y)
        plus, twice = ops.plus_and_twice(s)
        out.add_(1)  # an aten mutation of the written tensor, after the op
        return ops.row_sum(plus + twice + out)

    x, y = _x(3, 4), _x(3, 4) + 2
    torch.testing.assert_close(torch.func.functionalize(f)(x, y), f(x, y))
    gm = make_fx(torch.func.functionalize(f))(x, y)
    assert _mutating_calls(gm) == [] and "aten.add_" not in gm.code
    torch.testing.assert_close(gm(x, y), f(x, y))


@pytest.mark.parametrize("backend", ["aot_eager", "inductor"])
def test_compile_writes_the_callers_tensor(ops, backend):
    # aot_autograd's functional mode reaches the op's Functionalize kernel; the graph it
    # compiles is functional, and the write into the caller's tensor equals eager.
    f = _writes_its_input(ops)
    x = _x(3, 4)
    out_eager, out_compiled = torch.zeros(3, 4), torch.zeros(3, 4)
    torch._dynamo.reset()
    compiled = torch.compile(f, backend=backend, fullgraph=True)
    torch.testing.assert_close(compiled(x, out_compiled), f(x, out_eager))
    torch.testing.assert_close(out_compiled, out_eager)
    if backend == "aot_eager":
        g = _writes_a_view(ops)
        torch.testing.assert_close(torch.compile(g, backend=backend, fullgraph=True)(x[0]), g(x[0]))


class _WritesItsBuffer(torch.nn.Module):
    def __init__(self, ops):
        super().__init__()
        self.ops = ops
        self.register_buffer("state", torch.zeros(4))

    def forward(self, x):
        self.ops.axpy(x, self.state, self.state, 0.5)  # state = x / 2 + state, in place
        return self.state * 2


def test_export_functionalizes_a_written_buffer(ops):
    x = _x(4)
    exported = torch.export.export(_WritesItsBuffer(ops), (x,))
    decomposed = exported.run_decompositions()
    gm = decomposed.graph_module
    assert _mutating_calls(gm) == []
    assert "auto_functionalized(torch.ops.tptest.axpy.functionalizable" in gm.code
    assert list(decomposed.graph_signature.buffers_to_mutate.values()) == ["state"]
    module, reference = decomposed.module(), _WritesItsBuffer(ops)
    for _ in range(2):  # the buffer's write carries over between calls
        torch.testing.assert_close(module(x), reference(x))
    torch.testing.assert_close(module.state, x)


def test_functionalize_under_vmap_is_refused_as_for_every_mutable_custom_op(ops):
    # torch 2.13 has no batching rule for ops that write (its vmap fallback refuses them):
    # a clear error, not a wrong result.
    f = _writes_a_view(ops)
    with pytest.raises(RuntimeError, match="Batching rule not implemented for tptest::axpy"):
        torch.func.vmap(f)(_x(2, 4))
