"""The rules tensorplug applies to non-CPU tensors, tested on every machine with the
test-only fake-device adapter (tests/support/fake_device.py): the primary argument (the first
non-CPU tensor, else the first tensor), the stream a call runs on and its restoration
after any call, failing ones included, the allocator FromEnvAlloc binds, and allocation
under ``output_framework``. The real GPU tests (tests/gpu/test_cuda.py) stay for GPU machines.
"""

from __future__ import annotations

import math

import pytest

import tensorplug
from tensorplug import _core

np = pytest.importorskip("numpy", reason="numpy not installed")

from fake_device import CPU, CUDA, FakeDeviceAdapter, registered  # noqa: E402


@pytest.fixture
def gpu():
    """One fake-GPU adapter, registered for the test."""
    adapter = FakeDeviceAdapter("fakegpu", stream_base=0xC0DA00)
    with registered(adapter):
        yield adapter


@pytest.fixture
def other_gpu():
    """A second fake-GPU framework with streams of its own."""
    adapter = FakeDeviceAdapter("othergpu", stream_base=0xBEEF00)
    with registered(adapter):
        yield adapter


def state(*devices):
    return (_core.bound_allocator(), *(tensorplug.get_raw_stream(d) for d in devices))


def ones(shape=(2, 3)):
    return np.ones(shape, np.float32)


# ----------------------------------------------------------- the fake itself ----
def test_fake_tensors_enter_kernels_on_their_device(gpu, tensorplug_kernels):
    x = gpu.tensor(ones(), (CUDA, 1))
    assert tensorplug_kernels.describe(x) == "float32|2,3|3,1|cuda:1|0"
    assert tensorplug_kernels.data_ptr(x) == x.data_ptr  # the caller's memory, no copy
    with pytest.raises(ValueError, match="strided_sum: the test kernels read host memory only, got a tensor on "
                                         "cuda:1"):
        tensorplug_kernels.strided_sum(x)


# ------------------------------------------------------- the primary argument ----
def test_the_first_non_cpu_tensor_is_primary(gpu, tensorplug_kernels):
    a = ones()  # a numpy array on the CPU comes first
    b = gpu.tensor(ones(), (CUDA, 0))
    y, stream = tensorplug_kernels.alloc_on(a, b)
    assert type(y) is gpu.tensor_type and y.device == (CUDA, 0)
    assert stream == 0xC0DA00
    assert gpu.stream_queries == [(CUDA, 0)]
    assert gpu.allocations == [((2, 3), "float32", "cuda:0")]
    # The result type follows the primary too, whatever position the GPU tensor has.
    assert type(tensorplug_kernels.identity(b)) is gpu.tensor_type
    z = tensorplug_kernels.alloc_on(b, a)[0]  # allocates like its second argument, on the CPU ...
    assert type(z) is gpu.tensor_type and z.device == (CPU, 0)  # ... through the primary's framework
    assert gpu.allocations[-1] == ((2, 3), "float32", "cpu:0")


def test_among_non_cpu_tensors_the_first_is_primary(gpu, other_gpu, tensorplug_kernels):
    a = gpu.tensor(ones(), (CUDA, 1))
    b = other_gpu.tensor(ones(), (CUDA, 1))
    y, stream = tensorplug_kernels.alloc_on(a, b)
    assert type(y) is gpu.tensor_type and stream == 0xC0DA01
    assert gpu.stream_queries == [(CUDA, 1)] and other_gpu.stream_queries == []
    assert len(gpu.allocations) == 1 and other_gpu.allocations == []
    y, stream = tensorplug_kernels.alloc_on(b, a)
    assert type(y) is other_gpu.tensor_type and stream == 0xBEEF01
    assert other_gpu.stream_queries == [(CUDA, 1)]


def test_cpu_tensors_of_the_gpu_framework_are_not_primary_over_a_later_gpu_tensor(gpu, other_gpu,
                                                                                     tensorplug_kernels):
    a = gpu.tensor(ones(), (CPU, 0))
    b = other_gpu.tensor(ones(), (CUDA, 0))
    y, stream = tensorplug_kernels.alloc_on(a, b)
    assert type(y) is other_gpu.tensor_type and stream == 0xBEEF00
    assert gpu.stream_queries == [] and gpu.allocations == []


# ------------------------------------------------------------------- streams ----
def test_kernels_run_on_the_primary_frameworks_current_stream(gpu, tensorplug_kernels):
    x = gpu.tensor(ones(), (CUDA, 0))
    assert tensorplug_kernels.stream_of(x) == 0xC0DA00
    gpu.streams[0] = 0x5151
    assert tensorplug_kernels.stream_of(x) == 0x5151
    assert tensorplug_kernels.stream_of(gpu.tensor(ones(), (CUDA, 1))) == 0xC0DA01
    assert gpu.stream_queries == [(CUDA, 0), (CUDA, 0), (CUDA, 1)]
    assert tensorplug.get_raw_stream("cuda:0") is None  # the call's stream is not left behind


def test_stream_contexts_override_the_framework(gpu, tensorplug_kernels):
    x = gpu.tensor(ones(), (CUDA, 0))
    with tensorplug.use_raw_stream("cuda:0", 0xAAA):
        assert tensorplug_kernels.stream_of(x) == 0xAAA
        with tensorplug.use_stream(gpu.new_stream(0, 0xBBB)):
            assert tensorplug_kernels.stream_of(x) == 0xBBB
        assert tensorplug_kernels.stream_of(x) == 0xAAA
    assert gpu.stream_queries == []  # an explicit stream is never asked of the framework
    with tensorplug.use_raw_stream("cuda:1", 0xCCC):  # another device's override changes nothing here
        assert tensorplug_kernels.stream_of(x) == 0xC0DA00
    assert gpu.stream_queries == [(CUDA, 0)]


@pytest.mark.parametrize("outer", [None, 0x7357], ids=["no-context", "in-use_raw_stream"])
def test_every_call_restores_stream_and_allocator(gpu, tensorplug_kernels, outer):
    x = gpu.tensor(ones(), (CUDA, 0))
    calls = {
        "identity": lambda: tensorplug_kernels.identity(x),
        "alloc_like": lambda: tensorplug_kernels.alloc_like(x),
        "raise_error": lambda: tensorplug_kernels.raise_error(x, "ValueError", "boom"),
        "raise_after_alloc": lambda: tensorplug_kernels.raise_after_alloc(x, "boom"),
        "alloc_huge": lambda: tensorplug_kernels.alloc_huge(x),
    }
    errors = {"raise_error": (ValueError, "boom"), "raise_after_alloc": (ValueError, "boom"),
              "alloc_huge": (MemoryError, "")}
    gpu.streams[0] = 0x9999
    context = tensorplug.use_raw_stream("cuda:0", outer) if outer else None
    if context:
        context.__enter__()
    try:
        before = state("cuda:0", "cuda:1", "cpu")
        assert before[1] == outer
        for name, call in calls.items():
            if name in errors:
                error, message = errors[name]
                with pytest.raises(error, match=message):
                    call()
            else:
                call()
            assert state("cuda:0", "cuda:1", "cpu") == before, f"{name} left the stream or allocator changed"
    finally:
        if context:
            context.__exit__(None, None, None)
    assert gpu.stream_queries == ([] if outer else [(CUDA, 0)] * len(calls))


def test_a_failing_stream_query_fails_the_call_and_changes_nothing(gpu, tensorplug_kernels):
    def broken(device_type, device_id):
        raise RuntimeError("the stream query failed")

    gpu._current_stream = broken
    adapter = FakeDeviceAdapter("brokenstream")
    adapter._current_stream = broken
    adapter.table = tensorplug.ExchangeTable.from_python("brokenstream", from_dlpack=adapter._from_dlpack,
                                                         current_stream=broken, allocate=adapter._allocate)
    with registered(adapter):
        x = adapter.tensor(ones(), (CUDA, 0))
        before = state("cuda:0")
        with pytest.raises(RuntimeError, match="the stream query failed"):
            tensorplug_kernels.stream_of(x)
        assert state("cuda:0") == before
        assert adapter.allocations == []


# ---------------------------------------------------------------- allocator ----
def test_from_env_alloc_uses_the_primary_frameworks_allocator(gpu, tensorplug_kernels):
    x = gpu.tensor(np.ones((4, 5), np.float64), (CUDA, 1))
    y = tensorplug_kernels.alloc_like(x)
    assert type(y) is gpu.tensor_type and y.device == (CUDA, 1) and y.shape == (4, 5)
    assert gpu.allocations == [((4, 5), "float64", "cuda:1")]
    assert tensorplug_kernels.describe(y) == "float64|4,5|5,1|cuda:1|0"
    first, second = tensorplug_kernels.pair(gpu.tensor(ones((3,)), (CPU, 0)))  # two allocations, one call
    assert type(first) is type(second) is gpu.tensor_type
    assert gpu.allocations[1:] == [((3,), "float32", "cpu:0")] * 2
    np.testing.assert_array_equal(first.numpy(), np.full(3, 2, np.float32))


def test_fresh_allocations_are_writable_even_from_an_immutable_framework(tensorplug_kernels):
    # jax's fresh buffers export read-only (jax arrays are immutable); the kernel must fill them.
    adapter = FakeDeviceAdapter("immutable")

    def allocate_frozen(shape, dtype, device):
        data = np.zeros(shape, dtype)
        data.flags.writeable = False
        return adapter.tensor_type(data, (CPU, 0))

    adapter.table = tensorplug.ExchangeTable.from_python("immutable", from_dlpack=adapter._from_dlpack,
                                                         allocate=allocate_frozen, read_only=True)
    with registered(adapter):
        y = tensorplug_kernels.add_one(adapter.tensor(np.arange(3, dtype=np.float32), (CPU, 0)))
    assert type(y) is adapter.tensor_type
    np.testing.assert_array_equal(y.numpy(), [1, 2, 3])


def test_a_failing_allocator_is_the_kernels_error(gpu, tensorplug_kernels):
    def out_of_memory(shape, dtype, device):
        if math.prod(shape) <= 1:  # a one-element tensor still fits: the size is the problem
            return gpu._allocate(shape, dtype, device)
        raise RuntimeError(f"fakegpu is out of memory for {shape}")

    def no_float32(shape, dtype, device):
        raise RuntimeError(f"fakegpu has no {dtype}")

    for name, allocate, error, message in (
            ("oom", out_of_memory, MemoryError,
             r"^cannot allocate 24 bytes \(shape \[2,3\]\) on cuda:0: fakegpu is out of memory for \(2, 3\)$"),
            # the allocator's own kind stands when a one-element tensor fails too: a RuntimeError is
            # not a dtype refusal (issue 21, item 6)
            ("nofloat", no_float32, RuntimeError, r"^cannot allocate a float32 tensor on cuda:0: fakegpu has no float32$")):
        adapter = FakeDeviceAdapter(name)
        adapter.table = tensorplug.ExchangeTable.from_python(name, from_dlpack=adapter._from_dlpack,
                                                             current_stream=adapter._current_stream,
                                                             allocate=allocate)
        with registered(adapter):
            x = adapter.tensor(ones(), (CUDA, 0))
            before = state("cuda:0")
            with pytest.raises(error, match=message):
                tensorplug_kernels.alloc_like(x)
            assert state("cuda:0") == before


# ----------------------------------------------------------- output_framework ----
def test_allocation_follows_output_framework(gpu, tensorplug_kernels):
    x = ones()
    with tensorplug.output_framework("fakegpu"):
        y = tensorplug_kernels.add_one(x)  # a numpy argument, the fake framework's allocator
    assert type(y) is gpu.tensor_type and y.device == (CPU, 0)
    assert gpu.allocations == [((2, 3), "float32", "cpu:0")]
    assert gpu.allocated_bytes() == 24
    np.testing.assert_array_equal(y.numpy(), x + 1)
    z = tensorplug_kernels.alloc_like(gpu.tensor(ones(), (CUDA, 0)))
    with tensorplug.output_framework("numpy"):
        w = tensorplug_kernels.add_one(gpu.tensor(ones((2,)), (CPU, 0)))
    assert type(z) is gpu.tensor_type and type(w) is np.ndarray
    assert len(gpu.allocations) == 2  # numpy allocated w, not the primary's framework
    np.testing.assert_array_equal(w, [2, 2])


def test_output_framework_keeps_the_primarys_stream(gpu, other_gpu, tensorplug_kernels):
    x = gpu.tensor(ones(), (CUDA, 0))
    with tensorplug.output_framework("othergpu"):
        y, stream = tensorplug_kernels.alloc_on(x, x)
    assert type(y) is other_gpu.tensor_type
    assert stream == 0xC0DA00  # the stream is the primary tensor's framework's
    assert gpu.stream_queries == [(CUDA, 0)] and other_gpu.stream_queries == []
    assert gpu.allocations == [] and other_gpu.allocations == [((2, 3), "float32", "cuda:0")]


def test_the_innermost_output_framework_wins(gpu, other_gpu, tensorplug_kernels):
    x = ones()
    with tensorplug.output_framework("fakegpu"):
        with tensorplug.output_framework("othergpu"):
            inner = tensorplug_kernels.add_one(x)
            with tensorplug.output_framework("numpy"):
                innermost = tensorplug_kernels.add_one(x)
        outer = tensorplug_kernels.add_one(x)
    after = tensorplug_kernels.add_one(gpu.tensor(ones(), (CPU, 0)))
    assert type(inner) is other_gpu.tensor_type
    assert type(innermost) is np.ndarray
    assert type(outer) is gpu.tensor_type
    assert type(after) is gpu.tensor_type  # no context left: the primary's framework
    assert len(other_gpu.allocations) == 1 and len(gpu.allocations) == 2


def test_mixed_contexts_compose(gpu, other_gpu, tensorplug_kernels):
    x = gpu.tensor(ones(), (CUDA, 0))
    with tensorplug.use_raw_stream("cuda:0", 0x1111), tensorplug.output_framework("othergpu"):
        y, stream = tensorplug_kernels.alloc_on(x, x)
        with tensorplug.use_stream(other_gpu.new_stream(0, 0x2222)), tensorplug.output_framework("fakegpu"):
            z, inner_stream = tensorplug_kernels.alloc_on(x, x)
        assert tensorplug.get_raw_stream("cuda:0") == 0x1111
    assert (type(y), stream) == (other_gpu.tensor_type, 0x1111)
    assert (type(z), inner_stream) == (gpu.tensor_type, 0x2222)
    assert gpu.stream_queries == [] and other_gpu.stream_queries == []
    assert tensorplug.get_raw_stream("cuda:0") is None


def test_use_stream_takes_the_device_name_pair_of_first_party_stream_hooks():
    # torch, paddle and cupy answer tensorplug_stream_handle with (("cuda", index), handle).
    class NamedStream:
        pass

    class NamedStreamAdapter:
        @tensorplug.hookimpl
        def tensorplug_adapter_info(self):
            return tensorplug.AdapterInfo(name="named-stream", framework="named_stream", capabilities=("stream",))

        @tensorplug.hookimpl
        def tensorplug_stream_handle(self, stream):
            return (("cuda", 1), 0x5150) if isinstance(stream, NamedStream) else None

    adapter = NamedStreamAdapter()
    tensorplug.register_adapter(adapter)
    try:
        context = tensorplug.use_stream(NamedStream())
        assert context.device == tensorplug.Device("cuda", 1)
        assert context.handle == 0x5150
        with context:
            assert tensorplug.get_raw_stream("cuda:1") == 0x5150
        assert tensorplug.get_raw_stream("cuda:1") is None
    finally:
        tensorplug.unregister_adapter(adapter)
