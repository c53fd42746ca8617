"""Writes are always seen (issue 39 item 4): a kernel called directly (not through its op)
that writes a torch tensor bumps the tensor's autograd version counter, as torch's own
in-place ops and the op path do, so that a backward that saved the tensor raises instead
of reading the new values. The torch adapter's exchange table carries the hook
(``tensorplug.exchange.torch_write_hook``, a ``"tensorplug.write_hook"`` capsule any
adapter can give its table); the core tells it of each written tensor before the call."""

import pytest

import tensorplug
from tensorplug import cpp

torch = pytest.importorskip("torch", reason="torch not installed")

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


def test_a_direct_write_of_a_saved_tensor_makes_backward_raise(k):
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


def test_a_written_list_item_is_seen_too(k):
    a = torch.tensor([1.0, 2.0], requires_grad=True)
    b = torch.tensor([3.0], requires_grad=True)
    y = (a * a).sum() + (b * 2).sum()  # saves a, not b
    k.fill_all([b, a], 0.0)
    with pytest.raises(RuntimeError, match=SAVED_MODIFIED):
        y.backward()


def test_each_written_tensor_moves_by_one_and_read_ones_do_not(k):
    x, views = torch.zeros(4), torch.zeros(2, 2)
    v0 = x._version
    k.fill(x, 1.0)
    assert x._version == v0 + 1
    assert k.first(x) == 1.0 and x._version == v0 + 1  # a read leaves the counter alone
    base = views._version
    k.fill_all((views[0], views[1]), 2.0)  # views share their base's counter
    assert views._version == base + 2 and views.tolist() == [[2.0, 2.0], [2.0, 2.0]]


def test_backward_without_a_write_is_unchanged(k):
    x = torch.tensor([1.0, 2.0, 3.0], requires_grad=True)
    y = x * x
    assert k.first(x) == 1.0
    y.sum().backward()
    assert x.grad.tolist() == [2.0, 4.0, 6.0]


def test_an_inference_tensor_is_written_only_in_inference_mode(k):
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


def test_the_torch_hook_calls_torch_directly():
    import os

    library = os.path.join(os.path.dirname(torch.__file__), "lib", "libtorch_cpu.so")
    capsule, direct = tensorplug._core.torch_write_hook(torch, [library])
    assert type(capsule).__name__ == "PyCapsule" and direct is True


def test_a_table_refuses_a_write_hook_that_is_not_one():
    import numpy as np

    with pytest.raises(TypeError, match=r"^ExchangeTable argument 'write_hook': expected None or a "
                                        r"'tensorplug.write_hook' capsule, got 'bump'$"):
        tensorplug.ExchangeTable.from_python("mine", from_dlpack=np.from_dlpack, write_hook="bump")
