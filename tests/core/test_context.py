"""use_stream / use_raw_stream / output_framework follow contextvars semantics (issue 9),
and a callback exception a kernel swallowed does not outlive the call."""

from __future__ import annotations

import asyncio
import contextvars
import gc
import threading
import weakref

import pytest

import tensorplug
from tensorplug import _core

CUDA0 = "cuda:0"  # streams are only recorded here: no CUDA device is needed


def live():
    return _core.live_overrides(0)


@pytest.fixture(autouse=True)
def no_context_left_behind():
    assert live() == 0
    yield
    assert live() == 0
    assert tensorplug.get_raw_stream(CUDA0) is None


def test_asyncio_tasks_each_see_their_own_stream(kernels):
    seen = {1: [], 2: []}

    async def task(handle):
        with tensorplug.use_raw_stream(CUDA0, handle):
            for _ in range(3):
                await asyncio.sleep(0)  # let the other task run inside its own context
                seen[handle].append((kernels.stream_of(CUDA0), tensorplug.get_raw_stream(CUDA0)))

    async def main():
        await asyncio.gather(task(1), task(2))

    asyncio.run(main())
    assert seen == {1: [(1, 1)] * 3, 2: [(2, 2)] * 3}


def test_threads_each_see_their_own_stream(kernels):
    entered, release = threading.Event(), threading.Event()
    seen = []

    def worker():
        with tensorplug.use_raw_stream(CUDA0, 7):
            entered.set()
            release.wait(10)
            seen.append(kernels.stream_of(CUDA0))

    t = threading.Thread(target=worker)
    t.start()
    entered.wait(10)
    try:
        assert kernels.stream_of(CUDA0) == 0  # the other thread's override is not ours
        assert tensorplug.get_raw_stream(CUDA0) is None
    finally:
        release.set()
        t.join()
    assert seen == [7]


def test_call_restores_the_thread_env(kernels):
    with tensorplug.use_raw_stream(CUDA0, 5):
        assert kernels.stream_of(CUDA0) == 5
        assert _core.get_stream(2, 0) is None  # applied for each call only
    assert kernels.stream_of(CUDA0) == 0


def test_nested_streams_innermost_wins(kernels):
    with tensorplug.use_raw_stream(CUDA0, 1):
        with tensorplug.use_raw_stream("cuda:1", 9):
            with tensorplug.use_raw_stream(CUDA0, 2):
                assert (kernels.stream_of(CUDA0), kernels.stream_of("cuda:1")) == (2, 9)
            assert (kernels.stream_of(CUDA0), kernels.stream_of("cuda:1")) == (1, 9)
            assert tensorplug.get_raw_stream(CUDA0) == 1
        assert tensorplug.get_raw_stream("cuda:1") is None
        with tensorplug.use_raw_stream(CUDA0, None):  # back to the default stream
            assert kernels.stream_of(CUDA0) == 0
            assert tensorplug.get_raw_stream(CUDA0) is None


def test_leaving_out_of_order_is_an_error_that_changes_nothing(kernels):
    outer, inner = tensorplug.use_raw_stream(CUDA0, 1), tensorplug.use_raw_stream(CUDA0, 2)
    outer.__enter__()
    inner.__enter__()
    with pytest.raises(RuntimeError, match=r"^use_raw_stream: contexts must be left innermost first, in the "
                                           r"thread or task that entered them \(this one is not the innermost "
                                           r"context here\); the state is unchanged$"):
        outer.__exit__(None, None, None)
    assert kernels.stream_of(CUDA0) == 2 and live() == 2
    inner.__exit__(None, None, None)
    assert kernels.stream_of(CUDA0) == 1
    outer.__exit__(None, None, None)
    assert kernels.stream_of(CUDA0) == 0
    with pytest.raises(RuntimeError, match="^use_raw_stream: leaving a context that was not entered$"):
        outer.__exit__(None, None, None)


def test_leaving_from_another_thread_is_an_error(kernels):
    ctx = tensorplug.use_raw_stream(CUDA0, 3)
    ctx.__enter__()
    errors = []

    def leave():
        try:
            ctx.__exit__(None, None, None)
        except RuntimeError as e:
            errors.append(str(e))

    t = threading.Thread(target=leave)
    t.start()
    t.join()
    assert errors == ["use_raw_stream: contexts must be left innermost first, in the thread or task that entered "
                      "them (this one is not the innermost context here); the state is unchanged"]
    assert kernels.stream_of(CUDA0) == 3  # still entered here
    ctx.__exit__(None, None, None)
    assert kernels.stream_of(CUDA0) == 0


def test_leaving_in_a_copied_context_is_an_error(kernels):
    ctx = tensorplug.use_raw_stream(CUDA0, 4)
    ctx.__enter__()
    copy = contextvars.copy_context()  # sees the override, but did not enter it
    with pytest.raises(RuntimeError, match=r"^use_raw_stream: this context was entered in another thread, task "
                                           r"or contextvars.Context; leave it where it was entered"):
        copy.run(ctx.__exit__, None, None, None)
    assert kernels.stream_of(CUDA0) == 4
    ctx.__exit__(None, None, None)


def test_exception_inside_leaves_nothing_behind(kernels):
    with pytest.raises(ValueError, match="^boom$"):
        with tensorplug.use_raw_stream(CUDA0, 6):
            kernels.fails("boom")
    assert kernels.stream_of(CUDA0) == 0


def test_output_framework_innermost_wins(kernels):
    np = pytest.importorskip("numpy")
    torch = pytest.importorskip("torch")
    x = np.arange(3.0)
    with tensorplug.output_framework("torch"):
        assert isinstance(kernels.identity(x), torch.Tensor)
        with tensorplug.output_framework("numpy"):
            assert isinstance(kernels.identity(torch.arange(3.0)), np.ndarray)
        assert isinstance(kernels.identity(x), torch.Tensor)
    assert isinstance(kernels.identity(x), np.ndarray)


def test_output_framework_is_task_local(kernels):
    np = pytest.importorskip("numpy")
    torch = pytest.importorskip("torch")
    kinds = {}

    async def task(name):
        with tensorplug.output_framework(name):
            await asyncio.sleep(0)
            kinds[name] = type(kernels.identity(np.arange(2.0)))

    async def main():
        await asyncio.gather(task("torch"), task("numpy"))

    asyncio.run(main())
    assert kinds == {"torch": torch.Tensor, "numpy": np.ndarray}


# ------------------------------------------------------ swallowed callback errors ----
SWALLOW = r"""
int64_t swallow(tensorplug::Function f) {
  try {
    f();
  } catch (const tensorplug::Error&) {
    return 1;
  }
  return 0;
}
"""


@pytest.fixture(scope="module")
def swallow():
    from tensorplug import cpp

    return cpp.load_inline("swallow_callback_errors", SWALLOW, functions=["swallow"]).swallow


def test_swallowed_callback_exception_is_released(kernels, swallow):
    class Big:
        pass

    def callback():
        payload = Big()  # a frame local the traceback keeps alive
        alive.append(weakref.ref(payload))
        raise ValueError("boom")

    alive = []
    assert swallow(callback) == 1
    gc.collect()
    assert alive[0]() is None

    # A later kernel error with the same kind and message is a new exception.
    with pytest.raises(ValueError, match="^boom$") as info:
        kernels.fails("boom")
    assert all(frame.name != "callback" for frame in info.traceback)


def test_callback_exception_still_propagates_unchanged(kernels):
    class Marker(Exception):
        pass

    original = Marker("from the callback")

    def callback(v):
        raise original

    with pytest.raises(Marker) as info:
        kernels.apply(callback, 3)
    assert info.value is original


def test_raw_stream_handle_out_of_range():
    with pytest.raises(ValueError, match=r"^use_raw_stream\(\) argument 'handle': expected a stream address "
                                         r"\(0 <= handle < 2\*\*64\), got -1$"):
        tensorplug.use_raw_stream(CUDA0, -1)
    with pytest.raises(ValueError, match=r"got 18446744073709551616$"):
        tensorplug.use_raw_stream(CUDA0, 2**64)
