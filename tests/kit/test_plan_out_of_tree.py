"""A third party's compiled op kernel on the public call plan (issue 41 item 6).

examples/plan_kernel/plan_kernel.c, the engine of an imaginary framework "rec", is copied
out of this repository and compiled with the system C compiler against what the installed
tensorplug ships alone (``tensorplug config --cflags`` and ``--ldflags --libs``: its public
headers and libtensorplug), and again with CMake (find_package(tensorplug)) when cmake is
installed; ctypes loads it, and ops of tests/support/op_kernels.py run through it from their
plans (``tensorplug.plans.make``; one from ``plans.create`` with a wrong rule on purpose).
docs/adapters.md, "Your own compiled op kernel: the call plan", walks through the example.
"""

import builtins
import ctypes
import gc
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import tensorplug
from tensorplug import _core, plans

np = pytest.importorskip("numpy", reason="numpy not installed")

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "plan_kernel" / "plan_kernel.c"
COMPILER = os.environ.get("CC", "cc")
CMAKE = shutil.which("cmake") or shutil.which("cmake", path=str(Path(sys.executable).parent))
REC_MAX_NDIM = 8
DTYPES = {np.dtype(np.float32): (2, 32), np.dtype(np.float64): (2, 64)}  # DLPack's (code, bits)

pytestmark = pytest.mark.skipif(shutil.which(COMPILER) is None, reason=f"no C compiler ({COMPILER})")


class RecTensor(ctypes.Structure):
    _fields_ = [("data", ctypes.c_void_p), ("ndim", ctypes.c_int32), ("dtype_code", ctypes.c_uint8),
                ("dtype_bits", ctypes.c_uint8), ("read_only", ctypes.c_uint8), ("reserved", ctypes.c_uint8),
                ("shape", ctypes.c_int64 * REC_MAX_NDIM), ("strides", ctypes.c_int64 * REC_MAX_NDIM),
                ("owner", ctypes.c_void_p)]


class RecValue(ctypes.Structure):
    _fields_ = [("kind", ctypes.c_int32), ("tensor", ctypes.POINTER(RecTensor)), ("i", ctypes.c_int64),
                ("f", ctypes.c_double)]


REC_NONE, REC_TENSOR, REC_INT, REC_FLOAT, REC_BOOL = range(5)


def config(*flags: str) -> list[str]:
    """What ``tensorplug config`` prints for ``flags``: how a third party finds the installed tensorplug."""
    out = subprocess.run([sys.executable, "-m", "tensorplug", "config", *flags], capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 0, out.stderr
    return out.stdout.split()


@pytest.fixture(scope="module")
def build(tmp_path_factory):
    """The example compiled out of tree: (the library, the compiler's dependency list)."""
    work = tmp_path_factory.mktemp("plan_kernel")
    source = work / "plan_kernel.c"
    shutil.copyfile(EXAMPLE, source)
    cflags, ldflags = config("--cflags"), config("--ldflags", "--libs")
    library = work / "libplan_kernel.so"
    # The example's command (plan_kernel.c's comment, docs/adapters.md), with warnings as errors
    # and the compiler's list of the headers it read.
    cmd = [COMPILER, "-std=c11", "-shared", *cflags, "-Wall", "-Wextra", "-pedantic", "-Werror",
           "-MD", "-MF", str(work / "deps"), str(source), *ldflags, "-o", str(library)]
    out = subprocess.run(cmd, capture_output=True, text=True, cwd=work, timeout=300)
    assert out.returncode == 0, out.stderr
    return library, cflags, ldflags, (work / "deps").read_text()


def load(library):
    """The built example, its functions typed for ctypes."""
    lib = ctypes.CDLL(str(library))
    lib.rec_op_register.restype = ctypes.c_void_p
    lib.rec_op_register.argtypes = [ctypes.c_void_p]
    lib.rec_op_unregister.argtypes = [ctypes.c_void_p]
    lib.rec_call.argtypes = [ctypes.c_void_p, ctypes.POINTER(RecValue), ctypes.c_int32, ctypes.POINTER(RecTensor),
                             ctypes.POINTER(ctypes.c_int32), ctypes.c_char_p, ctypes.c_size_t]
    lib.rec_allocations.restype = lib.rec_live_tensors.restype = ctypes.c_int64
    lib.rec_tensor_free.argtypes = [ctypes.POINTER(RecTensor)]
    return lib


@pytest.fixture(scope="module")
def rec(build):
    return load(build[0])


def plan_pointer(capsule) -> int:
    get = ctypes.pythonapi.PyCapsule_GetPointer
    get.restype, get.argtypes = ctypes.c_void_p, [ctypes.py_object, ctypes.c_char_p]
    return get(capsule, b"tensorplug.TPPlanHandle")


@pytest.fixture
def register(rec):
    """register(capsule) -> the op as rec keeps it (rec_op_register: a reference of its own)."""
    held = []

    def register(capsule):
        held.append(rec.rec_op_register(plan_pointer(capsule)))
        return held[-1]

    yield register
    for handle in held:
        rec.rec_op_unregister(handle)


def record(array) -> RecTensor:
    """A numpy array as a rec tensor (borrowing its memory)."""
    code, bits = DTYPES[array.dtype]
    t = RecTensor(data=array.ctypes.data, ndim=array.ndim, dtype_code=code, dtype_bits=bits,
                  read_only=not array.flags.writeable)
    for k in range(array.ndim):
        t.shape[k] = array.shape[k]
        t.strides[k] = array.strides[k] // array.itemsize
    return t


def call(rec, op, *args):
    """Runs `op` through rec_call: its results as numpy arrays (copied; rec's records freed), or
    the recorded error raised as the Python exception its kind names."""
    records = [record(a) if isinstance(a, np.ndarray) else None for a in args]
    values = (RecValue * max(len(args), 1))()
    for v, a, r in zip(values, args, records):
        if r is not None:
            v.kind, v.tensor = REC_TENSOR, ctypes.pointer(r)
        elif a is None:
            v.kind = REC_NONE
        elif isinstance(a, bool):
            v.kind, v.i = REC_BOOL, a
        elif isinstance(a, int):
            v.kind, v.i = REC_INT, a
        else:
            v.kind, v.f = REC_FLOAT, a
    results = (RecTensor * 4)()
    count = ctypes.c_int32()
    error = ctypes.create_string_buffer(1024)
    if rec.rec_call(op, values, len(args), results, ctypes.byref(count), error, len(error)) != 0:
        kind, _, message = error.value.decode().partition(": ")
        raise getattr(builtins, kind, RuntimeError)(message)
    arrays = []
    for t in results[:count.value]:
        dtype = next(d for d, cb in DTYPES.items() if cb == (t.dtype_code, t.dtype_bits))
        shape = tuple(t.shape[:t.ndim])
        assert list(t.strides[:t.ndim]) == [int(np.prod(shape[k + 1:])) for k in range(t.ndim)]  # row-major
        nbytes = int(np.prod(shape)) * dtype.itemsize
        arrays.append(np.frombuffer((ctypes.c_char * nbytes).from_address(t.data), dtype).reshape(shape).copy())
        rec.rec_tensor_free(ctypes.byref(t))
    return arrays


def test_built_against_the_installed_headers_alone(build):
    library, cflags, ldflags, deps = build
    installed, lib_dir = Path(tensorplug.cpp.include_dir()), tensorplug.cpp.lib_dir()
    # The one include directory is the installed package's, not this checkout's csrc/include.
    assert [Path(f[2:]) for f in cflags if f.startswith("-I")] == [installed]
    assert (installed / "tensorplug" / "plan.h").is_file() and not installed.resolve().is_relative_to(ROOT / "csrc")
    assert f"-L{lib_dir}" in ldflags and "-ltensorplug" in ldflags
    # Every tensorplug header the compiler read came from there: plan.h and what it pulls in.
    headers = {Path(p) for p in deps.replace("\\\n", " ").split() if "tensorplug/" in p and p.endswith(".h")}
    assert {h.name for h in headers} == {"plan.h", "c_api.h", "dlpack.h"}
    assert all(h.is_relative_to(installed) for h in headers), headers
    linked = subprocess.run(["ldd", str(library)], capture_output=True, text=True).stdout
    assert f"libtensorplug.so => {lib_dir}/libtensorplug.so" in linked


@pytest.mark.skipif(CMAKE is None, reason="cmake not installed")
def test_built_with_cmake_find_package(tmp_path, ops):
    # The example's CMakeLists.txt: find_package(tensorplug) and the tensorplug::tensorplug target.
    for name in ("plan_kernel.c", "CMakeLists.txt"):
        shutil.copyfile(EXAMPLE.with_name(name), tmp_path / name)
    (cmake_dir,) = config("--cmakedir")
    for cmd in ([CMAKE, "-S", str(tmp_path), "-B", str(tmp_path / "build"), f"-Dtensorplug_DIR={cmake_dir}",
                 "-DCMAKE_EXPORT_COMPILE_COMMANDS=ON"],
                [CMAKE, "--build", str(tmp_path / "build")]):
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
        assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    (compile_command,) = json.loads((tmp_path / "build" / "compile_commands.json").read_text())
    assert f" {tensorplug.cpp.include_dir()} " in compile_command["command"]  # -isystem <the installed headers>
    assert str(ROOT / "csrc") not in compile_command["command"]
    lib = load(tmp_path / "build" / "libplan_kernel.so")
    capsule = plans.make(ops.row_sum)
    op = lib.rec_op_register(plan_pointer(capsule))
    try:
        (sums,) = call(lib, op, np.ones((2, 3), dtype=np.float32))
    finally:
        lib.rec_op_unregister(op)
    np.testing.assert_array_equal(sums, [3, 3])
    assert lib.rec_allocations() == 1 and lib.rec_live_tensors() == 0


def test_an_allocating_op_gets_its_result_from_the_framework(rec, register, ops):
    op = register(plans.make(ops.row_sum))
    x = np.arange(12, dtype=np.float32).reshape(3, 4)
    made, live, bound = rec.rec_allocations(), rec.rec_live_tensors(), _core.bound_allocator()
    (sums,) = call(rec, op, x)
    np.testing.assert_array_equal(sums, x.sum(axis=1))
    # The kernel's Tensor::FromEnvAlloc reached rec's allocator; the record handed back owned
    # the tensor, and freeing it ran rec's deleter. The plan restored the thread's allocator.
    assert rec.rec_allocations() == made + 1
    assert rec.rec_live_tensors() == live
    assert _core.bound_allocator() == bound
    # A strided view (the transpose) passes with its strides.
    (sums,) = call(rec, op, np.ascontiguousarray(x.T).T.astype(np.float64))
    np.testing.assert_array_equal(sums, x.sum(axis=1))


def test_like_rule_scalars_and_an_optional_tensor(rec, register, ops):
    op = register(plans.make(ops.scale))
    x = np.linspace(-1, 1, 6, dtype=np.float64).reshape(2, 3)
    (plain,) = call(rec, op, x, 3.0, None)
    np.testing.assert_allclose(plain, 3.0 * x)
    (biased,) = call(rec, op, x, 2, np.ones_like(x))
    np.testing.assert_allclose(biased, 2.0 * x + 1)
    # rec's own checks, before the plan's.
    with pytest.raises(TypeError, match=r"^tptest::scale\(\) argument 'alpha': expected a value, got None$"):
        call(rec, op, x, None, None)
    with pytest.raises(TypeError, match=r"^tptest::scale\(\) argument 'alpha': expected a value for a 'float' "
                                        r"parameter, got a rec bool$"):
        call(rec, op, x, True, None)


def test_two_results_each_owned_by_a_record(rec, register, ops):
    op = register(plans.make(ops.plus_and_twice))
    x = np.arange(5, dtype=np.float64)
    made, live = rec.rec_allocations(), rec.rec_live_tensors()
    plus, twice = call(rec, op, x)
    np.testing.assert_array_equal(plus, x + 1)
    np.testing.assert_array_equal(twice, 2 * x)
    assert rec.rec_allocations() == made + 2 and rec.rec_live_tensors() == live


def test_a_written_argument_is_written_in_place(rec, register, ops):
    op = register(plans.make(ops.axpy))
    x, y = np.arange(4, dtype=np.float32), np.full(4, 10, dtype=np.float32)
    out = np.zeros(4, dtype=np.float32)
    made = rec.rec_allocations()
    assert call(rec, op, x, y, out, 2.0) == []
    np.testing.assert_array_equal(out, 2 * x + y)
    assert rec.rec_allocations() == made
    # rec's own check: a read-only tensor for a written parameter.
    out.flags.writeable = False
    with pytest.raises(TypeError, match=r"tptest::axpy\(\) argument 'out': expected a writable tensor"):
        call(rec, op, x, y, out, 2.0)


def test_a_written_argument_whose_elements_overlap_is_refused(rec, register, ops):
    op = register(plans.make(ops.axpy))
    x, y = np.arange(4, dtype=np.float32), np.ones(4, dtype=np.float32)
    base = np.zeros(1, dtype=np.float32)
    out = np.lib.stride_tricks.as_strided(base, shape=(4,), strides=(0,), writeable=True)
    bound = _core.bound_allocator()
    with pytest.raises(ValueError) as info:
        call(rec, op, x, y, out, 2.0)
    assert str(info.value) == (
        "tptest::axpy(): argument 'out': expected a tensor whose elements do not overlap (the kernel writes it), "
        "got shape [4] strides [0]: several elements share memory (as after expand() or broadcast_to); pass a copy")
    assert base[0] == 0 and _core.bound_allocator() == bound


def test_a_result_that_breaks_the_output_rule_is_refused(rec, register, ops):
    # row_sum under a wrong compiled rule, "like x": the plan checks what the function returned.
    like_x = (plans.RULE_FROM["tensor"], 0, (), plans.RULE_FROM["tensor"], 0, "", plans.RULE_FROM["primary"], -1, 0, 0)
    op = register(plans.create("tpoot::row_sum_like_x", ops.module.row_sum, [("x", "view", False, False)], 1,
                               [like_x]))
    made, live, bound = rec.rec_allocations(), rec.rec_live_tensors(), _core.bound_allocator()
    with pytest.raises(ValueError) as info:
        call(rec, op, np.ones((3, 4), dtype=np.float32))
    assert str(info.value) == ("op 'tpoot::row_sum_like_x' returned float32[3] on cpu:0 as result 0, but its "
                               "output rule declares float32[3, 4] on cpu:0")
    # The refused result came from rec's allocator and went back through its deleter.
    assert rec.rec_allocations() == made + 1 and rec.rec_live_tensors() == live
    assert _core.bound_allocator() == bound


def test_errors_name_the_op(rec, register, ops):
    op = register(plans.make(ops.row_sum))
    bound = _core.bound_allocator()
    # The rule cannot be evaluated (TPPlanPrepare): x.shape[0] of a 0-d tensor.
    with pytest.raises(IndexError, match=r"^tptest::row_sum\(\): output rule: dimension 0 of a 0-d tensor$"):
        call(rec, op, np.array(1.0, dtype=np.float32))
    # The function's own error, its kind kept (TPPlanInvoke).
    with pytest.raises(ValueError, match=r"^tptest::row_sum\(\): row_sum: expected a 2-d tensor, got 1 dimensions"):
        call(rec, op, np.ones(3, dtype=np.float32))
    with pytest.raises(TypeError, match=r"^tptest::row_sum\(\) takes 1 arguments \(2 given\)$"):
        call(rec, op, np.ones(3, dtype=np.float32), 1.0)
    assert _core.bound_allocator() == bound


def test_the_framework_keeps_the_plan_it_registered(rec, ops):
    capsule = plans.make(ops.row_sum)
    op = rec.rec_op_register(plan_pointer(capsule))
    del capsule
    gc.collect()
    (sums,) = call(rec, op, np.ones((2, 5), dtype=np.float32))
    np.testing.assert_array_equal(sums, [5, 5])
    rec.rec_op_unregister(op)
