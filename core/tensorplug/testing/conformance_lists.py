"""The conformance kit's "lists" and "ints" capabilities: lists of tensors (parameter kind
``views``, results ``std::vector<Tensor>``) and integer arrays (kind ``ints``), optionals
of both included.

Part of :mod:`tensorplug.testing.conformance` (imported there). Lists take tensors of any
adapters at once, so the mixed checks put the adapter under test in one list with a
second framework (fixture ``tensorplug_partner``: numpy, or another for numpy itself).
"""

from __future__ import annotations

import re

import pytest

import tensorplug
from tensorplug.testing import capability, contiguous_strides
from tensorplug.testing.checks import (assert_values, call_state, device_name, make, needs_cuda, needs_host,
                                       parse_seen, plus_one, read_only_flag, same_strides, seen)
from tensorplug.testing.framework import Unsupported, make_tensor
from tensorplug.testing.report import NOT_PROVIDED

__all__ = ["TestLists", "TestInts"]


def seen_items(kernels, xs) -> list:
    """What the kernel sees of each item (``list_describe``): a :class:`~tensorplug.testing.checks.Seen` each."""
    text = kernels.list_describe(xs)
    return [parse_seen(part) for part in text.split(";")] if text else []


def items(framework) -> list:
    """``(tensor, values as numpy, strides)`` of several dtypes and shapes, a strided one
    included where the framework has strides (jax has none: its layouts capability says so)."""
    made = []
    for shape, dtype, strides in (((2, 3), "float32", None), ((4,), "int32", None), ((), "float32", None),
                                  ((4, 3), "float32", (1, 4))):
        try:
            x, expected = make_tensor(framework, shape, dtype, strides)
        except Unsupported as exc:
            if strides is None:
                pytest.skip(str(exc))
            continue
        made.append((x, expected, strides or contiguous_strides(shape)))
    return made


def type_pattern(x) -> str:
    """A regular expression for how tensorplug's messages name the type of ``x``: its
    ``tp_name``, the bare name of a class defined in Python, the dotted name of most
    extension types."""
    t = type(x)
    return rf"(?:{re.escape(t.__module__)}\.)?{re.escape(t.__qualname__)}"


# ------------------------------------------------------------------- lists ----
@capability("lists")
class TestLists:
    """Lists and tuples of tensors enter kernels as views of every item (zero copy, flags
    kept), list results come back as a Python list of the caller's type, items of different
    frameworks mix in one list (the primary-argument rule looks inside it, in order), bad
    items are named, and an optional list takes None."""

    def test_kernel_sees_every_item(self, tensorplug_adapter, tensorplug_kernels):
        fw = tensorplug_adapter
        made = items(fw)
        xs = [x for x, _, _ in made]
        for form in (list, tuple):
            got = seen_items(tensorplug_kernels, form(xs))
            assert len(got) == len(xs)
            for i, (item, (_, values, strides)) in enumerate(zip(got, made)):
                assert item.dtype == values.dtype.name, f"item {i}: dtype {item.dtype}, expected {values.dtype}"
                assert item.shape == values.shape, f"item {i}: shape {item.shape}, expected {values.shape}"
                assert same_strides(item.strides, strides, values.shape), \
                    f"item {i}: the kernel sees strides {item.strides}, not {strides}"
                assert item.device == device_name(fw.device)
                assert item.read_only is fw.read_only or not read_only_flag(tensorplug_kernels)
        if fw.device.startswith("cpu"):
            total = sum(float(values.sum()) for _, values, _ in made)
            assert tensorplug_kernels.list_sum(xs) == pytest.approx(total)

    def test_items_are_the_callers_memory(self, tensorplug_adapter, tensorplug_kernels):
        fw = tensorplug_adapter
        needs_host(fw)
        (x, ex), (y, ey) = make(fw, (2, 3)), make(fw, (5,))
        if fw.read_only:  # immutable arrays: the written parameter refuses them before the call
            with pytest.raises(ValueError, match=r"'xs' item 0: expected a writable tensor .*read-only"):
                tensorplug_kernels.list_fill([x, y], 7.0)
        else:
            tensorplug_kernels.list_fill([x, y], 7.0)
            ex, ey = ex * 0 + 7, ey * 0 + 7
        assert_values(fw, x, ex, "item 0 after list_fill")
        assert_values(fw, y, ey, "item 1 after list_fill")
        if fw.read_only:
            return
        frozen = fw.read_only_tensor(ex)
        if frozen is None:
            return  # no read-only tensors (the read-only capability says so)
        with pytest.raises(ValueError, match=r"'xs' item 1: expected a writable tensor .*read-only"):
            tensorplug_kernels.list_fill([x, frozen], 1.0)  # refused before the call: nothing is written
        assert_values(fw, x, ex, "a writable item after a refused list_fill")
        assert_values(fw, frozen, ex, "a read-only item after a refused list_fill")

    def test_list_results_are_the_callers_type(self, tensorplug_adapter, tensorplug_kernels):
        import numpy as np

        fw = tensorplug_adapter
        needs_host(fw)
        made = items(fw)
        xs = [x for x, _, _ in made]
        for form in (list, tuple):
            ys = tensorplug_kernels.list_add_one(form(xs))
            assert type(ys) is list, f"list_add_one returned a {type(ys).__name__}, not a list"
            assert [type(y) for y in ys] == [fw.output_type()] * len(xs)
            for i, (y, (_, values, _)) in enumerate(zip(ys, made)):
                assert_values(fw, y, plus_one(values), f"list_add_one(xs)[{i}]")
        # Items the kernel made in its own memory, converted into this framework.
        with tensorplug.output_framework(fw.name):
            ys = tensorplug_kernels.list_arange([3, 0, 2])
        assert type(ys) is list and [type(y) for y in ys] == [fw.output_type()] * 3
        for y, n in zip(ys, (3, 0, 2)):
            assert_values(fw, y, np.arange(n, dtype=np.float32), f"list_arange(...) item of length {n}")
        assert [type(y) for y in tensorplug_kernels.list_arange([1])] == [tensorplug.Tensor]  # no tensor argument

    def test_an_empty_list(self, tensorplug_adapter, tensorplug_kernels):
        fw = tensorplug_adapter
        for empty in ([], ()):
            assert tensorplug_kernels.list_count(empty) == 0
            assert tensorplug_kernels.list_describe(empty) == ""
            assert tensorplug_kernels.list_add_one(empty) == []
            with tensorplug.output_framework(fw.name):
                assert tensorplug_kernels.list_add_one(empty) == []
        needs_host(fw)
        x, expected = make(fw)
        y = tensorplug_kernels.add_list([], x)  # nothing in the list: x is the primary argument
        assert type(y) is fw.output_type()
        assert_values(fw, y, expected + 1, "add_list([], x)")

    def test_items_of_two_frameworks_mix(self, tensorplug_adapter, tensorplug_partner, tensorplug_kernels):
        fw, other = tensorplug_adapter, tensorplug_partner
        needs_host(fw)
        a, ea = make(fw)
        b, eb = make(other)
        for (first, x0, e0), (second, x1, e1) in (((fw, a, ea), (other, b, eb)), ((other, b, eb), (fw, a, ea))):
            what = f"list_add_one([{first.name}, {second.name}])"
            got = seen_items(tensorplug_kernels, [x0, x1])
            if read_only_flag(tensorplug_kernels):
                assert [item.read_only for item in got] == [first.read_only, second.read_only]
            ys = tensorplug_kernels.list_add_one([x0, x1])
            assert [type(y) for y in ys] == [first.output_type()] * 2, \
                f"{what} items are not {first.name} tensors (the first item decides)"
            assert_values(first, ys[0], e0 + 1, f"{what}[0]")
            assert_values(first, ys[1], e1 + 1, f"{what}[1]")
        # The list comes before x: its first item is the primary argument.
        y = tensorplug_kernels.add_list([b], a)
        assert type(y) is other.output_type(), f"add_list([{other.name}], {fw.name}) is not a {other.name} tensor"
        assert_values(other, y, ea + eb, "add_list([b], a)")
        with tensorplug.output_framework(fw.name):
            ys = tensorplug_kernels.list_add_one([b, b])
        assert [type(y) for y in ys] == [fw.output_type()] * 2
        assert_values(fw, ys[1], eb + 1, "list_add_one([b, b]) under output_framework")

    def test_first_cuda_item_is_primary_on_cuda(self, tensorplug_adapter, tensorplug_partner, tensorplug_kernels):
        fw, other = tensorplug_adapter, tensorplug_partner
        device = needs_cuda(fw)
        b, _ = make(other)
        c, expected = make(fw, device=device)
        got = seen_items(tensorplug_kernels, [b, c])
        assert [item.device for item in got] == [device_name(other.device), device_name(device)]
        y, stream = tensorplug_kernels.list_alloc_last([b, c])
        assert type(y) is fw.output_type(), f"the CUDA item's framework ({fw.name}) did not allocate the result"
        assert seen(tensorplug_kernels, y)[:2] == ("float32", expected.shape)
        assert seen(tensorplug_kernels, y).device == device_name(device)
        assert stream == (fw.current_stream(device) or 0)

    def test_errors_name_the_item(self, tensorplug_adapter, tensorplug_kernels):
        fw = tensorplug_adapter
        x, _ = make(fw)
        before = call_state(device_name(fw.device))
        label = r"list_describe\(\) argument 1 'xs'"
        bad = [  # (the argument, its message as a regular expression)
            ([x, x, x, "s"], rf"{label} item 3: expected a tensor, got str"),
            ((x, None), rf"{label} item 1: expected a tensor, got NoneType"),
            ([[x]], rf"{label} item 0: expected a tensor, got list"),
            ([x, 3], rf"{label} item 1: expected a tensor, got int"),
            (x, rf"{label}: expected a list of tensors, got {type_pattern(x)}"),
        ]
        for xs, message in bad:
            with pytest.raises(TypeError) as info:
                tensorplug_kernels.list_describe(xs)
            assert re.fullmatch(message, str(info.value)), f"{str(info.value)!r} does not match {message!r}"
            assert call_state(device_name(fw.device)) == before
        with pytest.raises(TypeError, match=r"^add_list\(\) argument 2 'x': expected a tensor, got list$"):
            tensorplug_kernels.add_list([x], [x])

    def test_optional_lists_take_none(self, tensorplug_adapter, tensorplug_kernels):
        fw = tensorplug_adapter
        x, _ = make(fw)
        for count in (tensorplug_kernels.list_count, tensorplug_kernels.vector_count):  # TensorViewList, vector
            name = count.__name__
            assert count(None) == -1
            assert count([]) == 0
            assert count([x, x, x]) == 3
            assert count((x,)) == 1
            with pytest.raises(TypeError, match=rf"^{name}\(\) argument 1 'xs' item 1: expected a tensor, got int$"):
                count([x, 1])


# -------------------------------------------------------------------- ints ----
INT_ARRAY_DTYPES = ("int64", "int32", "uint8")  # int64 in place, the others converted


def join(values) -> str:
    return ",".join(str(int(v)) for v in values)


@capability("ints")
class TestInts:
    """Integer-array parameters (shapes, strides, index lists) take the framework's own
    shape object and its 1-d integer CPU arrays; other arrays are refused naming the
    argument; an optional int array takes None."""

    def test_the_frameworks_shape_is_an_int_array(self, tensorplug_adapter, tensorplug_kernels):
        fw = tensorplug_adapter
        for shape in ((2, 3, 4), (5,), ()):
            x, _ = make(fw, shape)
            own = fw.shape_of(x)
            if own is None:
                pytest.skip(f"{NOT_PROVIDED}: {fw.name} tensors have no shape object of their own")
            got = tensorplug_kernels.echo_ints(own)
            assert type(got) is list and got == list(shape), f"echo_ints({own!r}) gave {got!r}"
            assert all(type(v) is int for v in got)
            assert tensorplug_kernels.join_ints(own) == tensorplug_kernels.join_vector(own) == join(shape)

    @pytest.mark.parametrize("dtype", INT_ARRAY_DTYPES)
    def test_1d_integer_arrays(self, tensorplug_adapter, tensorplug_kernels, dtype):
        fw = tensorplug_adapter
        needs_host(fw)
        x, expected = make(fw, (5,), dtype)
        got = tensorplug_kernels.echo_ints(x)
        assert got == expected.tolist(), f"echo_ints of a {dtype} array gave {got}, expected {expected.tolist()}"
        assert tensorplug_kernels.join_ints(x) == tensorplug_kernels.join_vector(x) == join(expected)
        empty, _ = make(fw, (0,), dtype)
        assert tensorplug_kernels.echo_ints(empty) == []

    @pytest.mark.parametrize("dtype", ["int64", "int32"])
    def test_strided_integer_arrays(self, tensorplug_adapter, tensorplug_kernels, dtype):
        fw = tensorplug_adapter
        needs_host(fw)
        x, expected = make(fw, (4,), dtype, strides=(3,))
        assert tensorplug_kernels.echo_ints(x) == expected.tolist()
        assert tensorplug_kernels.join_ints(x) == join(expected)

    def test_other_arrays_are_refused_naming_the_argument(self, tensorplug_adapter, tensorplug_kernels):
        fw = tensorplug_adapter
        prefix = "echo_ints() argument 1 'values': expected a list of ints, got "
        int_dtype = "int32"
        cases = [(make(fw, (2, 3), int_dtype)[0], "a 2-d array (int arrays are 1-d)"),
                 (make(fw, (), int_dtype)[0], "a 0-d array (int arrays are 1-d)"),
                 (make(fw, (3,), "float32")[0], "an array of dtype float32"),
                 (make(fw, (3,), "bool")[0], "an array of dtype bool")]
        before = call_state(device_name(fw.device))
        for x, problem in cases:
            with pytest.raises(TypeError) as info:
                tensorplug_kernels.echo_ints(x)
            assert str(info.value) == prefix + problem
            assert call_state(device_name(fw.device)) == before
        x, _ = make(fw, (3,), int_dtype)
        with pytest.raises(TypeError, match=rf"^echo_ints\(\) argument 1 'values' item 1: expected an int, "
                                            rf"got {type_pattern(x)}$"):
            tensorplug_kernels.echo_ints([1, x])

    def test_int_arrays_on_cuda_are_refused(self, tensorplug_adapter, tensorplug_kernels):
        fw = tensorplug_adapter
        device = needs_cuda(fw)
        x, _ = make(fw, (3,), "int32", device=device)
        with pytest.raises(TypeError) as info:
            tensorplug_kernels.echo_ints(x)
        assert str(info.value) == ("echo_ints() argument 1 'values': expected a list of ints, got an array on "
                                   f"{device_name(device)} (int arrays are read on the CPU)")

    def test_optional_int_arrays_take_none(self, tensorplug_adapter, tensorplug_kernels):
        fw = tensorplug_adapter
        for join_kernel in (tensorplug_kernels.join_ints, tensorplug_kernels.join_vector):  # IntArrayView, vector
            assert join_kernel(None) == "none"
            assert join_kernel([]) == ""
            assert join_kernel((7, -2)) == "7,-2"
        needs_host(fw)
        x, expected = make(fw, (3,), "int32")
        assert tensorplug_kernels.join_ints(x) == join(expected)
