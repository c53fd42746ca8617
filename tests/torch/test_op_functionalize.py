"""Functionalization of tensorplug ops that write arguments (destination passing).

torch functionalizes a mutable custom op itself only in its Python functional mode
(``auto_functionalized``); its C++ functionalization, behind ``torch.func.functionalize``,
needs a Functionalize kernel, and an op with one is no longer auto-functionalized. The
torch adapter gives the op both: a Functionalize kernel that calls ``auto_functionalized``
on the op's ``mutable`` overload (plugins/tensorplug_adapters/torch/registration.py).
These tests check each functionalization, and the compilers that run one, against eager.
"""

import pytest

torch = pytest.importorskip("torch")


import tensorplug  # noqa: E402
from tensorplug import cpp, like  # noqa: E402
from torch.fx.experimental.proxy_tensor import make_fx  # noqa: E402

# A kernel that writes two arguments, one of them optional, and returns a tensor too.
ACCUMULATE = r"""
#include <tensorplug/tensorplug.h>

#include <optional>

namespace tp = tensorplug;

namespace {

// acc += x (float32, contiguous, one shape); returns acc's values from before the call in
// a new tensor; adds 1 to count[0] when count is given.
tp::Tensor Accumulate(tp::TensorView x, tp::MutableView acc, std::optional<tp::MutableView> count) {
  TENSORPLUG_CHECK(x.sizes() == acc.sizes() && x.is_contiguous() && acc.is_contiguous(), ValueError)
      << "accumulate: x and acc must be contiguous, of one shape";
  tp::Tensor before = tp::Tensor::FromEnvAlloc(acc.shape(), acc.dtype(), acc.device());
  const float* px = x.data_ptr<float>();
  float* pa = acc.mutable_data_ptr<float>();
  float* pb = before.mutable_data_ptr<float>();
  for (int64_t i = 0; i < x.numel(); ++i) {
    pb[i] = pa[i];
    pa[i] += px[i];
  }
  if (count) count->mutable_data_ptr<float>()[0] += 1;
  return before;
}

}  // namespace

TENSORPLUG_EXPORT(accumulate, Accumulate, "x", "acc", "count");
"""


@pytest.fixture(scope="module")
def accumulate(tmp_path_factory):
    directory = tmp_path_factory.mktemp("accumulate")
    source = directory / "accumulate.cc"
    source.write_text(ACCUMULATE)
    mod = tensorplug.load_module(cpp.build("fz_accumulate", [source], build_directory=directory))
    return tensorplug.op("tpfz::accumulate", mod.accumulate, returns=like("acc"))


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


def test_only_ops_that_write_have_a_mutable_overload(ops):
    # (grad and nograd: the overloads a native Autograd kernel passes calls on to,
    # tests/torch/test_torch_native.py.)
    axpy = torch.ops.tptest.axpy
    assert sorted(axpy.overloads()) == ["default", "grad", "mutable", "nograd"]
    assert str(axpy.mutable._schema) == \
        "tptest::axpy.mutable(Tensor x, Tensor y, Tensor(a!) out, float alpha) -> ()"
    assert torch._C._dispatch_has_kernel_for_dispatch_key("tptest::axpy", "Functionalize")
    assert torch._C._dispatch_has_kernel_for_dispatch_key("tptest::axpy.nograd", "Functionalize")
    assert not torch._C._dispatch_has_kernel_for_dispatch_key("tptest::axpy.mutable", "Functionalize")
    assert torch.ops.tptest.pad.overloads() == ["default"]  # a Python shape function: the Python kernels
    for name in ("scale", "row_sum", "pad", "arange", "plus_and_twice"):
        if name != "pad":
            assert sorted(getattr(torch.ops.tptest, name).overloads()) == ["default", "grad", "nograd"]
        assert not torch._C._dispatch_has_kernel_for_dispatch_key(f"tptest::{name}", "Functionalize")
    x = _x(3)
    out = torch.zeros(3)
    assert axpy.mutable(x, x, out, 2.0) is None  # the same kernel
    torch.testing.assert_close(out, 3 * x)
    torch.library.opcheck(axpy.mutable, (x.double(), x.double(), torch.zeros(3, dtype=torch.float64), 0.5))


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
    assert af.args == (torch.ops.tptest.axpy.mutable,)
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
    assert "auto_functionalized(torch.ops.tptest.axpy.mutable" in gm.code and "select_scatter" in gm.code
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
    assert "auto_functionalized(torch.ops.tptest.axpy.mutable" in gm.code
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


def test_functionalize_of_an_op_that_writes_two_arguments_and_returns_one(accumulate):
    assert str(torch.ops.tpfz.accumulate.default._schema) == \
        "tpfz::accumulate(Tensor x, Tensor(a!) acc, Tensor(b!)? count) -> Tensor"

    def f(x, acc, count):
        before = accumulate(x, acc, count)
        return before + acc

    x = _x(3) + 2
    for with_count in (True, False):
        acc_eager, acc_functional = torch.ones(3), torch.ones(3)
        count_eager, count_functional = (torch.zeros(1), torch.zeros(1)) if with_count else (None, None)
        expected = f(x, acc_eager, count_eager)
        torch.testing.assert_close(expected, 1 + (1 + x))
        torch.testing.assert_close(torch.func.functionalize(f)(x, acc_functional, count_functional), expected)
        torch.testing.assert_close(acc_functional, acc_eager)
        torch.testing.assert_close(count_functional, count_eager)
        gm = make_fx(torch.func.functionalize(f))(x, torch.ones(3), count_functional)
        assert _mutating_calls(gm) == []
        copies = [node for node in gm.graph.nodes if node.target is torch.ops.aten.copy_.default]
        assert len(copies) == (2 if with_count else 1)
        acc_compiled = torch.ones(3)
        count_compiled = torch.zeros(1) if with_count else None
        compiled = torch.compile(f, backend="aot_eager", fullgraph=True)
        torch.testing.assert_close(compiled(x, acc_compiled, count_compiled), expected)
        torch.testing.assert_close((acc_compiled, count_compiled), (acc_eager, count_eager))
        torch.library.opcheck(torch.ops.tpfz.accumulate.default, (x, torch.ones(3), count_eager))
