"""Stream contexts: nesting, restoring, per thread, bad arguments. (That no call, successful
or failed, changes the stream or allocator state is a conformance check, run per adapter.)"""

import threading

import pytest

import tensorplug

np = pytest.importorskip("numpy")


def test_raw_stream_context_nests_and_restores(c_kernel):
    x = np.ones(3, dtype=np.float32)
    out = np.empty_like(x)
    assert c_kernel.add_one(x, out) == 0  # returns the stream it saw for x's device
    with tensorplug.use_raw_stream("cpu", 0x1000):
        assert tensorplug.get_raw_stream("cpu") == 0x1000
        assert c_kernel.add_one(x, out) == 0x1000
        with tensorplug.use_raw_stream("cpu", 0x2000):
            assert c_kernel.add_one(x, out) == 0x2000
        assert c_kernel.add_one(x, out) == 0x1000
        with pytest.raises(TypeError, match=r"^add_one\(\) argument 2 'out': expected a tensor, got str$"):
            c_kernel.add_one(x, "bad")
        assert tensorplug.get_raw_stream("cpu") == 0x1000
    assert tensorplug.get_raw_stream("cpu") is None
    np.testing.assert_array_equal(out, x + 1)


def test_stream_context_is_per_thread(c_kernel):
    seen = {}
    x = np.ones(2, dtype=np.float32)

    def worker():
        seen["other"] = c_kernel.add_one(x, np.empty_like(x))

    with tensorplug.use_raw_stream("cpu", 0x3000):
        t = threading.Thread(target=worker)
        t.start()
        t.join()
        seen["main"] = c_kernel.add_one(x, np.empty_like(x))
    assert seen == {"other": 0, "main": 0x3000}


def test_bad_stream_arguments():
    with pytest.raises(ValueError, match="device: expected 'cpu', 'cuda:0'"):
        tensorplug.use_raw_stream("tpu:0", 1)
    with pytest.raises(TypeError, match="use_raw_stream\\(\\) argument 'handle': expected an int or None, got str"):
        tensorplug.use_raw_stream("cpu", "1")
    with pytest.raises(TypeError, match="no adapter knows streams of type builtins.object"):
        tensorplug.use_stream(object())
