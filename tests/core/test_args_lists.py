"""Lists of tensors: "views" parameters (TensorViewList, std::vector<TensorView>) and "list" results
(std::vector<Tensor>), with real frameworks mixed in one list."""

import inspect
from pathlib import Path

import pytest

import tensorplug

np = pytest.importorskip("numpy")


@pytest.fixture(scope="module")
def k():
    from tensorplug import cpp

    return tensorplug.load_module(cpp.build("args_kernels", [Path(__file__).parents[1] / "support" / "args_kernels.cc"]))


def test_signature_and_annotations(k):
    assert k.total_numel.signature_text == "xs:views->int"
    assert k.range.signature_text == "like:view;n:int->list"
    assert k.count_opt.signature_text == "xs:?views->int"
    assert str(inspect.signature(k.sum_into)) == "(xs: 'Sequence[Tensor]', out: 'Tensor') -> 'None'"
    assert inspect.signature(k.range).return_annotation == "list[Tensor]"


def test_lists_and_tuples_of_numpy(k):
    assert k.total_numel([np.zeros(3), np.zeros((2, 2))]) == 7
    assert k.total_numel((np.zeros(5),)) == 5
    assert k.total_numel([]) == 0
    out = np.zeros(3, np.float32)
    k.sum_into([np.ones(3, np.float32), np.full(3, 2, np.float32), np.arange(3, dtype=np.float32)], out)
    assert out.tolist() == [3.0, 4.0, 5.0]


def test_mixed_frameworks_in_one_list(k):
    torch = pytest.importorskip("torch")
    jnp = pytest.importorskip("jax.numpy")
    out = np.zeros(2, np.float32)
    k.sum_into([np.ones(2, np.float32), torch.full((2,), 2.0), jnp.full((2,), 4.0, dtype=jnp.float32)], out)
    assert out.tolist() == [7.0, 7.0]


def test_mixed_with_paddle(k):
    paddle = pytest.importorskip("paddle")
    out = np.zeros(2, np.float32)
    k.sum_into((paddle.full([2], 3.0, dtype="float32"), np.ones(2, np.float32)), out)
    assert out.tolist() == [4.0, 4.0]


def test_items_are_zero_copy_views(k):
    torch = pytest.importorskip("torch")
    xs = [np.zeros(2, np.float32), torch.zeros(3), np.zeros(1, np.float32)]
    k.stamp(xs)  # writes j into xs[j] through std::vector<MutableView>
    assert xs[0].tolist() == [0.0, 0.0] and xs[1].tolist() == [1.0, 1.0, 1.0] and xs[2].tolist() == [2.0]


def test_read_only_items_refuse_writes(k):
    jnp = pytest.importorskip("jax.numpy")
    assert k.stamp.signature_text == "xs:mviews->void"
    with pytest.raises(ValueError, match=r"^stamp\(\) argument 1 'xs' item 1: expected a writable tensor \(the "
                                         r"kernel writes it\), got a read-only jax array$"):
        k.stamp([np.zeros(1, np.float32), jnp.zeros(2, dtype=jnp.float32)])
    ro = np.zeros(2, np.float32)
    ro.flags.writeable = False
    with pytest.raises(ValueError, match=r"^stamp\(\) argument 1 'xs' item 0: expected a writable tensor \(the "
                                         r"kernel writes it\), got a read-only numpy array$"):
        k.stamp([ro])


def test_errors_name_the_item(k):
    with pytest.raises(TypeError, match=r"^total_numel\(\) argument 1 'xs' item 3: expected a tensor, got str$"):
        k.total_numel([np.zeros(1), np.zeros(1), np.zeros(1), "s"])
    with pytest.raises(TypeError, match=r"^total_numel\(\) argument 1 'xs': expected a list of tensors, "
                                        r"got numpy.ndarray$"):
        k.total_numel(np.zeros(3))
    with pytest.raises(TypeError, match=r"^total_numel\(\) argument 1 'xs': expected a list of tensors, got NoneType$"):
        k.total_numel(None)
    with pytest.raises(ValueError, match=r"^total_numel\(\) argument 1 'xs': a list of 513 tensors is longer "
                                         r"than the limit of 512$"):
        k.total_numel([np.zeros(1)] * 513)
    assert k.total_numel([np.zeros(1)] * 512) == 512


def test_optional_list(k):
    assert k.count_opt(None) == -1
    assert k.count_opt([]) == 0
    assert k.count_opt((np.zeros(1), np.zeros(2))) == 2
    with pytest.raises(TypeError, match=r"^count_opt\(\) argument 1 'xs' item 0: expected a tensor, got int$"):
        k.count_opt([1])


def test_list_results_in_the_primary_framework(k):
    r = k.range(np.zeros(1, np.float32), 3)
    assert type(r) is list and [type(t) for t in r] == [np.ndarray] * 3
    assert [t.tolist() for t in r] == [[0.0, 0.0], [1.0, 1.0], [2.0, 2.0]]
    torch = pytest.importorskip("torch")
    r = k.range(torch.zeros(1), 2)
    assert type(r) is list and all(type(t) is torch.Tensor for t in r)
    assert [t.tolist() for t in r] == [[0.0, 0.0], [1.0, 1.0]]
    assert k.range(np.zeros(1, np.float32), 0) == []


def test_primary_argument_is_looked_for_inside_lists(k):
    torch = pytest.importorskip("torch")
    r = k.empty_like(2, [torch.zeros(1), np.zeros(1, np.float32)])
    assert type(r) is list and [type(t) for t in r] == [torch.Tensor, torch.Tensor]
    r = k.empty_like(2, (np.zeros(1, np.float32), torch.zeros(1)))
    assert [type(t) for t in r] == [np.ndarray, np.ndarray] and r[0].shape == (2,)
