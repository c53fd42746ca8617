"""Lists of tensors: "views" parameters (TensorViewList, std::vector<TensorView>) and "list" results
(std::vector<Tensor>), with real frameworks mixed in one list."""

import inspect

import pytest


np = pytest.importorskip("numpy")


def test_signature_and_annotations(args_kernels):
    assert args_kernels.total_numel.signature_text == "xs:views->int"
    assert args_kernels.range.signature_text == "like:view;n:int->list"
    assert args_kernels.count_opt.signature_text == "xs:?views->int"
    assert str(inspect.signature(args_kernels.sum_into)) == "(xs: 'Sequence[Tensor]', out: 'Tensor') -> 'None'"
    assert inspect.signature(args_kernels.range).return_annotation == "list[Tensor]"


def test_lists_and_tuples_of_numpy(args_kernels):
    assert args_kernels.total_numel([np.zeros(3), np.zeros((2, 2))]) == 7
    assert args_kernels.total_numel((np.zeros(5),)) == 5
    assert args_kernels.total_numel([]) == 0
    out = np.zeros(3, np.float32)
    args_kernels.sum_into([np.ones(3, np.float32), np.full(3, 2, np.float32), np.arange(3, dtype=np.float32)], out)
    assert out.tolist() == [3.0, 4.0, 5.0]


def test_mixed_frameworks_in_one_list(args_kernels):
    torch = pytest.importorskip("torch")
    jnp = pytest.importorskip("jax.numpy")
    out = np.zeros(2, np.float32)
    args_kernels.sum_into([np.ones(2, np.float32), torch.full((2,), 2.0), jnp.full((2,), 4.0, dtype=jnp.float32)], out)
    assert out.tolist() == [7.0, 7.0]


def test_mixed_with_paddle(args_kernels):
    paddle = pytest.importorskip("paddle")
    out = np.zeros(2, np.float32)
    args_kernels.sum_into((paddle.full([2], 3.0, dtype="float32"), np.ones(2, np.float32)), out)
    assert out.tolist() == [4.0, 4.0]


def test_items_are_zero_copy_views(args_kernels):
    torch = pytest.importorskip("torch")
    xs = [np.zeros(2, np.float32), torch.zeros(3), np.zeros(1, np.float32)]
    args_kernels.stamp(xs)  # writes j into xs[j] through std::vector<MutableView>
    assert xs[0].tolist() == [0.0, 0.0] and xs[1].tolist() == [1.0, 1.0, 1.0] and xs[2].tolist() == [2.0]


def test_read_only_items_refuse_writes(args_kernels):
    jnp = pytest.importorskip("jax.numpy")
    assert args_kernels.stamp.signature_text == "xs:mviews->void"
    with pytest.raises(ValueError, match=r"^stamp\(\) argument 1 'xs' item 1: expected a writable tensor \(the "
                                         r"kernel writes it\), got a read-only jax array$"):
        args_kernels.stamp([np.zeros(1, np.float32), jnp.zeros(2, dtype=jnp.float32)])
    ro = np.zeros(2, np.float32)
    ro.flags.writeable = False
    with pytest.raises(ValueError, match=r"^stamp\(\) argument 1 'xs' item 0: expected a writable tensor \(the "
                                         r"kernel writes it\), got a read-only numpy array$"):
        args_kernels.stamp([ro])


def test_errors_name_the_item(args_kernels):
    with pytest.raises(TypeError, match=r"^total_numel\(\) argument 1 'xs' item 3: expected a tensor, got str$"):
        args_kernels.total_numel([np.zeros(1), np.zeros(1), np.zeros(1), "s"])
    with pytest.raises(TypeError, match=r"^total_numel\(\) argument 1 'xs': expected a list of tensors, "
                                        r"got numpy.ndarray$"):
        args_kernels.total_numel(np.zeros(3))
    with pytest.raises(TypeError, match=r"^total_numel\(\) argument 1 'xs': expected a list of tensors, got NoneType$"):
        args_kernels.total_numel(None)
    with pytest.raises(ValueError, match=r"^total_numel\(\) argument 1 'xs': a list of 513 tensors is longer "
                                         r"than the limit of 512$"):
        args_kernels.total_numel([np.zeros(1)] * 513)
    assert args_kernels.total_numel([np.zeros(1)] * 512) == 512


def test_optional_list(args_kernels):
    assert args_kernels.count_opt(None) == -1
    assert args_kernels.count_opt([]) == 0
    assert args_kernels.count_opt((np.zeros(1), np.zeros(2))) == 2
    with pytest.raises(TypeError, match=r"^count_opt\(\) argument 1 'xs' item 0: expected a tensor, got int$"):
        args_kernels.count_opt([1])


def test_list_results_in_the_primary_framework(args_kernels):
    r = args_kernels.range(np.zeros(1, np.float32), 3)
    assert type(r) is list and [type(t) for t in r] == [np.ndarray] * 3
    assert [t.tolist() for t in r] == [[0.0, 0.0], [1.0, 1.0], [2.0, 2.0]]
    torch = pytest.importorskip("torch")
    r = args_kernels.range(torch.zeros(1), 2)
    assert type(r) is list and all(type(t) is torch.Tensor for t in r)
    assert [t.tolist() for t in r] == [[0.0, 0.0], [1.0, 1.0]]
    assert args_kernels.range(np.zeros(1, np.float32), 0) == []


def test_primary_argument_is_looked_for_inside_lists(args_kernels):
    torch = pytest.importorskip("torch")
    r = args_kernels.empty_like(2, [torch.zeros(1), np.zeros(1, np.float32)])
    assert type(r) is list and [type(t) for t in r] == [torch.Tensor, torch.Tensor]
    r = args_kernels.empty_like(2, (np.zeros(1, np.float32), torch.zeros(1)))
    assert [type(t) for t in r] == [np.ndarray, np.ndarray] and r[0].shape == (2,)
