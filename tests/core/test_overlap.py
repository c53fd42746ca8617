"""Written parameters refuse tensors whose elements overlap (issue 21, item 4).

A MutableView (kind "mview") or an item of a MutableViewList ("mviews") whose elements
share memory (a zero stride on an extent > 1, as from torch's expand() or numpy's
as_strided, or strides that fold onto themselves) is refused before the call with
ValueError naming the function and the argument: the kernel's result would otherwise
depend on the order of its writes, and eager and compiled results disagree. Layouts whose
elements are distinct (transposed, flipped, sliced, interleaved strides) still pass.
"""

from __future__ import annotations

import pytest

import tensorplug
from tensorplug import cpp

np = pytest.importorskip("numpy")
as_strided = np.lib.stride_tricks.as_strided

SOURCE = r"""
namespace tp = tensorplug;

namespace {
// Writes 1, 2, 3, ... to out's elements in row-major order (any strides).
void Number(tp::MutableView out) {
  float* p = out.data_ptr<float>();
  float next = 1;
  tp::ForEachOffset(out, [&](int64_t offset) { p[offset] = next++; });
}
// The same for each tensor of a list.
void NumberAll(tp::MutableViewList outs) {
  for (tp::MutableView out : outs) Number(out);
}
}  // namespace

TENSORPLUG_EXPORT(number, Number, "out");
TENSORPLUG_EXPORT(number_all, NumberAll, "outs");
"""

SHARED = "several elements share memory (as after expand() or broadcast_to); pass a copy"


def refusal(label: str, shape: list[int], strides: list[int], why: str = SHARED) -> str:
    return (f"{label}: expected a tensor whose elements do not overlap (the kernel writes it), got shape "
            f"{shape} strides {strides}: {why}")


@pytest.fixture(scope="module")
def m():
    return cpp.load_inline("overlap_refused", SOURCE)


def floats(base, shape, strides_in_elements):
    return as_strided(base, shape=shape, strides=[s * base.itemsize for s in strides_in_elements])


def test_numpy_zero_stride_is_refused_and_nothing_is_written(m):
    base = np.zeros(3, np.float32)
    x = floats(base, (2, 3), (0, 1))  # writable, unlike np.broadcast_to
    with pytest.raises(ValueError) as e:
        m.number(x)
    assert str(e.value) == refusal("number() argument 1 'out'", [2, 3], [0, 1])
    assert base.tolist() == [0, 0, 0]


def test_numpy_folded_strides_are_refused(m):
    # [3, 2] strides [1, 2]: offsets 0 2 1 3 2 4, offset 2 twice (no zero stride)
    base = np.zeros(6, np.float32)
    with pytest.raises(ValueError) as e:
        m.number(floats(base, (3, 2), (1, 2)))
    assert str(e.value) == refusal("number() argument 1 'out'", [3, 2], [1, 2])
    assert not base.any()


def test_numpy_distinct_layouts_pass(m):
    # [3, 2] strides [2, 3]: offsets 0 3 2 5 4 7, distinct although the sorted strides
    # do not prove it (decided exactly by listing them)
    base = np.zeros(8, np.float32)
    m.number(floats(base, (3, 2), (2, 3)))
    assert base.tolist() == [1, 0, 3, 2, 5, 4, 0, 6]
    grid = np.zeros((3, 4), np.float32)
    m.number(grid.T)            # transposed
    assert grid.T.ravel().tolist() == list(range(1, 13))
    flipped = np.zeros(4, np.float32)
    m.number(flipped[::-1])     # negative stride
    assert flipped.tolist() == [4, 3, 2, 1]
    one = np.zeros(3, np.float32)
    m.number(floats(one, (1, 3), (0, 1)))  # a zero stride on an extent of 1 shares nothing
    assert one.tolist() == [1, 2, 3]
    m.number(floats(np.zeros(1, np.float32), (0, 5), (0, 0)))  # empty: nothing to write


def test_numpy_large_interleaved_layout_is_refused_as_unproven(m):
    # 1025 x 1024 elements (past the 2^20 listed exactly) whose strides interleave
    base = np.zeros(1025 * 1024, np.float32)
    with pytest.raises(ValueError) as e:
        m.number(floats(base, (1025, 1024), (1023, 1)))
    why = "its strides interleave and it is too large to prove its elements distinct; pass a copy"
    assert str(e.value) == refusal("number() argument 1 'out'", [1025, 1024], [1023, 1], why)


def test_list_item_is_named(m):
    good, base = np.zeros(2, np.float32), np.zeros(2, np.float32)
    with pytest.raises(ValueError) as e:
        m.number_all([good, floats(base, (4,), (0,))])
    assert str(e.value) == refusal("number_all() argument 1 'outs' item 1", [4], [0])
    assert not base.any()


def test_torch_expand_is_refused_like_torch_in_place_ops(m):
    torch = pytest.importorskip("torch")
    x = torch.zeros(3).expand(2, 3)
    with pytest.raises(RuntimeError, match="more than one element of the written-to tensor"):
        x.add_(1)  # torch's own refusal, for comparison
    with pytest.raises(ValueError) as e:
        m.number(x)
    assert str(e.value) == refusal("number() argument 1 'out'", [2, 3], [0, 1])
    with pytest.raises(ValueError) as e:
        m.number_all([torch.zeros(2), torch.zeros(1).expand(3)])
    assert str(e.value) == refusal("number_all() argument 1 'outs' item 1", [3], [0])
    y = torch.zeros(2, 3)
    m.number(y.t())  # distinct: passes
    assert y.t().flatten().tolist() == [1, 2, 3, 4, 5, 6]


def test_paddle_overlapping_strides_are_refused(m):
    paddle = pytest.importorskip("paddle")
    base = paddle.zeros([3])
    x = paddle.as_strided(base, [2, 3], [0, 1])
    with pytest.raises(ValueError) as e:
        m.number(x)
    assert str(e.value) == refusal("number() argument 1 'out'", [2, 3], [0, 1])
    assert base.tolist() == [0, 0, 0]


def test_torch_op_refuses_expanded_written_argument_eager_and_compiled(m):
    # The op's kernel is the function itself: an eager call is refused as above. Under
    # torch.compile the kernel is handed a dense clone (functionalization), so the check
    # does not see the input; torch refuses copying the result back into the overlapping
    # input when it compiles (inductor alike; docs/decisions.md): an error either way,
    # never a result that differs from eager.
    torch = pytest.importorskip("torch")
    op = tensorplug.op("tpoverlap::number", m.number)

    def f(x):
        op(x)
        return x.sum()

    x = torch.zeros(3).expand(2, 3)
    with pytest.raises(ValueError) as e:
        m.number(x)
    assert str(e.value) == refusal("number() argument 1 'out'", [2, 3], [0, 1])
    # Through torch's dispatcher the native kernel refuses it alike, its kind in the message
    # (torch turns a C++ kernel's error into RuntimeError).
    with pytest.raises(RuntimeError) as e:
        f(x)
    assert str(e.value).startswith("tpoverlap::number(): ValueError: " + refusal("argument 'out'", [2, 3], [0, 1]))
    torch._dynamo.reset()
    with pytest.raises(torch._dynamo.exc.BackendCompilerFailed,
                       match="more than one element of the written-to tensor refers to a single memory location"):
        torch.compile(f, backend="aot_eager", fullgraph=True)(x)
    assert x.tolist() == [[0, 0, 0], [0, 0, 0]]
    dense = torch.zeros(2, 3)
    assert torch.compile(f, backend="aot_eager", fullgraph=True)(dense).item() == 21
