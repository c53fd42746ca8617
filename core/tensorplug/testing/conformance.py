"""The tensorplug conformance kit: what every adapter must do, one test class per capability.

Run it against an adapter::

    pytest --pyargs tensorplug.testing.conformance --tensorplug-adapter=NAME

or run it from a test module of your own with ``from tensorplug.testing.conformance import *``.
Each test gets one adapter's :class:`~tensorplug.testing.Framework` (fixture
``tensorplug_adapter``) or an ordered pair of them (``tensorplug_pair``) and the kit's
kernels (``tensorplug_kernels``, from ``kernels.cc``). Tensors are made on the framework's
own device (``Framework.device``); the kernels that read or write elements are host
kernels, so those checks run on CPU tensors, while the ``*_on_cuda`` checks use kernels that
never touch the data and skip with "no CUDA device" where there is none.

Over 500 lines: the kit is one module so that ``--pyargs tensorplug.testing.conformance``
collects every capability with one name; the newer capabilities live in modules of their
own, imported here (``conformance_compiler``: "compiler"; ``conformance_lists``: "lists"
and "ints"; ``conformance_gradients``: "gradients"), and the helpers they share in ``checks``.
"""

from __future__ import annotations

import builtins
import contextlib

import pytest

import tensorplug
from tensorplug import _types
from tensorplug.testing import (DTYPES, TensorplugFramework, Unsupported, capability, make_tensor, numpy_view,
                                run_isolated, sample)
from tensorplug.testing.checks import (assert_values, call_state, device_name, make, needs_cuda, needs_host,
                                       plus_one, read_only_flag, same_strides, seen)
from tensorplug.testing.framework import NEVER_REFUSED, REFUSABLE_LAYOUTS, refusable

from tensorplug.testing.conformance_compiler import TestCompiler  # noqa: E402  (the "compiler" capability)
from tensorplug.testing.conformance_lists import TestInts, TestLists  # noqa: E402  (the "lists" and "ints" ones)
from tensorplug.testing.conformance_gradients import TestGradients  # noqa: E402  (the "gradients" capability)

__all__ = ["TestExchange", "TestDtypes", "TestLayouts", "TestReadOnly", "TestStream", "TestAllocator", "TestOutput",
           "TestErrors", "TestMixed", "TestLists", "TestInts", "TestCompiler",
           "TestGradients"]

# name: (shape, strides in elements)
LAYOUTS = {
    "0-d": ((), ()),
    "zero-size": ((0, 3), (3, 1)),
    "contiguous": ((3, 4), (4, 1)),
    "transposed": ((4, 3), (1, 4)),
    "sliced": ((3, 3), (8, 2)),
    "negative": ((3, 4), (-4, 1)),
    "reversed": ((5,), (-1,)),
    "broadcast": ((3, 4), (0, 1)),
}

assert set(LAYOUTS) == {*REFUSABLE_LAYOUTS, *NEVER_REFUSED}
# Layouts whose elements share memory: the core refuses them for written parameters, for
# every framework (docs/cpp.md, MutableView).
OVERLAPPING_LAYOUTS = ("broadcast",)

# What a kernel or an adapter may raise to refuse a tensor: a clear error, never garbage.
# A refusal passes a check only when the framework declares it (Framework.refusals).
CLEAR_ERRORS = (ValueError, TypeError, BufferError, NotImplementedError, RuntimeError)

# Every error kind of the one list (c_api.h's TP_ERROR_KINDS) must keep its type and message.
ERROR_KINDS = _types.ERROR_KINDS

# Bytes FromEnvAlloc asks for in alloc_huge: float32 [2**20, 2**20, 2**10].
HUGE_BYTES = 4 << 50


# ----------------------------------------------------------------- helpers ----
def declared(framework, what: str):
    """The Refusal ``framework`` declares for ``what`` (a layout, a dtype, "read-only"), or
    None; a declaration the kit does not know, or of a layout that may never be refused,
    fails the check."""
    refusals = framework.refusals()
    wrong = [name for name in refusals if name not in refusable()]
    if wrong:
        pytest.fail(f"{framework.name} declares refusals of {', '.join(map(repr, wrong))}; an adapter may refuse "
                    f"only {', '.join(refusable())} (never {' or '.join(NEVER_REFUSED)} tensors)", pytrace=False)
    return refusals.get(what)


def check_refusal(framework, what: str, error: str, mro, message: str) -> None:
    """An error where a result was expected: it passes only as the declared refusal of ``what``."""
    import re

    refusal = declared(framework, what)
    if refusal is None:
        pytest.fail(f"{framework.name} refused {what} tensors with {error}: {message} (an undeclared refusal: "
                    f"fix the adapter, or declare it in its Framework's refusals())", pytrace=False)
    assert refusal.error.__name__ in mro, (f"{framework.name} refused {what} tensors with {error}: {message}; "
                                           f"it declares {refusal.error.__name__}")
    assert re.search(refusal.match, message), (f"{framework.name} refused {what} tensors with the message "
                                               f"{message!r}; it declares one matching {refusal.match!r}")


def make_or_refused(framework, kernels, what, shape=(2, 3), dtype="float32", strides=None, device=None):
    """make_tensor; when the framework cannot make the tensor and declares the refusal of
    ``what``, asserts that refusal (the conversion of such a numpy tensor into the
    framework) and returns None; otherwise it skips with the reason."""
    try:
        return make_tensor(framework, shape, dtype, strides, device)
    except Unsupported as exc:
        if declared(framework, what) is None:
            pytest.skip(str(exc))
    assert_conversion_refused(framework, kernels, what, reference_tensor(what))
    return None


def reference_tensor(what: str):
    """The numpy tensor the kit converts into a framework to check ``what`` (a layout or a dtype)."""
    import numpy as np

    if what in LAYOUTS:
        shape, strides = LAYOUTS[what]
        base = np.arange(32, dtype=np.float32)
        offset = 16 if any(s < 0 for s in strides) else 0
        return numpy_view(base, shape, strides, offset) if shape else base[:1].reshape(())
    return sample((2, 3), what)


def convert_into(framework, kernels, array):
    """``identity(array)`` under ``output_framework(framework.name)``, in a child process
    (an abort there fails the check instead of ending the run): run_isolated's outcome,
    with ("ok", (type name, values as numpy))."""
    def convert():
        with tensorplug.output_framework(framework.name):
            y = kernels.identity(array)
        return type(y).__qualname__, framework.to_numpy(y)

    outcome = run_isolated(convert, fork=framework.fork_safe)
    what = f"returning a {array.dtype} tensor of shape {array.shape} as a {framework.name} tensor"
    if outcome[0] == "crashed":
        pytest.fail(f"{what} killed the process ({outcome[1]})")
    if outcome[0] == "timeout":
        pytest.fail(f"{what} hung for {outcome[1]} s (a framework that cannot work in a forked child process "
                    "sets Framework.fork_safe = False)")
    if outcome[0] == "raised":
        mro, message = outcome[1], outcome[2]
        clear = any(c.__name__ in mro for c in CLEAR_ERRORS) and "MemoryError" not in mro and message
        assert clear, f"{what} raised {mro[0]}: {message}"
    return outcome


def assert_conversion_refused(framework, kernels, what, array) -> None:
    outcome = convert_into(framework, kernels, array)
    if outcome[0] == "ok":
        pytest.fail(f"{framework.name} declares it refuses {what} tensors, but converted one", pytrace=False)
    check_refusal(framework, what, outcome[1][0], outcome[1], outcome[2])


def writes_refused(framework, kernels, x, expected, what) -> bool:
    """For a framework whose tensors are all read-only: asserts that a write through ``x``
    is refused and changes nothing, and returns True. False for other frameworks."""
    if not framework.read_only:
        return False
    with pytest.raises(ValueError, match="read-only"):
        kernels.fill(x, 7.0)
    assert_values(framework, x, expected, f"{what} after a refused write")
    return True


# ---------------------------------------------------------------- exchange ----
@capability("exchange")
class TestExchange:
    """Zero copy in both directions: kernels work on the caller's memory."""

    def test_kernel_writes_reach_the_callers_tensor(self, tensorplug_adapter, tensorplug_kernels):
        fw = tensorplug_adapter
        needs_host(fw)
        x, expected = make(fw)
        if writes_refused(fw, tensorplug_kernels, x, expected, "an immutable tensor"):
            return
        tensorplug_kernels.fill(x, 7.0)
        assert_values(fw, x, expected * 0 + 7, "the caller's tensor after fill(x, 7)")

    def test_kernel_sees_the_callers_memory(self, tensorplug_adapter, tensorplug_kernels):
        fw = tensorplug_adapter
        x, _ = make(fw)
        address = fw.data_ptr(x)
        if address is None:
            pytest.skip(f"{fw.name}: no way to tell a tensor's address")
        assert tensorplug_kernels.data_ptr(x) == address, "the kernel got a copy, not the caller's memory"

    def test_identity_returns_the_callers_type_sharing_memory(self, tensorplug_adapter, tensorplug_kernels):
        fw = tensorplug_adapter
        x, expected = make(fw)
        y = tensorplug_kernels.identity(x)
        assert type(y) is fw.output_type()
        assert_values(fw, y, expected, "identity(x)")
        address = fw.data_ptr(x)
        if fw.copies_on_import:  # declared: the result is the framework's copy of x
            assert address is None or fw.data_ptr(y) != address, (
                f"{fw.name} declares that it copies the tensors it imports (Framework.copies_on_import), but "
                "identity(x) shares x's memory")
            if not fw.read_only and fw.device.startswith("cpu"):
                tensorplug_kernels.fill(y, 3.0)
                assert_values(fw, x, expected, "x after a kernel wrote identity(x), a copy")
            return
        if address is not None:
            assert fw.data_ptr(y) == address, ("identity(x) is a copy of x (a framework that copies every "
                                               "tensor it imports declares Framework.copies_on_import)")
        if not fw.read_only and fw.device.startswith("cpu"):
            tensorplug_kernels.fill(y, 3.0)
            assert_values(fw, x, expected * 0 + 3, "x after a kernel wrote identity(x)")

    def test_cuda_tensors_are_exchanged_in_place_on_cuda(self, tensorplug_adapter, tensorplug_kernels):
        fw = tensorplug_adapter
        device = needs_cuda(fw)
        x, expected = make(fw, device=device)
        assert seen(tensorplug_kernels, x).device == device_name(device)
        address = fw.data_ptr(x)
        assert address is None or tensorplug_kernels.data_ptr(x) == address
        y = tensorplug_kernels.identity(x)
        assert type(y) is fw.output_type()
        assert seen(tensorplug_kernels, y).device == device_name(device)
        assert address is None or fw.data_ptr(y) == address
        assert_values(fw, y, expected, "identity(x) on cuda")


# ------------------------------------------------------------------ dtypes ----
@capability("dtypes")
@pytest.mark.parametrize("dtype", DTYPES)
class TestDtypes:
    """Every dtype the framework has enters kernels as itself and comes back with its values."""

    def test_kernel_reads_the_dtype(self, tensorplug_adapter, tensorplug_kernels, dtype):
        fw = tensorplug_adapter
        needs_host(fw)
        made = make_or_refused(fw, tensorplug_kernels, dtype, dtype=dtype)
        if made is None:
            return
        x, expected = made
        assert seen(tensorplug_kernels, x).dtype == dtype
        assert tensorplug_kernels.strided_sum(x) == pytest.approx(float(expected.real.sum()))
        y = tensorplug_kernels.add_one(x)
        assert type(y) is fw.output_type()
        assert seen(tensorplug_kernels, y).dtype == dtype
        assert_values(fw, y, plus_one(expected), f"add_one(x) of {dtype}")

    def test_dtype_round_trips(self, tensorplug_adapter, tensorplug_kernels, dtype):
        fw = tensorplug_adapter
        made = make_or_refused(fw, tensorplug_kernels, dtype, dtype=dtype)
        if made is None:
            return
        x, expected = made
        y = tensorplug_kernels.identity(x)
        assert type(y) is fw.output_type()
        assert seen(tensorplug_kernels, y).dtype == dtype
        assert_values(fw, y, expected, f"identity(x) of {dtype}")


# ----------------------------------------------------------------- layouts ----
@capability("layouts")
@pytest.mark.parametrize("layout", list(LAYOUTS))
class TestLayouts:
    """0-d, zero-size, non-contiguous, negative- and zero-stride views: correct, or the
    refusal the framework declares; never garbage, never an abort, never an undeclared
    refusal, and contiguous and 0-d tensors are never refused."""

    def test_kernel_sees_the_layout(self, tensorplug_adapter, tensorplug_kernels, layout):
        fw = tensorplug_adapter
        shape, strides = LAYOUTS[layout]
        made = make_or_refused(fw, tensorplug_kernels, layout, shape, "float32", strides)
        if made is None:
            return
        x, expected = made
        try:
            got = seen(tensorplug_kernels, x)
        except CLEAR_ERRORS as exc:
            return check_refusal(fw, layout, type(exc).__name__, [c.__name__ for c in type(exc).__mro__], str(exc))
        assert got.dtype == "float32"
        assert got.shape == shape
        assert same_strides(got.strides, strides, shape), f"the kernel sees strides {got.strides}, not {strides}"
        assert got.device == device_name(fw.device)
        assert got.read_only is fw.read_only or not read_only_flag(tensorplug_kernels)
        if fw.device.startswith("cpu"):
            assert tensorplug_kernels.strided_sum(x) == pytest.approx(float(expected.sum()))

    def test_kernel_writes_follow_the_layout(self, tensorplug_adapter, tensorplug_kernels, layout):
        fw = tensorplug_adapter
        needs_host(fw)
        shape, strides = LAYOUTS[layout]
        made = make_or_refused(fw, tensorplug_kernels, layout, shape, "float32", strides)
        if made is None:
            return
        x, expected = made
        if writes_refused(fw, tensorplug_kernels, x, expected, f"an immutable {layout} tensor"):
            return
        if layout in OVERLAPPING_LAYOUTS:
            with pytest.raises(ValueError, match="expected a tensor whose elements do not overlap"):
                tensorplug_kernels.fill(x, 7.0)
            assert_values(fw, x, expected, f"a {layout} view after a refused write")
            return
        try:
            tensorplug_kernels.fill(x, 7.0)
        except CLEAR_ERRORS as exc:
            return check_refusal(fw, layout, type(exc).__name__, [c.__name__ for c in type(exc).__mro__], str(exc))
        assert_values(fw, x, expected * 0 + 7, f"a {layout} view after fill(x, 7)")

    def test_views_convert_into_the_framework(self, tensorplug_adapter, tensorplug_kernels, layout):
        """A numpy view returned as this framework's tensor (``output_framework``), in a
        child process: an abort there fails this test instead of ending the run. A layout
        the framework declares refused must be refused, with the declared error."""
        np = pytest.importorskip("numpy", reason="numpy not installed")
        fw = tensorplug_adapter
        needs_host(fw)
        view = reference_tensor(layout)
        if declared(fw, layout):
            return assert_conversion_refused(fw, tensorplug_kernels, layout, view)
        outcome = convert_into(fw, tensorplug_kernels, view)
        if outcome[0] == "raised":
            return check_refusal(fw, layout, outcome[1][0], outcome[1], outcome[2])
        type_name, values = outcome[1]
        assert type_name == fw.output_type().__qualname__
        assert values.shape == view.shape
        np.testing.assert_array_equal(values, view)


# --------------------------------------------------------------- read-only ----
@capability("read-only")
class TestReadOnly:
    """Immutable and read-only tensors arrive flagged read-only; kernels cannot write them."""

    def test_kernel_sees_the_read_only_flag(self, tensorplug_adapter, tensorplug_kernels):
        fw = tensorplug_adapter
        x, _ = make(fw)
        assert tensorplug_kernels.is_read_only(x) is fw.read_only

    def test_writes_through_read_only_tensors_raise(self, tensorplug_adapter, tensorplug_kernels):
        fw = tensorplug_adapter
        needs_host(fw)
        _, expected = make(fw)
        if declared(fw, "read-only"):
            frozen = expected.copy()
            frozen.flags.writeable = False
            return assert_conversion_refused(fw, tensorplug_kernels, "read-only", frozen)
        x = fw.read_only_tensor(expected)
        if x is None:
            pytest.skip(f"{fw.name} has no read-only tensors")
        if read_only_flag(tensorplug_kernels):
            assert tensorplug_kernels.is_read_only(x) is True
        with pytest.raises(ValueError, match="read-only"):
            tensorplug_kernels.fill(x, 9.0)
        assert_values(fw, x, expected, "a read-only tensor after a refused write")


# ------------------------------------------------------------------ stream ----
@capability("stream")
class TestStream:
    """Kernels see the current stream of the primary tensor's device: on the CPU the one set
    with use_raw_stream, on a GPU the framework's current stream (unless overridden)."""

    def test_cpu_kernels_see_use_raw_stream(self, tensorplug_adapter, tensorplug_kernels):
        fw = tensorplug_adapter
        needs_host(fw)
        x, _ = make(fw)
        before = tensorplug_kernels.stream_of(x)
        assert before == (tensorplug.get_raw_stream("cpu") or 0)
        with tensorplug.use_raw_stream("cpu", 0x5EED):
            assert tensorplug_kernels.stream_of(x) == 0x5EED
            with tensorplug.use_raw_stream("cpu", 0xFEED):
                assert tensorplug_kernels.stream_of(x) == 0xFEED
            assert tensorplug_kernels.stream_of(x) == 0x5EED
        assert tensorplug_kernels.stream_of(x) == before

    def test_kernels_see_the_frameworks_stream_on_cuda(self, tensorplug_adapter, tensorplug_kernels):
        fw = tensorplug_adapter
        device = needs_cuda(fw)
        x, _ = make(fw, device=device)
        assert tensorplug_kernels.stream_of(x) == (fw.current_stream(device) or 0)
        with tensorplug.use_raw_stream(device, 0x5EED):
            assert tensorplug_kernels.stream_of(x) == 0x5EED
        using = fw.stream(device)
        if using is None:
            return  # the framework has no streams of its own
        with using as (stream, handle):
            assert fw.current_stream(device) == handle
            assert tensorplug_kernels.stream_of(x) == handle
        with tensorplug.use_stream(stream):
            assert tensorplug_kernels.stream_of(x) == handle
        assert tensorplug_kernels.stream_of(x) == (fw.current_stream(device) or 0)


# --------------------------------------------------------------- allocator ----
@capability("allocator")
class TestAllocator:
    """Tensor::FromEnvAlloc allocates through the caller's framework."""

    def test_allocated_tensors_are_the_callers_type(self, tensorplug_adapter, tensorplug_kernels):
        fw = tensorplug_adapter
        for device in dict.fromkeys([fw.device, *fw.cuda_devices()[:1]]):
            x, expected = make(fw, device=device)
            y = tensorplug_kernels.alloc_like(x)
            assert type(y) is fw.output_type()
            assert seen(tensorplug_kernels, y)[:2] == ("float32", expected.shape)
            assert seen(tensorplug_kernels, y).device == device_name(device)
            if device.startswith("cpu"):
                assert_values(fw, tensorplug_kernels.add_one(x), expected + 1, "add_one(x)")

    def test_memory_comes_from_the_frameworks_allocator(self, tensorplug_adapter, tensorplug_kernels):
        fw = tensorplug_adapter
        devices = [d for d in dict.fromkeys([fw.device, *fw.cuda_devices()[:1]]) if fw.allocation_counter(d)]
        if not devices:
            pytest.skip(f"{fw.name} does not count the memory it allocates on {fw.device}")
        for device in devices:
            x, _ = make(fw, (256, 1024), device=device)  # 1 MiB
            with fw.allocation_counter(device) as allocated:
                y = tensorplug_kernels.alloc_like(x)
                assert allocated() >= 1 << 20, f"{fw.name}'s allocator did not hand out the result on {device}"
            del y

    def test_allocation_failure_is_a_memory_error(self, tensorplug_adapter, tensorplug_kernels):
        fw = tensorplug_adapter
        x, _ = make(fw)
        device = device_name(fw.device)
        before = call_state(device)
        with pytest.raises(MemoryError, match=rf"{HUGE_BYTES} bytes.*{device}"):
            tensorplug_kernels.alloc_huge(x)
        assert call_state(device) == before


# ------------------------------------------------------------------ output ----
@capability("output")
class TestOutput:
    """Results come back as the primary framework's type; output_framework overrides it."""

    def test_tuple_results_are_the_callers_type(self, tensorplug_adapter, tensorplug_kernels):
        fw = tensorplug_adapter
        needs_host(fw)
        x, expected = make(fw)
        first, second = tensorplug_kernels.pair(x)
        for y in (first, second):
            assert type(y) is fw.output_type()
            assert_values(fw, y, expected + 1, "pair(x)")

    def test_output_framework_overrides_the_result_type(self, tensorplug_adapter, tensorplug_kernels):
        import numpy as np

        fw = tensorplug_adapter
        needs_host(fw)
        source = TensorplugFramework()
        if source.missing():
            pytest.skip(source.missing())
        other, expected = make(source, (64, 1024))
        counter = fw.allocation_counter(fw.device)
        with tensorplug.output_framework(fw.name), counter or contextlib.nullcontext() as allocated:
            w = tensorplug_kernels.identity(other)  # a tensorplug.Tensor in, this framework out
            y = tensorplug_kernels.add_one(other)  # allocated by this framework
            z = tensorplug_kernels.arange(5)  # no tensor argument at all
            if allocated is not None:  # the 256 KiB of y came from this framework's allocator
                assert allocated() >= expected.nbytes, f"add_one(x) under output_framework({fw.name!r}) was not " \
                                                       f"allocated by {fw.name}"
        assert type(w) is fw.output_type() and type(y) is fw.output_type() and type(z) is fw.output_type()
        assert_values(fw, w, expected, "identity(x) under output_framework")
        assert_values(fw, y, expected + 1, "add_one(x) under output_framework")
        assert_values(fw, z, np.arange(5, dtype=np.float32), "arange(5)")
        x, _ = make(fw)
        with tensorplug.output_framework("tensorplug"):
            assert type(tensorplug_kernels.add_one(x)) is tensorplug.Tensor


# ------------------------------------------------------------------ errors ----
@capability("errors")
class TestErrors:
    """Kernel errors reach Python as the exception their kind names, message intact; no
    call, successful or failed, changes the stream or allocator state."""

    def test_kernel_exceptions_keep_type_and_message(self, tensorplug_adapter, tensorplug_kernels):
        fw = tensorplug_adapter
        x, _ = make(fw)
        for kind in ERROR_KINDS:
            message = f"{kind} from a kernel: überall, 100% intact"
            with pytest.raises(getattr(builtins, kind)) as info:
                tensorplug_kernels.raise_error(x, kind, message)
            assert type(info.value) is getattr(builtins, kind)
            assert info.value.args[0] == message
        with pytest.raises(RuntimeError) as info:
            tensorplug_kernels.raise_error(x, "KernelSpecificError", "unknown kinds become RuntimeError")
        assert str(info.value) == "KernelSpecificError: unknown kinds become RuntimeError"

    @pytest.mark.parametrize("where", ["own-device", "cuda"])
    def test_stream_and_allocator_state_survive_every_call(self, tensorplug_adapter, tensorplug_kernels, where):
        """On the framework's own device and on CUDA, where a call sets the stream."""
        fw = tensorplug_adapter
        device = fw.device if where == "own-device" else needs_cuda(fw)
        x, _ = make(fw, device=device)
        device = device_name(device)
        calls = {
            "identity": lambda: tensorplug_kernels.identity(x),
            "alloc_like": lambda: tensorplug_kernels.alloc_like(x),
            "stream_of": lambda: tensorplug_kernels.stream_of(x),
            "raise_error": lambda: tensorplug_kernels.raise_error(x, "ValueError", "boom"),
            "raise_after_alloc": lambda: tensorplug_kernels.raise_after_alloc(x, "boom"),
            "alloc_huge": lambda: tensorplug_kernels.alloc_huge(x),
            "a bad argument": lambda: tensorplug_kernels.data_ptr("not a tensor"),
            "a bad arity": lambda: tensorplug_kernels.add(x),
        }
        # A library without stream_of (tvm-ffi's: no CPU stream) still has every other call checked.
        sees_streams = "stream_of" not in getattr(tensorplug_kernels, "lacks", {})
        if not sees_streams:
            del calls["stream_of"]
        for outer in (None, 0x7357):
            with tensorplug.use_raw_stream(device, outer) if outer else contextlib.nullcontext():
                before = call_state(device, "cpu", "cuda:0")
                for name, call in calls.items():
                    with contextlib.suppress(Exception):
                        call()
                    assert call_state(device, "cpu", "cuda:0") == before, f"{name} left the state changed"
                if sees_streams:
                    assert tensorplug_kernels.stream_of(x) == (outer or fw.current_stream(device) or 0)


# ------------------------------------------------------------------- mixed ----
@capability("mixed")
class TestMixed:
    """The primary argument is the first tensor on a non-CPU device, else the first tensor;
    it alone decides the output type (and the stream and allocator)."""

    def test_first_tensor_decides_the_result_type(self, tensorplug_pair, tensorplug_kernels):
        first, second = tensorplug_pair
        needs_host(first)
        needs_host(second)
        a, expected_a = make(first)
        b, expected_b = make(second)
        y = tensorplug_kernels.add(a, b)
        assert type(y) is first.output_type(), f"add({first.name}, {second.name}) is not a {first.name} tensor"
        assert_values(first, y, expected_a + expected_b, f"add({first.name}, {second.name})")
        with tensorplug.output_framework(second.name):
            z = tensorplug_kernels.add(a, b)
        assert type(z) is second.output_type()
        assert_values(second, z, expected_a + expected_b, "add(a, b) under output_framework")

    def test_first_cuda_tensor_is_primary_on_cuda(self, tensorplug_pair, tensorplug_kernels):
        first, second = tensorplug_pair
        device = needs_cuda(second)
        needs_host(first, "cpu")
        a, _ = make(first, device="cpu")
        b, expected = make(second, device=device)
        y, stream = tensorplug_kernels.alloc_on(a, b)
        assert type(y) is second.output_type()
        assert seen(tensorplug_kernels, y)[:2] == ("float32", expected.shape)
        assert seen(tensorplug_kernels, y).device == device_name(device)
        assert stream == (second.current_stream(device) or 0)
