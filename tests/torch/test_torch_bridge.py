"""The compiled torch bridge (plugins/tensorplug_adapters/torch/bridge.cc and .py): unless
TENSORPLUG_TORCH_BRIDGE=0, an op whose parameters are plain tensors and scalars gets
dispatcher kernels compiled at run time against the torch in hand, which pass torch's stack
on borrowed to the same plan as the stable kernels. The rest of the suite runs with the
bridge, the default; here the native kernel's tests run again on the stable kernels, which
every op takes where the bridge cannot be built. The bridge is chosen once per process, so
each test runs its own Python with the variable set.
"""

import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

torch = pytest.importorskip("torch", reason="torch not installed")

TESTS = Path(__file__).parent
SUPPORT = TESTS.parent / "support"
ROOT = TESTS.parents[1]

pytestmark = pytest.mark.skipif(shutil.which(os.environ.get("CXX", "c++")) is None, reason="no C++ compiler")


def run_python(code: str, bridge: str | None = "1", **env) -> subprocess.CompletedProcess:
    """``code`` in a fresh interpreter with ``TENSORPLUG_TORCH_BRIDGE=bridge`` (None: unset, the
    default) and ``env`` on top."""
    environ = {**os.environ, **env}
    environ.pop("TENSORPLUG_TORCH_BRIDGE", None)
    if bridge is not None:
        environ["TENSORPLUG_TORCH_BRIDGE"] = bridge
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True,
                          cwd=SUPPORT, env=environ, timeout=600)


PREAMBLE = """
    import torch, tensorplug, op_kernels
    from tensorplug_adapters.torch import bridge as torch_bridge, native as torch_native
    ops = op_kernels.ops()
    axpy = tensorplug.op("tpbridge::axpy", ops.module.axpy)
    row_sum = tensorplug.op("tpbridge::row_sum", ops.module.row_sum,
                            returns=tensorplug.Output(shape=("x.shape[0]",), dtype="x"))
    scale = tensorplug.op("tpbridge::scale", ops.module.scale, returns=tensorplug.like("x"))
    arange = tensorplug.op("tpbridge::arange", ops.module.arange,
                           returns=tensorplug.Output(shape=("n",), dtype="dtype", device="device"))
"""


def test_ops_of_plain_tensors_and_scalars_take_the_bridge_and_give_the_values():
    done = run_python(PREAMBLE + """
    x = torch.arange(6, dtype=torch.float32).reshape(2, 3)
    out = torch.zeros(3)
    axpy(torch.ones(3), torch.full((3,), 2.0), out, 3.0)
    print(out.tolist(), row_sum(x).tolist(), scale(x[0], 2.0, None).tolist(),
          arange(3, torch.float32, torch.device("cpu")).tolist())
    compiled = torch.compile(lambda x: row_sum(x) * 2, backend="inductor", fullgraph=True)
    print(compiled(x).tolist())
    # An optional parameter (scale's bias), a dtype and a device (arange's) keep the stable kernel.
    print(torch_bridge.attached(), [torch_native.bridged(op) for op in (axpy, row_sum, scale, arange)])
    """)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0] == "[5.0, 5.0, 5.0] [3.0, 12.0] [0.0, 2.0, 4.0] [0.0, 1.0, 2.0]"
    assert lines[1] == "[6.0, 24.0]"
    assert lines[2] == "True [True, True, False, False]"


def test_errors_name_the_op_and_argument_as_on_the_stable_kernel():
    done = run_python(PREAMBLE + """
    def text(call):
        try:
            call()
        except Exception as e:
            return f"{type(e).__name__}: {e}"
    print(text(lambda: row_sum(torch.ones(2, 3, dtype=torch.int32))))
    print(text(lambda: axpy(torch.ones(3), torch.ones(3), torch.zeros(1).expand(3), 1.0)).split(" (as after")[0])
    print(text(lambda: axpy(torch.ones(3), torch.ones(2), torch.ones(3), 1.0)).split(" (check failed")[0])
    """)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == [
        "RuntimeError: tpbridge::row_sum(): TypeError: argument 'x': unsupported dtype int32 for row_sum",
        "RuntimeError: tpbridge::axpy(): ValueError: argument 'out': expected a tensor whose elements do not "
        "overlap (the kernel writes it), got shape [3] strides [0]: several elements share memory",
        "RuntimeError: tpbridge::axpy(): ValueError: axpy: x, y and out must have one shape, got [3], [2], [3]",
    ]


def test_a_call_the_autograd_kernel_passes_on_keeps_its_exception():
    # The bridge passes a call on (under a dispatch mode, or needing a gradient) by calling
    # the overload on torch's own stack: what is raised below reaches the caller as raised,
    # where the stable kernel's hop keeps only its text (test_torch_native.py).
    done = run_python(PREAMBLE + """
    from torch.utils._python_dispatch import TorchDispatchMode
    class Record(TorchDispatchMode):
        seen = []
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            self.seen.append(str(func))
            return func(*args, **(kwargs or {}))
    class Refuse(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            if func.namespace == "tpbridge":
                raise ValueError(f"{func} refused by the mode")
            return func(*args, **(kwargs or {}))
    x = torch.arange(6, dtype=torch.float32).reshape(2, 3)
    with Record() as mode:
        print(row_sum(x).tolist(), mode.seen)
    try:
        with Refuse():
            row_sum(x)
    except ValueError as e:
        print(f"ValueError: {e}")
    """)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == ["[3.0, 12.0] ['tpbridge.row_sum.nograd']",
                                        "ValueError: tpbridge.row_sum.nograd refused by the mode"]


def test_a_bridge_kernel_needs_neither_python_nor_the_gil(tmp_path):
    # As test_torch_native.py's test of the stable kernel: the dispatcher called from a native
    # thread while the calling thread holds the GIL, for an op on the bridge.
    from test_torch_native import DISPATCH_FROM_THREAD

    source = tmp_path / "dispatch_from_thread.c"
    source.write_text(DISPATCH_FROM_THREAD)
    helper = tmp_path / "dispatch_from_thread.so"
    subprocess.run(["cc", "-shared", "-fPIC", "-O1", "-o", str(helper), str(source), "-ldl", "-lpthread"],
                   check=True)
    done = run_python(f"""
    import ctypes, os
    import torch, op_kernels
    from tensorplug_adapters.torch import native as torch_native
    ops = op_kernels.ops()
    lib = ctypes.PyDLL({str(helper)!r})
    out = (ctypes.c_float * 4)()
    libtorch_cpu = os.path.join(os.path.dirname(torch.__file__), "lib", "libtorch_cpu.so")
    rc = lib.row_sum_from_thread(libtorch_cpu.encode(), ctypes.c_double(20.0), out)
    print(rc, list(out)[:2], torch_native.bridged(ops.row_sum), flush=True)
    os._exit(0)  # a blocked thread would keep the process alive
    """)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines()[-1] == "0 [1.0, 5.0] True", done.stdout + done.stderr


def test_the_bridge_is_the_default_and_zero_turns_it_off():
    code = PREAMBLE + """
    x = torch.arange(6, dtype=torch.float32).reshape(2, 3)
    print(row_sum(x).tolist(), torch_bridge.attached(), torch_native.bridged(row_sum))
    """
    default, off = run_python(code, bridge=None), run_python(code, bridge="0")
    assert default.returncode == 0, default.stderr
    assert off.returncode == 0, off.stderr
    assert default.stdout.splitlines() == ["[3.0, 12.0] True True"]
    assert off.stdout.splitlines() == ["[3.0, 12.0] False False"]


def test_the_suite_of_the_native_kernel_passes_on_the_stable_kernels():
    # The native kernel's tests, whose ops with plain parameters (tptest::axpy, row_sum,
    # plus_and_twice, and more) run on the bridge in the rest of the suite, run here on the
    # stable kernels, as on a machine without a compiler.
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-x",
         str(TESTS / "test_torch_native.py"), str(TESTS / "test_op_torch.py"), str(TESTS / "test_grad_torch.py")],
        capture_output=True, text=True, cwd=ROOT, env={**os.environ, "TENSORPLUG_TORCH_BRIDGE": "0"}, timeout=1200)
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]
    assert " passed" in done.stdout.splitlines()[-1]


@pytest.mark.parametrize("bridge, level", [("1", "WARNING"), (None, "INFO")], ids=["asked", "default"])
def test_without_a_compiler_the_ops_keep_the_stable_kernels(tmp_path, bridge, level):
    # The kernels are built before torch is imported; the bridge, wanted when torch's first
    # op is registered, finds no compiler. Asked for by name, that is a warning; by default,
    # a fact of the machine, logged at INFO.
    done = run_python(f"""
    import logging, os
    import op_kernels, tensorplug
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(message)s")
    module = op_kernels.ops().module
    os.environ["CXX"] = {str(tmp_path / "no-such-c++")!r}
    import torch
    from tensorplug_adapters.torch import bridge as torch_bridge, native as torch_native
    row_sum = tensorplug.op("tpbridge::row_sum", module.row_sum,
                            returns=tensorplug.Output(shape=("x.shape[0]",), dtype="x"))
    x = torch.arange(6, dtype=torch.float32).reshape(2, 3)
    print(row_sum(x).tolist(), torch_bridge.attached(), torch_native.bridged(row_sum))
    print(torch_bridge.error())
    """, bridge=bridge)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0] == "[3.0, 12.0] False False"
    assert lines[1].startswith("the compiled torch bridge could not be built or loaded: no c++ compiler found: "
                               f"'{tmp_path / 'no-such-c++'}' is not on PATH")
    logged = [line for line in done.stderr.splitlines() if "torch ops keep the stable kernels" in line]
    assert len(logged) == 1 and logged[0].startswith(f"{level} tensorplug: the compiled torch bridge could not"), \
        done.stderr
