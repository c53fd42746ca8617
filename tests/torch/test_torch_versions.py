"""torch's version counter of the tensors a tensorplug.op writes: every written tensor
(kind mview, schema ``Tensor(a!)``) has its version bumped once per call, before the kernel
runs, on every path the kernel runs (the native kernel, the torch plugin's kernel.cc
RunPlan; the Python kernel, registration._bumping), as torch's own in-place ops bump it.
So autograd refuses a backward that saved a tensor an op wrote, instead of giving a
silently wrong gradient, and an inference tensor is refused outside inference mode with
nothing written.
"""

from types import SimpleNamespace

import pytest

torch = pytest.importorskip("torch", reason="torch not installed")

import tensorplug  # noqa: E402
from tensorplug import TensorSpec, cpp, plans  # noqa: E402
from tensorplug_adapters.torch import _native  # noqa: E402
from tensorplug_adapters.torch import native as torch_native  # noqa: E402
from torch.utils._python_dispatch import TorchDispatchMode  # noqa: E402

SOURCE = r"""
#include <tensorplug/tensorplug.h>
namespace tp = tensorplug;

namespace {

void CheckFloat(const tp::TensorView& x, const char* fn) {
  TENSORPLUG_CHECK(x.device().device_type == kDLCPU && x.dtype() == tp::kFloat32 && x.is_contiguous(), ValueError)
      << fn << ": expected a contiguous float32 CPU tensor";
}

// out += a * x (the reproduction of the bug: it reads what it writes).
void Accumulate(tp::TensorView x, tp::MutableView out, double a) {
  CheckFloat(x, "accumulate");
  CheckFloat(out, "accumulate");
  TENSORPLUG_CHECK(x.numel() == out.numel(), ValueError) << "accumulate: sizes differ";
  const float* px = x.data_ptr<float>();
  float* po = out.mutable_data_ptr<float>();
  for (int64_t i = 0; i < x.numel(); ++i) po[i] += static_cast<float>(a * px[i]);
}

// out += a * x, and a new tensor holding out's new values.
tp::Tensor AccumulateCopy(tp::TensorView x, tp::MutableView out, double a) {
  Accumulate(x, out, a);
  tp::Tensor copy = tp::Tensor::FromEnvAlloc(out.shape(), out.dtype(), out.device());
  const float* po = out.data_ptr<float>();
  float* pc = copy.mutable_data_ptr<float>();
  for (int64_t i = 0; i < out.numel(); ++i) pc[i] = po[i];
  return copy;
}

// outs[j] += value for every item j.
void AddAll(tp::MutableViewList outs, double value) {
  for (tp::MutableView out : outs) {
    CheckFloat(out, "add_all");
    float* p = out.mutable_data_ptr<float>();
    for (int64_t i = 0; i < out.numel(); ++i) p[i] += static_cast<float>(value);
  }
}

}  // namespace

TENSORPLUG_EXPORT(accumulate, Accumulate, "x", "out", "a");
TENSORPLUG_EXPORT(accumulate_copy, AccumulateCopy, "x", "out", "a");
TENSORPLUG_EXPORT(add_all, AddAll, "outs", "value");
"""

_libraries = []  # torch.library.Library objects kept for the process (dropping one removes its ops)


def _copy_shape(x, out, a):
    return TensorSpec(tuple(out.shape), out.dtype)


@pytest.fixture(scope="module")
def ops():
    mod = cpp.load_inline("torch_versions", SOURCE)
    return SimpleNamespace(
        module=mod,
        # The native kernel.
        accumulate=tensorplug.op("tpversions::accumulate", mod.accumulate),
        # A shape function keeps the Python kernel (torch_native.reason says so).
        accumulate_copy=tensorplug.op("tpversions::accumulate_copy", mod.accumulate_copy, returns=_copy_shape),
    )


@pytest.fixture(scope="module")
def add_all(ops):
    # A written list cannot be declared with tensorplug.op yet (kind mviews has no torch
    # schema); the native kernel takes one all the same: its plan and torch schema made here.
    lib = torch.library.Library("tpversions_list", "FRAGMENT")
    _libraries.append(lib)
    lib.define("add_all(Tensor(a!)[] outs, float value) -> ()")
    plan = plans.create("tpversions_list::add_all", ops.module.add_all,
                        [("outs", "views", False, True), ("value", "float", False, False)], 0, [])
    slot = _native.define(plan)
    _native.register(slot, "tpversions_list", "CompositeExplicitAutograd", "add_all")
    return torch.ops.tpversions_list.add_all.default


def test_the_ops_take_the_paths_these_tests_name(ops):
    assert _native.has_bump_version()
    assert torch_native.reason(ops.accumulate) is None
    assert torch_native.reason(ops.accumulate_copy).startswith("its output rule '_copy_shape' is a Python shape")


def test_every_call_of_the_native_kernel_bumps_the_written_tensor_once(ops):
    x, out = torch.ones(3), torch.zeros(3)
    packet = torch.ops.tpversions.accumulate
    calls = [
        lambda: ops.accumulate(x, out, 1.0),            # the tensorplug Op
        lambda: packet(x, out, 1.0),                    # torch.ops.<ns>.<name>: the native Autograd kernel
        lambda: packet.default(x, out, 1.0),
        lambda: packet.nograd(x, out, 1.0),             # below autograd: the kernel itself
        lambda: packet.grad(x, out, 1.0),               # the Python Autograd kernel, then .nograd
        lambda: packet.mutable(x, out, 1.0),
    ]
    for k, call in enumerate(calls, start=1):
        call()
        assert out._version == k
        assert out.tolist() == [float(k)] * 3
    assert x._version == 0  # read, not written
    with torch.no_grad():
        ops.accumulate(x, out, 1.0)
    assert out._version == len(calls) + 1


def test_a_call_through_a_dispatch_mode_bumps_once(ops):
    # A dispatch mode sends the call to .grad, whose Python kernel redispatches below autograd.
    x, out = torch.ones(3), torch.zeros(3)

    class PassThrough(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            return func(*args, **(kwargs or {}))

    with PassThrough():
        ops.accumulate(x, out, 2.0)
    assert out._version == 1 and out.tolist() == [2.0, 2.0, 2.0]


def test_the_python_kernel_bumps_the_written_tensor_once(ops):
    x, out = torch.ones(3), torch.zeros(3)
    copy = ops.accumulate_copy(x, out, 2.0)
    assert out._version == 1 and out.tolist() == [2.0] * 3 and copy.tolist() == [2.0] * 3
    torch.ops.tpversions.accumulate_copy(x, out, 2.0)
    assert out._version == 2 and out.tolist() == [4.0] * 3
    assert x._version == 0 and copy._version == 0


@pytest.mark.parametrize("name", ["accumulate", "accumulate_copy"])
def test_a_backward_that_saved_a_written_tensor_is_refused(ops, name):
    # The reproduction: w * y saves y; the op then writes y. Without the bump, backward
    # gives w.grad == 6 (y's new value) where 1 is right.
    op = getattr(ops, name)
    w, y = torch.ones(3, requires_grad=True), torch.ones(3)
    z = w * y
    op(torch.ones(3), y, 5.0)
    assert y._version == 1
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        z.sum().backward()
    assert w.grad is None
    # Saved after the write: the gradient is the new value's.
    z = w * y
    z.sum().backward()
    assert w.grad.tolist() == [6.0, 6.0, 6.0]


def test_each_item_of_a_written_list_is_bumped(add_all):
    a, b, c = torch.zeros(2), torch.zeros(3), torch.zeros(1)
    add_all([a, b, c], 1.5)
    assert (a._version, b._version, c._version) == (1, 1, 1)
    assert a.tolist() == [1.5, 1.5] and b.tolist() == [1.5] * 3 and c.tolist() == [1.5]
    add_all([b], 1.0)
    assert (a._version, b._version, c._version) == (1, 2, 1)
    add_all([], 1.0)  # nothing to bump


@pytest.mark.parametrize("name", ["accumulate", "accumulate_copy"])
def test_an_inference_tensor_is_refused_outside_inference_mode_with_nothing_written(ops, name):
    op = getattr(ops, name)
    with torch.inference_mode():
        out = torch.zeros(3)
    with pytest.raises(RuntimeError) as info:
        op(torch.ones(3), out, 1.0)
    assert str(info.value).startswith(
        f"tpversions::{name}(): RuntimeError: argument 'out': Inplace update to inference tensor outside "
        "InferenceMode is not allowed.")
    assert "Exception raised from" not in str(info.value)  # c10's backtrace cut off
    assert out.tolist() == [0.0, 0.0, 0.0]
    # Inside inference mode the write is torch's own rule too: allowed.
    with torch.inference_mode():
        op(torch.ones(3), out, 1.0)
        assert out.tolist() == [1.0, 1.0, 1.0]


def test_an_inference_item_of_a_written_list_is_refused_naming_it(add_all):
    with torch.inference_mode():
        frozen = torch.zeros(2)
    plain = torch.zeros(2)
    with pytest.raises(RuntimeError) as info:
        add_all([plain, frozen], 1.0)
    assert str(info.value).startswith(
        "tpversions_list::add_all(): RuntimeError: argument 'outs' item 1: Inplace update to inference tensor")
    assert frozen.tolist() == [0.0, 0.0] and plain.tolist() == [0.0, 0.0]  # the kernel never ran
    assert plain._version == 1  # bumped before the refusal: a bump too many is harmless


def test_a_read_only_inference_tensor_is_fine(ops):
    with torch.inference_mode():
        x = torch.ones(3)
    out = torch.zeros(3)
    ops.accumulate(x, out, 3.0)
    assert out.tolist() == [3.0, 3.0, 3.0] and out._version == 1


def _program(ops):
    def f(x, out):
        y = x * 2
        ops.accumulate(x, y, 0.5)            # writes an intermediate
        copy = ops.accumulate_copy(y, out, 1.0)  # writes a graph input (the Python kernel)
        ops.accumulate(copy, out, 1.0)       # and again (the native kernel)
        return y + out + copy

    return f


@pytest.mark.parametrize("backend", ["aot_eager", "inductor"])
def test_compiled_calls_equal_eager(ops, backend):
    f = _program(ops)
    x = torch.arange(4, dtype=torch.float32)
    eager_out, compiled_out = torch.ones(4), torch.ones(4)
    expected = f(x, eager_out)
    torch._dynamo.reset()
    compiled = torch.compile(f, backend=backend, fullgraph=True)
    torch.testing.assert_close(compiled(x, compiled_out), expected)
    torch.testing.assert_close(compiled_out, eager_out)
    assert compiled_out._version > 0  # the compiled write is seen by autograd too
