"""Calls of functions that take no arguments (issue 23, "the floor of a plain call"): they
take their own path through the binding (no argument frame, no primary tensor), and must
run in the same env as any call without a tensor argument (docs/design.md, "The call"):
the default allocator and output (tensorplug.Tensor results), the current stream untouched,
a use_raw_stream / output_framework context applied, and everything restored after, whether
the kernel returns or raises, also when the call is nested inside another call's callback."""

import threading

import pytest

import tensorplug
from tensorplug import _core, cpp

np = pytest.importorskip("numpy")

SOURCE = r"""
namespace tp = tensorplug;

void noop() {}

// A tensor from the env allocator: the framework of whoever is the call's output.
tp::Tensor fresh() { return tp::Tensor::FromEnvAlloc({3}, tp::kFloat32, tp::kCPU); }

// The env this call runs in: the bound allocator (0: the default) and the CPU stream.
int64_t bound_allocator() { return reinterpret_cast<int64_t>(TPEnvGetAllocator()); }
int64_t cpu_stream() { return reinterpret_cast<int64_t>(TPEnvGetStream(kDLCPU, 0)); }

void fail() { TENSORPLUG_THROW(ValueError) << "no luck this time"; }

// Calls `callback` in the middle of a call whose primary tensor is `x`, then allocates from
// the env: the allocator of x's framework must be bound again after the callback.
tp::Tensor around(tp::TensorView x, tp::Function callback) {
  callback();
  return tp::Tensor::FromEnvAlloc({2}, tp::kFloat32, tp::kCPU);
}
"""
FUNCTIONS = ["noop", "fresh", "bound_allocator", "cpu_stream", "fail", "around"]


@pytest.fixture(scope="module")
def lib():
    return cpp.load_inline("no_argument_calls", SOURCE, functions=FUNCTIONS)


@pytest.fixture(scope="module", params=[True, False], ids=["gil_released", "gil_held"])
def mod(request, lib):
    return tensorplug.load_module(lib.path, release_gil=request.param)


def env_state():
    return _core.bound_allocator(), tensorplug.get_raw_stream("cpu")


def test_a_no_argument_call_returns_and_leaves_the_env_as_it_was(mod):
    before = env_state()
    assert mod.noop() is None
    assert mod.bound_allocator() == 0  # the default CPU allocator
    assert mod.cpu_stream() == 0
    t = mod.fresh()
    assert type(t) is tensorplug.Tensor  # no framework tensor: tensorplug's own
    assert t.shape == (3,) and t.dtype == "float32" and str(t.device) == "cpu:0"
    assert env_state() == before == (0, None)


def test_a_failing_no_argument_call_names_the_function_and_restores_the_env(mod):
    with pytest.raises(ValueError, match=r"^no luck this time$"):
        mod.fail()
    assert env_state() == (0, None)
    assert mod.noop() is None  # nothing left over from the failed call


def test_arguments_and_keywords_are_refused_with_the_functions_name(mod):
    with pytest.raises(TypeError, match=r"^noop\(\) takes 0 arguments \(\), got 1$"):
        mod.noop(1)
    with pytest.raises(TypeError, match=r"^noop\(\) got an unexpected keyword argument 'x'; it takes no arguments$"):
        mod.noop(x=1)
    assert mod.noop(**{}) is None  # an empty keyword dict is no keyword
    assert env_state() == (0, None)


def test_contexts_apply_to_no_argument_calls(mod):
    with tensorplug.use_raw_stream("cpu", 0x1000):
        assert mod.cpu_stream() == 0x1000
        with tensorplug.output_framework("numpy"):
            out = mod.fresh()
            assert mod.bound_allocator() != 0  # numpy's allocator
        assert type(out) is np.ndarray and out.shape == (3,) and out.dtype == np.float32
        assert type(mod.fresh()) is tensorplug.Tensor
        assert mod.cpu_stream() == 0x1000
    assert mod.cpu_stream() == 0
    assert env_state() == (0, None)


def test_nested_in_a_framework_call_it_binds_the_default_and_restores_the_outer_env(mod):
    seen = []

    def callback():
        # Inside around(x): numpy's allocator is bound for the outer call.
        seen.append((mod.bound_allocator(), type(mod.fresh())))
        with pytest.raises(ValueError, match=r"^no luck this time$"):
            mod.fail()

    out = mod.around(np.zeros(4, np.float32), callback)
    assert seen == [(0, tensorplug.Tensor)]
    # The outer call's allocator was bound again after the nested calls: a numpy result.
    assert type(out) is np.ndarray and out.shape == (2,)
    assert env_state() == (0, None)


def test_a_no_argument_call_on_a_new_thread(mod):
    # The thread's first call makes its thread state there.
    results = []

    def worker():
        results.append((mod.noop(), mod.bound_allocator(), type(mod.fresh()), env_state()))

    t = threading.Thread(target=worker)
    t.start()
    t.join()
    assert results == [(None, 0, tensorplug.Tensor, (0, None))]
