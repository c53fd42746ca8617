"""The native torch kernel of tensorplug.op (plugins/tensorplug_adapters/torch/native.py,
the torch plugin's kernel.cc): compiled code between torch's dispatcher and the kernel
function, which needs neither Python nor the GIL, checks results against the op's output
rule, and falls back to the Python kernel, saying why, when it cannot serve an op.
"""

import functools
import subprocess
import sys
import textwrap
import threading
from pathlib import Path
from types import SimpleNamespace

import pytest

torch = pytest.importorskip("torch")


import tensorplug  # noqa: E402
from tensorplug_adapters.torch import _native  # noqa: E402
from torch.utils._python_dispatch import TorchDispatchMode  # noqa: E402
from tensorplug_adapters.torch import native as torch_native  # noqa: E402

SUPPORT = Path(__file__).parents[1] / "support"

# A plain C library (no tensorplug, no Python) whose function starts a pthread that calls
# an op through torch's dispatcher (torch_call_dispatcher of the stable shim) and waits for
# it at most `timeout_s`. Called through ctypes.PyDLL, the calling thread holds the GIL all
# along: a kernel that needs the GIL never completes.
DISPATCH_FROM_THREAD = r"""
#define _GNU_SOURCE
#include <dlfcn.h>
#include <pthread.h>
#include <stdint.h>
#include <string.h>
#include <time.h>

typedef int32_t (*call_t)(const char*, const char*, uint64_t*, uint64_t);
typedef int32_t (*empty_t)(int64_t, const int64_t*, const int64_t*, int32_t, int32_t, int32_t, void**);
typedef int32_t (*data_t)(void*, void**);
typedef int32_t (*delete_t)(void*);
typedef int32_t (*code_t)(void);

static struct { void* lib; double alpha; float result[4]; int32_t rc; } job;

/* The shim functions the threads call, resolved in libtorch_cpu. */
static call_t call;
static empty_t empty;
static data_t data;
static delete_t del;
static code_t f32, cpu;

static void resolve(void* lib) {
  call = (call_t)dlsym(lib, "torch_call_dispatcher");
  empty = (empty_t)dlsym(lib, "aoti_torch_empty_strided");
  data = (data_t)dlsym(lib, "aoti_torch_get_data_ptr");
  del = (delete_t)dlsym(lib, "aoti_torch_delete_tensor_object");
  f32 = (code_t)dlsym(lib, "aoti_torch_dtype_float32");
  cpu = (code_t)dlsym(lib, "aoti_torch_device_type_cpu");
}

static void* run(void* unused) {
  (void)unused;
  int64_t size = 4, stride = 1;
  void* x = 0;
  if (empty(1, &size, &stride, f32(), cpu(), 0, &x)) { job.rc = 2; return 0; }
  float* px = 0;
  data(x, (void**)&px);
  for (int i = 0; i < 4; ++i) px[i] = (float)i;
  uint64_t stack[3];
  stack[0] = (uint64_t)(uintptr_t)x;  /* moved into the call */
  memcpy(&stack[1], &job.alpha, sizeof(double));
  stack[2] = 0;  /* bias: None */
  if (call("tptest::scale", "", stack, (2ull << 56) | (10ull << 48))) { job.rc = 3; return 0; }
  float* out = 0;
  data((void*)(uintptr_t)stack[0], (void**)&out);
  memcpy(job.result, out, sizeof job.result);
  del((void*)(uintptr_t)stack[0]);
  job.rc = 0;
  return 0;
}

/* tptest::row_sum of [[0, 1], [2, 3]]: the result's two values in job.result. */
static void* run_row_sum(void* unused) {
  (void)unused;
  int64_t sizes[2] = {2, 2}, strides[2] = {2, 1};
  void* x = 0;
  if (empty(2, sizes, strides, f32(), cpu(), 0, &x)) { job.rc = 2; return 0; }
  float* px = 0;
  data(x, (void**)&px);
  for (int i = 0; i < 4; ++i) px[i] = (float)i;
  uint64_t stack[1] = {(uint64_t)(uintptr_t)x};  /* moved into the call */
  if (call("tptest::row_sum", "", stack, (2ull << 56) | (10ull << 48))) { job.rc = 3; return 0; }
  float* out = 0;
  data((void*)(uintptr_t)stack[0], (void**)&out);
  memcpy(job.result, out, 2 * sizeof(float));
  del((void*)(uintptr_t)stack[0]);
  job.rc = 0;
  return 0;
}

static int wait_for(void* (*body)(void*), double timeout_s, float* out) {
  resolve(job.lib);
  pthread_t thread;
  pthread_create(&thread, 0, body, 0);
  struct timespec deadline;
  clock_gettime(CLOCK_REALTIME, &deadline);
  deadline.tv_sec += (time_t)timeout_s;
  if (pthread_timedjoin_np(thread, 0, &deadline) != 0) return 1;
  memcpy(out, job.result, sizeof job.result);
  return job.rc;
}

int row_sum_from_thread(const char* libtorch_cpu, double timeout_s, float* out) {
  job.lib = dlopen(libtorch_cpu, RTLD_NOW | RTLD_NOLOAD);
  job.rc = -1;
  return wait_for(run_row_sum, timeout_s, out);
}

/* 0: done (results in out), 1: still blocked after timeout_s, 2/3: torch failed. */
int scale_from_thread(const char* libtorch_cpu, double alpha, double timeout_s, float* out) {
  job.lib = dlopen(libtorch_cpu, RTLD_NOW | RTLD_NOLOAD);
  job.alpha = alpha;
  job.rc = -1;
  return wait_for(run, timeout_s, out);
}
"""


def test_every_op_with_a_compiled_rule_gets_the_native_kernel(ops):
    for op in (ops.axpy, ops.scale, ops.row_sum, ops.arange, ops.plus_and_twice):
        assert torch_native.reason(op) is None, op.name
    # torch's dispatcher shows where each op's kernel was registered: from C, or from Python.
    assert "tensorplug_adapters/torch/kernel.cc" in _kernel_line("tptest::scale")
    assert "tensorplug_adapters/torch/registration.py" in _kernel_line("tptest::pad")


def _kernel_line(name):
    return next(line for line in torch._C._dispatch_dump(name).splitlines()
                if line.startswith("CompositeExplicitAutograd"))


def test_a_python_shape_function_keeps_the_python_kernel_and_says_why(ops):
    assert torch_native.reason(ops.pad) == (
        "its output rule '_pad_shape' is a Python shape function; declare it as tensorplug.Output or "
        "tensorplug.like for the native kernel")
    x = torch.arange(3, dtype=torch.float32)
    assert ops.pad(x, 1, 2, 9.0).tolist() == [9.0, 0.0, 1.0, 2.0, 9.0, 9.0]


def test_the_kernel_needs_neither_python_nor_the_gil(ops, tmp_path):
    # The dispatcher is called from a native thread while the calling thread holds the GIL
    # (ctypes.PyDLL). In a subprocess: a kernel that takes the GIL would block it forever.
    source = tmp_path / "dispatch_from_thread.c"
    source.write_text(DISPATCH_FROM_THREAD)
    helper = tmp_path / "dispatch_from_thread.so"
    subprocess.run(["cc", "-shared", "-fPIC", "-O1", "-o", str(helper), str(source), "-ldl", "-lpthread"],
                   check=True)
    code = textwrap.dedent(f"""
        import ctypes, os, sys
        sys.path.insert(0, {str(SUPPORT)!r})
        import torch, op_kernels
        op_kernels.ops()
        lib = ctypes.PyDLL({str(helper)!r})
        out = (ctypes.c_float * 4)()
        libtorch_cpu = os.path.join(os.path.dirname(torch.__file__), "lib", "libtorch_cpu.so")
        rc = lib.scale_from_thread(libtorch_cpu.encode(), ctypes.c_double(2.5), ctypes.c_double(20.0), out)
        print(rc, list(out), flush=True)
        os._exit(0)  # a blocked thread would keep the process alive
    """)
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split("\n")[-2] == "0 [0.0, 2.5, 5.0, 7.5]", done.stdout + done.stderr


@pytest.fixture(scope="module")
def routed(ops):
    # Ops of their own: tests/torch/test_op_torch.py replaces tptest::scale's Autograd kernel.
    return SimpleNamespace(scale=tensorplug.op("tpnative::scale_routed", ops.module.scale,
                                               returns=tensorplug.like("x")),
                           axpy=tensorplug.op("tpnative::axpy_routed", ops.module.axpy))


def test_the_autograd_kernel_sends_each_call_where_it_belongs(routed):
    # The op's native Autograd kernel runs the kernel itself (a plain call, below), or
    # passes a call on to .nograd (no Python) or .grad (the Python kernel); each gives the
    # op's values, and the Python kernel redispatches to .nograd.
    ops = routed
    x = torch.arange(4, dtype=torch.float32)
    assert ops.scale(x, 2.0, None).tolist() == [0.0, 2.0, 4.0, 6.0]  # plain: the kernel, directly
    empty = torch.empty(0)  # no data pointer: .grad, which redispatches below autograd
    assert ops.scale(empty, 2.0, None).shape == (0,)
    with torch.inference_mode():  # no Autograd key at all: the op's own kernel
        assert ops.scale(x, 3.0, None).tolist() == [0.0, 3.0, 6.0, 9.0]
    seen = []

    class Record(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            seen.append(str(func))
            return func(*args, **(kwargs or {}))

    with Record():  # a dispatch mode: .grad, and the mode sees .nograd below autograd
        assert ops.scale(x, 2.0, None).tolist() == [0.0, 2.0, 4.0, 6.0]
    assert seen == ["tpnative.scale_routed.nograd"]


def test_an_exception_below_the_autograd_kernel_keeps_its_text(routed):
    # torch_call_dispatcher keeps only an exception's text: the caller gets RuntimeError,
    # the text led by the Python type, without the traceback pybind11 appends.
    class Refuse(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            if func.namespace == "tpnative":
                raise ValueError(f"{func} refused by the mode")
            return func(*args, **(kwargs or {}))

    with Refuse(), pytest.raises(RuntimeError) as info:
        routed.scale(torch.ones(3), 2.0, None)
    assert str(info.value) == "ValueError: tpnative.scale_routed.nograd refused by the mode"
    # A kernel's own error passes the same way, kind and message intact.
    with pytest.raises(RuntimeError) as info:
        routed.axpy(torch.ones(3), torch.ones(2), torch.ones(3), 1.0)
    assert str(info.value).startswith("tpnative::axpy_routed(): ValueError: ")


@pytest.fixture
def noted_text_only():
    # Every failed hop reports the text tensorplug noted when it raised, as on a torch before
    # 2.13, whose shim keeps no exception text (torch_exception_get_what_without_backtrace).
    _native.shim_text(False)
    try:
        yield
    finally:
        _native.shim_text(True)


def test_where_torch_keeps_no_text_the_caller_gets_the_text_tensorplug_noted(ops, routed, noted_text_only,
                                                                             hop_only):
    # A Python exception below the Python Autograd kernel of `grad` (noted there).
    class Refuse(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            raise ValueError(f"{func} refused by the mode")

    x = torch.ones(3)
    with Refuse(), pytest.raises(RuntimeError) as info:
        routed.scale(x, 2.0, None)
    assert str(info.value) == "ValueError: tpnative.scale_routed.nograd refused by the mode"
    # The kernel's own error below the hop to `nograd` (noted by its handler).
    with pytest.raises(RuntimeError) as info:
        routed.axpy(torch.ones(3), torch.ones(2), torch.ones(3), 1.0)
    assert str(info.value) == ("tpnative::axpy_routed(): ValueError: axpy: x, y and out must have one shape, "
                               "got [3], [2], [3] (check failed: x.sizes() == y.sizes() && x.sizes() == out.sizes())")
    # The same through the stable kernels' hop, which an op with an optional parameter keeps
    # also where the compiled bridge takes axpy (the bridge's hop keeps torch's exception).
    with pytest.raises(RuntimeError) as info:
        routed.scale(torch.ones(3), 2.0, torch.ones(2))
    assert str(info.value) == ("tpnative::scale_routed(): ValueError: scale: bias must be like x "
                               "(check failed: bias->sizes() == x.sizes() && bias->dtype() == x.dtype())")
    assert not torch_native.bridged(routed.scale)
    # The refusal of a gradient through a written argument (the Python kernel's own).
    with pytest.raises(RuntimeError, match=r"^tpnative::axpy_routed writes 'out' in place and has no gradient"):
        routed.axpy(torch.ones(3, requires_grad=True), torch.ones(3), torch.ones(3), 1.0)
    # An exception tensorplug did not raise has no noted text, and never an earlier call's.
    quiet = tensorplug.op("tpnoted::scale", ops.module.scale, returns=tensorplug.like("x"))
    lib = torch.library.Library("tpnoted", "FRAGMENT")

    def refuse(keyset, *args):
        raise ValueError("refused below autograd")

    lib.impl("scale.nograd", refuse, "ADInplaceOrView", with_keyset=True)
    with pytest.raises(RuntimeError) as info:
        quiet(torch.ones(3), 2.0, None)
    assert str(info.value) == "tpnoted::scale.nograd failed in torch's dispatcher, which kept no message"
    assert routed.scale(x, 2.0, None).tolist() == [2.0, 2.0, 2.0]  # nothing left behind


@pytest.fixture(scope="module")
def observed(ops):
    # An op of its own whose `nograd` overload records each call that reaches it: a Python
    # kernel at ADInplaceOrView, the first key below autograd for a plain tensor, which
    # passes the call on. A call the Autograd kernel runs directly never reaches it.
    scale = tensorplug.op("tpdirect::scale", ops.module.scale, returns=tensorplug.like("x"))
    nograd = torch.ops.tpdirect.scale.nograd
    seen = []

    def observer(keyset, *args):
        seen.append(args[0])
        return nograd.redispatch(keyset & torch._C._after_ADInplaceOrView_keyset, *args)

    lib = torch.library.Library("tpdirect", "FRAGMENT")
    lib.impl("scale.nograd", observer, "ADInplaceOrView", with_keyset=True)
    return SimpleNamespace(scale=scale, seen=seen, lib=lib)


@pytest.fixture
def hop_only():
    # Every call takes the dispatcher to `nograd`, as on a torch whose layouts do not check out.
    _native.direct_off()
    try:
        yield
    finally:
        assert torch_native._enable_direct(torch)


def _calls_below(observed, call):
    observed.seen.clear()
    result = call()
    return result, len(observed.seen)


def test_a_call_that_meets_nothing_below_autograd_runs_the_kernel_directly(observed):
    assert torch_native.direct_call(torch)
    x = torch.arange(4, dtype=torch.float32)
    result, hops = _calls_below(observed, lambda: observed.scale(x, 2.0, None))
    assert (result.tolist(), hops) == ([0.0, 2.0, 4.0, 6.0], 0)
    # A tensor requiring grad under no_grad, a Parameter (a subclass without
    # __torch_dispatch__), an inference tensor beside a plain one: all direct.
    weight = torch.nn.Parameter(torch.ones(4))
    with torch.no_grad():
        result, hops = _calls_below(observed, lambda: observed.scale(weight, 3.0, x))
    assert (result.tolist(), result.requires_grad, hops) == ([3.0, 4.0, 5.0, 6.0], False, 0)
    with torch.inference_mode():
        bias = torch.ones(4)
    result, hops = _calls_below(observed, lambda: observed.scale(x, 1.0, bias))
    assert (result.tolist(), hops) == ([1.0, 2.0, 3.0, 4.0], 0)


def test_without_the_direct_call_each_call_hops_to_nograd(observed, hop_only):
    x = torch.arange(4, dtype=torch.float32)
    result, hops = _calls_below(observed, lambda: observed.scale(x, 2.0, None))
    assert (result.tolist(), hops) == ([0.0, 2.0, 4.0, 6.0], 1)


class _Tenfold(torch.Tensor):
    """A subclass with memory of its own whose __torch_dispatch__ multiplies results by 10:
    a call that skipped it would give the plain values."""

    @classmethod
    def __torch_dispatch__(cls, func, types, args=(), kwargs=None):
        with torch._C._ExcludeDispatchKeyGuard(torch._C.DispatchKeySet(torch._C.DispatchKey.Python)):
            return func(*args, **(kwargs or {})) * 10


def test_a_key_below_autograd_sends_the_call_through_the_dispatcher(observed):
    x = torch.arange(4, dtype=torch.float32)
    tenfold = torch.Tensor._make_subclass(_Tenfold, x)
    assert tenfold.data_ptr() == x.data_ptr()  # not told apart by its memory
    result, hops = _calls_below(observed, lambda: observed.scale(tenfold, 2.0, None))
    assert (result.tolist(), hops) == ([0.0, 20.0, 40.0, 60.0], 1)
    # A lazy negative bit: torch's Negative fallback materializes it below autograd.
    result, hops = _calls_below(observed, lambda: observed.scale(torch._neg_view(x), 2.0, None))
    assert (result.tolist(), hops) == ([-0.0, -2.0, -4.0, -6.0], 1)
    observed.seen.clear()
    conj = torch.tensor([1 + 2j, 3 - 1j], dtype=torch.complex64).conj()
    with pytest.raises(RuntimeError, match="argument 'x': unsupported dtype complex64 for scale"):
        observed.scale(conj, 2.0, None)  # past the Conjugate fallback, to a kernel of real floats
    assert len(observed.seen) == 1
    # A key below autograd included in the thread's dispatch state (torch's Functionalize
    # fallback then calls the op once more, from the top: two visits).
    with torch._C._IncludeDispatchKeyGuard(torch._C.DispatchKey.Functionalize):
        result, hops = _calls_below(observed, lambda: observed.scale(x, 2.0, None))
    assert (result.tolist(), hops) == ([0.0, 2.0, 4.0, 6.0], 2)
    # A meta tensor (no memory: through `grad`, whose redispatch passes ADInplaceOrView by):
    # the op's fake kernel, never the kernel.
    result = observed.scale(torch.empty(5, device="meta"), 2.0, None)
    assert (result.device.type, result.shape) == ("meta", (5,))


def test_each_thread_is_judged_by_its_own_dispatch_state(observed):
    x = torch.arange(4, dtype=torch.float32)
    results = {}

    def worker():
        results["worker"] = _calls_below(observed, lambda: observed.scale(x, 2.0, None))

    with torch._C._IncludeDispatchKeyGuard(torch._C.DispatchKey.Functionalize):
        thread = threading.Thread(target=worker)
        thread.start()
        thread.join()
        results["main"] = _calls_below(observed, lambda: observed.scale(x, 2.0, None))
    assert results["worker"][0].tolist() == results["main"][0].tolist() == [0.0, 2.0, 4.0, 6.0]
    assert (results["worker"][1], results["main"][1]) == (0, 2)


def test_the_direct_call_needs_a_key_set_location_that_fits_every_probe():
    a, b = torch.zeros(1), torch.zeros(1, dtype=torch.complex64).conj()
    keys = torch._C._dispatch_keys
    assert not _native.direct(torch.Tensor, [(a, 0x1234), (b, 0x5678)], 0, 0, 0, 0, 0)
    assert not _native.direct(torch.Tensor, [(a, keys(a).raw_repr())], 0, 0, 0, 0, 0)  # one fits too much
    with pytest.raises(TypeError, match="probe 1 is a int, not a tensor"):
        _native.direct(torch.Tensor, [(a, 1), (7, 1)], 0, 0, 0, 0, 0)
    assert torch_native.direct_call(torch)  # a refused request leaves the direct call as it was


def test_results_are_checked_against_the_output_rule_naming_the_op(ops):
    # row_sum returns x.shape[0] values; declared like(x), the rule says otherwise.
    wrong = tensorplug.op("tpnative::row_sum_wrong_rule", ops.module.row_sum, returns=tensorplug.like("x"))
    assert torch_native.reason(wrong) is None
    x = torch.ones(2, 3)
    with pytest.raises(RuntimeError) as info:
        wrong(x)
    assert str(info.value).startswith(
        "op 'tpnative::row_sum_wrong_rule' returned float32[2] on cpu:0 as result 0, but its output rule declares "
        "float32[2, 3] on cpu:0")
    fixed = tensorplug.op("tpnative::row_sum_fixed_dtype", ops.module.row_sum,
                          returns=tensorplug.Output(shape=("x.shape[0] * 1 + 0",), dtype="float64"))
    with pytest.raises(RuntimeError, match=r"declares float64\[2\] on cpu:0"):
        fixed(x)


def test_a_tensor_of_a_dtype_dlpack_lacks_is_refused_naming_the_op_and_argument(ops):
    bits = torch.zeros(3, dtype=torch.bits16)  # torch's dtype code 22: no DLPack type
    with pytest.raises(RuntimeError, match=r"^tptest::row_sum\(\): TypeError: argument 'x': torch dtype code 22 "
                                           r"has no DLPack equivalent$"):
        ops.row_sum(bits.view(1, 3))
    out = torch.full((3,), 7.0)
    with pytest.raises(RuntimeError, match=r"^tptest::axpy\(\): TypeError: argument 'y': torch dtype code 22 "
                                           r"has no DLPack equivalent$"):
        ops.axpy(torch.ones(3), bits, out, 1.0)
    assert out.tolist() == [7.0, 7.0, 7.0]  # refused before the kernel ran


def test_arguments_of_every_kind_reach_the_kernel(ops):
    x = torch.arange(6, dtype=torch.float32).reshape(2, 3)
    torch.testing.assert_close(ops.scale(x, 2.0, None), 2 * x)
    torch.testing.assert_close(ops.scale(x, 2.0, x), 3 * x)  # an optional tensor given
    torch.testing.assert_close(ops.scale(x[:, 1:], 2.0, None), 2 * x[:, 1:])  # a strided view with an offset
    torch.testing.assert_close(ops.row_sum(x), x.sum(1))
    a = ops.arange(5, torch.float64, torch.device("cpu"))  # int, dtype and device arguments
    assert a.dtype == torch.float64 and a.tolist() == [0, 1, 2, 3, 4]
    out = torch.zeros(2, 3)
    ops.axpy(x, x, out, 0.5)  # a written tensor, a float
    torch.testing.assert_close(out, 1.5 * x)
    plus, twice = ops.plus_and_twice(x)
    torch.testing.assert_close((plus, twice), (x + 1, 2 * x))
    # A negative-bit view: torch's Negative fallback materializes it before the kernel.
    negated = torch.tensor([1 + 2j, 3 + 4j]).conj().imag
    assert negated.is_neg() and ops.scale(negated, 1.0, None).tolist() == [-2.0, -4.0]


@functools.cache
def _aoti_ops(module):
    # Ops of their own: a trace of tptest::scale here would keep torch's compile caches from
    # seeing the backward tests/torch/test_op_torch.py attaches to it later.
    return SimpleNamespace(
        scale=tensorplug.op("tpnative::scale", module.scale, returns=tensorplug.like("x")),
        axpy=tensorplug.op("tpnative::axpy", module.axpy),
        row_sum=tensorplug.op("tpnative::row_sum", module.row_sum,
                              returns=tensorplug.Output(shape=("x.shape[0]",), dtype="x")),
    )


class _Model(torch.nn.Module):
    def __init__(self, ops):
        super().__init__()
        self.ops = ops

    def forward(self, x):
        y = self.ops.scale(x, 2.0, None)
        out = torch.empty_like(y)
        self.ops.axpy(y, x, out, 0.5)
        return self.ops.row_sum(out) + 1


def test_an_aotinductor_package_runs_in_a_fresh_process(ops, tmp_path):
    import shutil

    from tensorplug_adapters.torch import aoti as torch_aoti

    aoti_ops = _aoti_ops(ops.module)
    model, x = _Model(aoti_ops), torch.arange(6, dtype=torch.float32).reshape(2, 3)
    expected = model(x)
    package = str(tmp_path / "model.pt2")
    torch._inductor.aoti_compile_and_package(torch.export.export(model, (x,)), package_path=package)
    bare = str(tmp_path / "bare.pt2")
    shutil.copy(package, bare)
    torch_aoti.add_ops(package, ops.module, [aoti_ops.scale, aoti_ops.axpy, aoti_ops.row_sum])
    code = textwrap.dedent("""
        import sys, torch
        from tensorplug_adapters.torch import aoti as torch_aoti
        model = torch_aoti.load_package(sys.argv[1])
        print(model(torch.arange(6, dtype=torch.float32).reshape(2, 3)).tolist())
    """)
    done = subprocess.run([sys.executable, "-c", code, package], capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == str(expected.tolist())
    # Without the record, the fresh process has no tensorplug op: torch's proxy executor says so.
    bare_run = subprocess.run([sys.executable, "-c", code, bare], capture_output=True, text=True, timeout=600)
    assert bare_run.returncode != 0 and "Could not find schema for tpnative::scale" in bare_run.stderr


def test_a_package_cannot_carry_a_python_shape_function(ops, tmp_path):
    from tensorplug_adapters.torch import aoti as torch_aoti

    with pytest.raises(ValueError, match=r"^aoti.add_ops: op 'tptest::pad' has a Python shape function"):
        torch_aoti.add_ops(str(tmp_path / "unused.pt2"), ops.module, [ops.pad])
