"""Int arrays ("ints": IntArrayView, std::vector<int64_t>) from lists, tuples, torch.Size and 1-d
integer arrays, and as results; optional int arrays."""

import inspect

import pytest


np = pytest.importorskip("numpy")


def test_signatures(args_kernels):
    assert args_kernels.product.signature_text == "shape:ints->int"
    assert args_kernels.reversed_ints.signature_text == "v:ints->ints"
    assert args_kernels.len_or.signature_text == "v:?ints->int"
    assert str(inspect.signature(args_kernels.reversed_ints)) == "(v: 'Sequence[int]') -> 'list[int]'"


def test_from_python_sequences(args_kernels):
    assert args_kernels.product([2, 3, 4]) == 24
    assert args_kernels.product((2, 5)) == 10
    assert args_kernels.product([]) == 1
    assert args_kernels.product([2, np.int64(5), np.int32(3)]) == 30  # numpy scalars as items
    assert args_kernels.product([-1, 2**62]) == -(2**62)


def test_from_torch_size_and_tensors(args_kernels):
    torch = pytest.importorskip("torch")
    assert args_kernels.product(torch.Size([3, 3])) == 9
    assert args_kernels.product(torch.zeros(2, 3, 4).shape) == 24
    assert args_kernels.product(torch.tensor([4, 5])) == 20
    assert args_kernels.reversed_ints(torch.tensor([1, 2, 3], dtype=torch.int32)) == [3, 2, 1]


def test_from_numpy_arrays(args_kernels):
    assert args_kernels.product(np.array([2, 7])) == 14  # int64, passed in place
    assert args_kernels.product(np.array([2, 7], np.int32)) == 14
    assert args_kernels.product(np.array([2, 7], np.uint8)) == 14
    assert args_kernels.reversed_ints(np.arange(10)[::3]) == [9, 6, 3, 0]  # strided: copied
    assert args_kernels.reversed_ints(np.array([], np.int64)) == []


def test_results_are_lists_of_ints(args_kernels):
    r = args_kernels.reversed_ints([1, 2, 3])
    assert type(r) is list and r == [3, 2, 1] and all(type(v) is int for v in r)
    assert args_kernels.shape_of(np.zeros((2, 5))) == [2, 5]
    assert args_kernels.shape_of(np.zeros(())) == []


def test_optional_int_array(args_kernels):
    assert args_kernels.len_or(None) == -1
    assert args_kernels.len_or([]) == 0
    assert args_kernels.len_or((1, 2, 3)) == 3
    assert args_kernels.len_or(np.arange(4)) == 4


def test_errors(args_kernels):
    with pytest.raises(TypeError, match=r"^product\(\) argument 1 'shape' item 1: expected an int, got bool$"):
        args_kernels.product([1, True])
    with pytest.raises(TypeError, match=r"^product\(\) argument 1 'shape' item 0: expected an int, got float$"):
        args_kernels.product([1.0])
    with pytest.raises(TypeError, match=r"^product\(\) argument 1 'shape' item 1: expected an int, got str$"):
        args_kernels.product((1, "a"))
    with pytest.raises(TypeError, match=r"^product\(\) argument 1 'shape': expected a list of ints, "
                                        r"got an array of dtype float64$"):
        args_kernels.product(np.zeros(2))
    with pytest.raises(TypeError, match=r"^product\(\) argument 1 'shape': expected a list of ints, "
                                        r"got a 2-d array \(int arrays are 1-d\)$"):
        args_kernels.product(np.zeros((2, 2), np.int64))
    with pytest.raises(TypeError, match=r"^product\(\) argument 1 'shape': expected a list of ints, got int$"):
        args_kernels.product(3)
    with pytest.raises(OverflowError, match=r"^product\(\) argument 1 'shape' item 0: "):
        args_kernels.product([2**63])
    with pytest.raises(OverflowError, match=r"^product\(\) argument 1 'shape' item 1: value does not fit in int64$"):
        args_kernels.product(np.array([1, 2**63], np.uint64))
    with pytest.raises(ValueError, match=r"^product\(\) argument 1 'shape': a list of 4097 ints is longer than "
                                         r"the limit of 4096$"):
        args_kernels.product([1] * 4097)
    assert args_kernels.product([1] * 4096) == 1
