"""Writes are always seen (issue 39 item 4): a kernel called directly (not through its op)
that writes a torch tensor bumps the tensor's autograd version counter, as torch's own
in-place ops and the op path do, so that a backward that saved the tensor raises instead
of reading the new values; a paddle tensor's inplace version likewise. The adapters'
exchange tables carry the hook (``ExchangeTable(write_hook=...)``: torch's is a
``"tensorplug.write_hook"`` capsule, the torch plugin's ``_native.write_hook``; paddle's a
callable, ``paddle.Tensor._bump_inplace_version``); the core tells it of each written
tensor before the call."""

import sys

import pytest

import tensorplug
from tensorplug import cpp



@pytest.fixture(scope="module")
def torch():
    return pytest.importorskip("torch", reason="torch not installed")

SOURCE = r"""
namespace tp = tensorplug;

// x[...] = value (float32, any strides).
void fill(tp::MutableView x, double value) {
  float* p = x.data_ptr<float>();
  tp::ForEachOffset(x, [&](int64_t o) { p[o] = static_cast<float>(value); });
}
// Each item of xs filled with value.
void fill_all(tp::MutableViewList xs, double value) {
  for (int64_t k = 0; k < xs.size(); ++k) {
    tp::MutableView x = xs[k];
    float* p = x.data_ptr<float>();
    tp::ForEachOffset(x, [&](int64_t o) { p[o] = static_cast<float>(value); });
  }
}
// Reads x, writes nothing.
double first(tp::TensorView x) { return x.data_ptr<float>()[0]; }
"""

SAVED_MODIFIED = "one of the variables needed for gradient computation has been modified by an inplace operation"


@pytest.fixture(scope="module")
def k():
    return cpp.load_inline("written_versions_kernels", SOURCE, functions=["fill", "fill_all", "first"])


def test_a_direct_write_of_a_saved_tensor_makes_backward_raise(k, torch):
    # The scenario: without the bump, x.grad came back [10, 10, 10] with no error.
    x = torch.tensor([1.0, 2.0, 3.0], requires_grad=True)
    y = x * x  # saves x for backward
    k.fill(x, 5.0)
    assert x.detach().tolist() == [5.0, 5.0, 5.0]
    with pytest.raises(RuntimeError, match=SAVED_MODIFIED):
        y.sum().backward()
    # torch's own in-place write raises the same
    x2 = torch.tensor([1.0, 2.0, 3.0], requires_grad=True)
    y2 = x2 * x2
    with torch.no_grad():
        x2.fill_(5.0)
    with pytest.raises(RuntimeError, match=SAVED_MODIFIED):
        y2.sum().backward()


def test_a_written_list_item_is_seen_too(k, torch):
    a = torch.tensor([1.0, 2.0], requires_grad=True)
    b = torch.tensor([3.0], requires_grad=True)
    y = (a * a).sum() + (b * 2).sum()  # saves a, not b
    k.fill_all([b, a], 0.0)
    with pytest.raises(RuntimeError, match=SAVED_MODIFIED):
        y.backward()


def test_each_written_tensor_moves_by_one_and_read_ones_do_not(k, torch):
    x, views = torch.zeros(4), torch.zeros(2, 2)
    v0 = x._version
    k.fill(x, 1.0)
    assert x._version == v0 + 1
    assert k.first(x) == 1.0 and x._version == v0 + 1  # a read leaves the counter alone
    base = views._version
    k.fill_all((views[0], views[1]), 2.0)  # views share their base's counter
    assert views._version == base + 2 and views.tolist() == [[2.0, 2.0], [2.0, 2.0]]


def test_backward_without_a_write_is_unchanged(k, torch):
    x = torch.tensor([1.0, 2.0, 3.0], requires_grad=True)
    y = x * x
    assert k.first(x) == 1.0
    y.sum().backward()
    assert x.grad.tolist() == [2.0, 4.0, 6.0]


def test_an_inference_tensor_is_written_only_in_inference_mode(k, torch):
    with torch.inference_mode():
        t = torch.zeros(3)
    # torch refuses t.fill_(1) here; so does the direct call, before writing anything
    with pytest.raises(RuntimeError, match=r"^fill\(\) argument 1 'x': Inplace update to inference tensor outside "
                                           r"InferenceMode is not allowed"):
        k.fill(t, 1.0)
    assert t.tolist() == [0.0, 0.0, 0.0]
    with pytest.raises(RuntimeError, match=r"^fill_all\(\) argument 1 'xs' item 1: Inplace update to inference"):
        k.fill_all([torch.zeros(1), t], 1.0)
    assert t.tolist() == [0.0, 0.0, 0.0]
    with torch.inference_mode():
        k.fill(t, 2.0)
    assert t.tolist() == [2.0, 2.0, 2.0]


def test_the_torch_hook_calls_torch_directly(torch):
    import os

    from tensorplug_adapters.torch import _native

    library = os.path.join(os.path.dirname(torch.__file__), "lib", "libtorch_cpu.so")
    capsule, direct = _native.write_hook(torch, [library])
    assert type(capsule).__name__ == "PyCapsule" and direct is True


def test_a_table_refuses_a_write_hook_that_is_not_one():
    import numpy as np

    with pytest.raises(TypeError, match=r"^ExchangeTable argument 'write_hook': expected None, a callable or a "
                                        r"'tensorplug.write_hook' capsule, got 'bump'$"):
        tensorplug.ExchangeTable.from_python("mine", from_dlpack=np.from_dlpack, write_hook="bump")


def test_the_torch_hook_without_bump_version_calls_increment_version(tmp_path, torch):
    # The hook is made once per process: a process whose first hook finds no library with
    # bump_version takes torch.autograd.graph.increment_version, and the write is still seen.
    import subprocess

    script = tmp_path / "fallback.py"
    script.write_text(
        "import torch, tensorplug\n"
        "from tensorplug import cpp\n"
        "from tensorplug_adapters.torch import _native\nassert _native.write_hook(torch, [])[1] is False\n"
        f"k = cpp.load_inline('written_versions_kernels', {SOURCE!r}, functions=['fill'])\n"
        "x = torch.tensor([1.0, 2.0, 3.0], requires_grad=True)\n"
        "y = x * x\n"
        "k.fill(x, 5.0)\n"
        "try:\n"
        "    y.sum().backward()\n"
        "except RuntimeError as e:\n"
        f"    assert {SAVED_MODIFIED!r} in str(e)\n"
        "    print('raised')\n")
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0 and done.stdout.strip() == "raised", done.stderr[-2000:]


def test_a_direct_write_of_a_saved_paddle_tensor_makes_backward_raise(k):
    paddle = pytest.importorskip("paddle", reason="paddle not installed")
    x = paddle.to_tensor([1.0, 2.0, 3.0], stop_gradient=False)
    y = x * x  # saves x
    k.fill(x, 5.0)
    assert x.inplace_version == 1 and x.numpy().tolist() == [5.0, 5.0, 5.0]
    with pytest.raises(RuntimeError, match=r"has been modified by an inplace operation"):
        y.sum().backward()  # before the hook: x.grad was [10, 10, 10]
    items = [paddle.zeros([2]), paddle.zeros([1])]
    k.fill_all(items, 1.0)
    assert [t.inplace_version for t in items] == [1, 1]


class Frozen:
    """A third-party tensor type whose adapter refuses writes to a frozen one."""

    def __init__(self, array, frozen=False):
        self.array, self.frozen, self.writes = array, frozen, 0


class FrozenAdapter:
    def __init__(self):
        import numpy as np

        self.table = tensorplug.ExchangeTable.from_python(
            "frozen", from_dlpack=lambda t: Frozen(np.from_dlpack(t)), to_dlpack=lambda f: f.array,
            write_hook=self.will_write)

    @staticmethod
    def will_write(tensor):
        if tensor.frozen:
            raise PermissionError("a frozen tensor is never written")
        tensor.writes += 1

    @tensorplug.hookimpl
    def tensorplug_adapter_info(self):
        return tensorplug.AdapterInfo(name="frozen", framework="numpy", tensor_types=("Frozen",),
                                      capabilities=("exchange",), fast_path=False)

    @tensorplug.hookimpl
    def tensorplug_exchange_table(self, tensor_type):
        return self.table if tensor_type is Frozen else None


def test_a_third_party_adapter_hook_is_told_and_can_refuse(k):
    np = pytest.importorskip("numpy")
    adapter = FrozenAdapter()
    tensorplug.register_adapter(adapter)
    try:
        assert adapter.table.write_hook == adapter.will_write
        live, frozen = Frozen(np.zeros(2, np.float32)), Frozen(np.zeros(2, np.float32), frozen=True)
        k.fill(live, 1.0)
        assert live.writes == 1 and live.array.tolist() == [1.0, 1.0]
        assert k.first(live) == 1.0 and live.writes == 1  # told of writes only
        with pytest.raises(PermissionError, match=r"^fill\(\) argument 1 'x': a frozen tensor is never written$"):
            k.fill(frozen, 1.0)
        with pytest.raises(PermissionError, match=r"^fill_all\(\) argument 1 'xs' item 1: a frozen tensor"):
            k.fill_all([live, frozen], 2.0)
        assert frozen.array.tolist() == [0.0, 0.0] and live.array.tolist() == [1.0, 1.0]  # nothing written
    finally:
        tensorplug.unregister_adapter(adapter)
