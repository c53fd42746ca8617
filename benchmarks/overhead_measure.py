"""The measuring half of the call-overhead benchmark (bench_overhead.py is the other: targets,
report, command line): the cases and frameworks, the kernels of the libraries compared, the
timed loops, the import probe and the memory probe.

The same empty kernels (``kernels_tensorplug.cc`` and ``kernels_tvm_ffi.cc`` next to this
file) are compiled for tensorplug and for apache-tvm-ffi and called in one process, per
framework, with a warm-up and the best of N runs of M calls. The no-argument row also calls
the same empty ``noop()`` bound with nanobind (``kernels_nanobind.cc``): the floor a C++
binding sets for a plain call. The implementations are interleaved within each repeat (and
the order reversed on every other repeat) so that drift in machine speed hits all of them
alike. See README.md.

Over 500 lines: one idea, the measurement, whose cases, kernels and loops are read together
(each case names its kernels and the loop that times them).
"""

from __future__ import annotations

import ctypes
import gc
import hashlib
import importlib.machinery
import importlib.util
import itertools
import json
import math
import os
import shutil
import subprocess
import sys
import sysconfig
import time
import tracemalloc
from dataclasses import dataclass
from pathlib import Path

# ------------------------------------------------------------------ cases ----


@dataclass(frozen=True)
class Case:
    name: str  # row label
    function: str  # kernel name (the same in both kernel sources)
    tensors: int  # number of tensor arguments
    scalars: tuple = ()  # scalar arguments after the tensors
    allocates: bool = False  # returns a new tensor from the env allocator
    as_list: bool = False  # the tensors go in one Python list argument


CASES = (
    Case("no_args", "noop", 0),
    Case("1_tensor", "one_tensor", 1),
    Case("3_tensors", "three_tensors", 3),
    Case("3_tensors_2_scalars", "three_tensors_two_scalars", 3, scalars=(3, 0.5)),
    Case("alloc_like", "alloc_like", 1, allocates=True),
    Case("8_tensors", "eight_tensors", 8),
    Case("8_tensor_list", "eight_tensor_list", 8, as_list=True),
)
KERNEL_FUNCTIONS = [case.function for case in CASES]
NO_FRAMEWORK = "none"  # the framework column of the no-argument row

# ------------------------------------------------------------- frameworks ----


@dataclass(frozen=True)
class Framework:
    name: str  # row label, e.g. "torch-cuda"
    module: str  # the module to import
    device: str = "cpu"


FRAMEWORKS = (
    Framework("numpy", "numpy"),
    Framework("torch", "torch"),
    Framework("jax", "jax"),
    Framework("paddle", "paddle"),
    Framework("torch-cuda", "torch", "cuda:0"),
    Framework("cupy", "cupy", "cuda:0"),
)
# Modules whose presence in sys.modules after an import means a framework was imported.
FRAMEWORK_MODULES = ("numpy", "torch", "jax", "jaxlib", "paddle", "cupy", "tensorflow", "mlx")

# The targets (README.md): tensorplug / tvm-ffi per row.
# torch-cuda rows are torch rows; for cupy the design's rule applies: at or below tvm-ffi.
RATIO_TARGETS = {"numpy": 0.8, "torch": 0.8, "paddle": 0.8, "jax": 0.3, "torch-cuda": 0.8, "cupy": 1.0}
ALLOC_OVERHEAD_TARGET_NS = 300.0
ALLOC_OVERHEAD_FRAMEWORKS = ("numpy", "torch", "paddle")
IMPORT_TARGET_MS = 50.0
# A list of 8 tensors against the same 8 as separate arguments (issue 12): the list row's
# ratio at most the separate row's, with this margin for run-to-run noise.
LIST_ROW, SEPARATE_ROW = "8_tensor_list", "8_tensors"
LIST_FRAMEWORKS = ("numpy", "torch")
LIST_RATIO_MARGIN = 1.05
# The no-argument call against the same empty function bound with nanobind, the GIL released
# on both sides (issue 23): tensorplug / nanobind at most this.
NANOBIND_CASE = "no_args"
NANOBIND_RATIO_TARGET = 1.05


def _installed(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):  # a parent package missing, or sys.modules[module] = None
        return False


def framework_status(fw: Framework) -> tuple[bool, str]:
    """(usable, reason when not). Imports the framework only when it is installed."""
    if not _installed(fw.module):
        return False, f"{fw.module} not installed"
    try:
        module = importlib.import_module(fw.module)
    except Exception as exc:  # a broken install is reported, not fatal
        return False, f"import {fw.module} failed: {exc}"
    if fw.device.startswith("cuda"):
        if fw.module == "torch" and not module.cuda.is_available():
            return False, "no CUDA device (torch.cuda.is_available() is False)"
        if fw.module == "cupy":
            try:
                count = module.cuda.runtime.getDeviceCount()
            except Exception as exc:
                return False, f"no CUDA device ({exc})"
            if count == 0:
                return False, "no CUDA device"
    return True, ""


def framework_version(fw: Framework) -> str | None:
    module = sys.modules.get(fw.module)
    return getattr(module, "__version__", None)


def make_tensors(fw: Framework, count: int) -> list:
    """``count`` distinct small float32 tensors of ``fw`` (zeros, 4 elements)."""
    module = importlib.import_module(fw.module)
    if fw.module == "jax":
        import jax.numpy as jnp

        return [jnp.zeros(4, jnp.float32) for _ in range(count)]
    if fw.module == "paddle":
        return [module.zeros([4], "float32") for _ in range(count)]
    if fw.module == "torch":
        return [module.zeros(4, dtype=module.float32, device=fw.device) for _ in range(count)]
    if fw.module == "cupy":
        with module.cuda.Device(int(fw.device.partition(":")[2] or 0)):
            return [module.zeros(4, module.float32) for _ in range(count)]
    return [module.zeros(4, module.float32) for _ in range(count)]  # numpy


def case_arguments(case: Case, fw: Framework | None) -> list:
    """The arguments of one call of ``case`` with ``fw``'s tensors: the tensors (one list of
    them for a list case), then the scalars."""
    tensors = make_tensors(fw, case.tensors) if fw and case.tensors else []
    return ([tensors] if case.as_list else tensors) + list(case.scalars)


def empty_like_of(fw: Framework):
    """The framework's own ``empty_like``: the baseline of the allocating kernel."""
    if fw.module == "jax":
        import jax.numpy as jnp

        return jnp.empty_like
    return importlib.import_module(fw.module).empty_like


# ---------------------------------------------------------------- kernels ----


def kernel_source(kind: str) -> Path:
    """``kernels_<kind>.cc`` next to this file."""
    return Path(__file__).resolve().with_name(f"kernels_{kind}.cc")


@dataclass
class Implementations:
    """Callables per kernel name for each implementation (None: unavailable)."""
    tensorplug: object  # Module, release_gil=True (the default)
    tensorplug_gil_held: object  # Module, release_gil=False
    tvm_ffi: dict | None  # name -> tvm_ffi.Function (release_gil default: True)
    tvm_ffi_gil_held: dict | None  # name -> tvm_ffi.Function with release_gil = False
    tvm_ffi_version: str | None
    tvm_ffi_reason: str  # why tvm_ffi is None
    tvm_ffi_short: str  # the same in a few words, for the table
    # nanobind's no-argument noop (None: unavailable): a module with noop (GIL released)
    # and noop_gil_held.
    nanobind: object = None
    nanobind_version: str | None = None
    nanobind_reason: str = ""  # why nanobind is None, in a few words, for the table


def build_implementations(without_tvm_ffi: bool = False, verbose: bool = False,
                          without_nanobind: bool = False) -> Implementations:
    import tensorplug
    from tensorplug import cpp

    module = cpp.load_inline("tensorplug_bench_overhead", kernel_source("tensorplug").read_text(),
                             functions=KERNEL_FUNCTIONS, verbose=verbose)
    held = tensorplug.load_module(module.path, release_gil=False)
    tvm, tvm_held, version, reason, short = None, None, None, "", ""
    if without_tvm_ffi:
        reason, short = "apache-tvm-ffi disabled (--without-tvm-ffi)", "disabled"
    elif not _installed("tvm_ffi"):
        reason = "apache-tvm-ffi not installed (pip install 'tensorplug[bench]')"
        short = "not installed"
    else:
        try:
            import tvm_ffi
            import tvm_ffi.cpp

            version = getattr(tvm_ffi, "__version__", None)
            tvm_module = tvm_ffi.cpp.load_inline("tensorplug_bench_overhead_tvm_ffi",
                                                 cpp_sources=kernel_source("tvm_ffi").read_text(),
                                                 functions=KERNEL_FUNCTIONS)
            tvm = {name: tvm_module.get_function(name) for name in KERNEL_FUNCTIONS}
            tvm_held = {}
            for name in KERNEL_FUNCTIONS:
                func = tvm_module.get_function(name)  # a new Function object per lookup
                func.release_gil = False
                tvm_held[name] = func
        except Exception as exc:
            tvm = tvm_held = None
            reason = f"apache-tvm-ffi failed: {type(exc).__name__}: {_first_line(exc)}"
            short = "failed to load"
    impls = Implementations(module, held, tvm, tvm_held, version, reason, short)
    if without_nanobind:
        impls.nanobind_reason = "disabled"
    elif not _installed("nanobind"):
        impls.nanobind_reason = "nanobind not installed"
    else:
        try:
            impls.nanobind, impls.nanobind_version = build_nanobind(verbose)
        except Exception as exc:  # a failed build is reported in the table, not fatal
            impls.nanobind_reason = f"build failed: {_first_line(exc)}"
    return impls


NANOBIND_MODULE = "tensorplug_bench_nanobind"  # the NB_MODULE name in kernels_nanobind.cc
# nanobind's own CMake support, as a nanobind extension is built. NOMINSIZE: optimised for
# speed as tensorplug's extension is (nanobind's default is -Os for the module's own code;
# libnanobind, which holds the call dispatch, is built with the build type's flags either
# way). NOSTRIP: profile_call.py can name its functions.
NANOBIND_CMAKE = """cmake_minimum_required(VERSION 3.18)
project({name} LANGUAGES CXX)
find_package(Python COMPONENTS Interpreter Development.Module REQUIRED)
find_package(nanobind CONFIG REQUIRED)
nanobind_add_module({name} NOMINSIZE NOSTRIP "{source}")
"""


def build_nanobind(verbose: bool = False):
    """nanobind's side of the no-argument row: ``kernels_nanobind.cc`` built with nanobind's
    CMake support (Release, ``$CXX`` or ``c++``) into the tensorplug build cache, once per
    content (the source, nanobind's version, the compiler, the Python). Returns (module,
    nanobind version); raises RuntimeError with the tool's output when the build fails."""
    import nanobind

    from tensorplug import cpp

    source = kernel_source("nanobind")
    cmake = shutil.which("cmake")
    if cmake is None:
        raise RuntimeError("cmake is not on PATH")
    compiler = shutil.which(os.environ.get("CXX", "c++"))
    if compiler is None:
        raise RuntimeError("no C++ compiler: set CXX")
    key = hashlib.sha256()
    for part in (source.read_bytes(), NANOBIND_CMAKE.encode(), nanobind.__version__.encode(),
                 nanobind.cmake_dir().encode(), compiler.encode(), sys.executable.encode(), sys.version.encode()):
        key.update(part + b"\0")
    out_dir = cpp.cache_dir() / f"{NANOBIND_MODULE}_{key.hexdigest()[:16]}"
    target = out_dir / (NANOBIND_MODULE + sysconfig.get_config_var("EXT_SUFFIX"))
    if not target.exists():
        out_dir.mkdir(parents=True, exist_ok=True)
        (out_dir / "CMakeLists.txt").write_text(NANOBIND_CMAKE.format(name=NANOBIND_MODULE, source=source))
        build = out_dir / "build"
        for cmd in ([cmake, "-S", str(out_dir), "-B", str(build), "-DCMAKE_BUILD_TYPE=Release",
                     f"-DCMAKE_CXX_COMPILER={compiler}", f"-DPython_EXECUTABLE={sys.executable}",
                     f"-Dnanobind_DIR={nanobind.cmake_dir()}"],
                    [cmake, "--build", str(build), "--parallel", "2"]):
            if verbose:
                print(" ".join(cmd), file=sys.stderr)
            proc = subprocess.run(cmd, capture_output=True, text=True)
            if proc.returncode != 0:
                raise RuntimeError(f"{' '.join(cmd)} failed:\n{proc.stdout[-2000:]}{proc.stderr[-2000:]}")
        built = build / target.name
        if not built.exists():
            raise RuntimeError(f"the nanobind build made no {target.name} in {build}")
        os.replace(built, target)
        shutil.rmtree(build)  # the objects: only the module is kept
    loader = importlib.machinery.ExtensionFileLoader(NANOBIND_MODULE, str(target))
    spec = importlib.util.spec_from_file_location(NANOBIND_MODULE, str(target), loader=loader)
    module = importlib.util.module_from_spec(spec)
    loader.exec_module(module)
    return module, nanobind.__version__


# ----------------------------------------------------------------- timing ----

_LOOPS: dict = {}


def _loop(nargs: int, timed: bool = True):
    """``loop(f, n, a0, ..., a{nargs-1})`` calling ``f(a0, ...)`` n times with no
    argument unpacking; returns the elapsed ns when ``timed``."""
    key = (nargs, timed)
    if key not in _LOOPS:
        params = ", ".join(f"a{i}" for i in range(nargs))
        head = f"def loop(f, n{', ' if nargs else ''}{params}):\n"
        body = f"    for _ in repeat(None, n):\n        f({params})\n"
        if timed:
            body = "    start = now()\n" + body + "    return now() - start\n"
        namespace = {"repeat": itertools.repeat, "now": time.perf_counter_ns}
        exec(head + body, namespace)  # noqa: S102 - fixed template, no user input
        _LOOPS[key] = namespace["loop"]
    return _LOOPS[key]


def measure(variants: dict, args: list, calls: int, repeat: int, warmup: int) -> dict:
    """Best ns per call of each variant (callable or None), or the exception it raised.
    Variants run interleaved: each repeat runs all of them, in reverse order every other
    repeat."""
    loop = _loop(len(args))
    results, live = {}, {}
    for key, func in variants.items():
        if func is None:
            continue
        try:
            loop(func, warmup, *args)
        except Exception as exc:
            results[key] = exc
        else:
            live[key] = func
    best = dict.fromkeys(live, math.inf)
    order = list(live)
    gc_enabled = gc.isenabled()
    gc.disable()
    try:
        for r in range(repeat):
            for key in order if r % 2 == 0 else reversed(order):
                if key in results:
                    continue
                try:
                    best[key] = min(best[key], loop(live[key], calls, *args) / calls)
                except Exception as exc:  # should not happen after a good warm-up
                    results[key] = exc
        results.update((k, v) for k, v in best.items() if k not in results)
    finally:
        if gc_enabled:
            gc.enable()
    return results


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return text[0] if text else type(exc).__name__


def _short_reason(exc: BaseException) -> str:
    message = _first_line(exc)
    if "allocator is nullptr" in message:
        return "allocator is nullptr"
    message = message.split(", ")[0]
    return message if len(message) <= 48 else message[:45] + "..."


def python_call_floor(calls: int, repeat: int) -> float:
    """ns per call of a Python ``def f(): pass`` in the same loop: the floor of any call."""
    def nothing():
        pass

    return measure({"python": nothing}, [], calls, repeat, min(calls, 1000))["python"]


def run_rows(impls: Implementations, frameworks: list[Framework], cases: list[Case], calls: int,
             repeat: int, warmup: int, progress) -> list[dict]:
    rows = []
    targets = []
    for case in cases:
        if case.tensors == 0:
            targets.append((case, None))
        else:
            targets.extend((case, fw) for fw in frameworks)
    for case, fw in targets:
        args = case_arguments(case, fw)
        name = case.function
        variants = {
            "tensorplug": getattr(impls.tensorplug, name),
            "tvm_ffi": impls.tvm_ffi[name] if impls.tvm_ffi else None,
            "tensorplug_gil_held": getattr(impls.tensorplug_gil_held, name),
            "tvm_ffi_gil_held": impls.tvm_ffi_gil_held[name] if impls.tvm_ffi_gil_held else None,
        }
        if case.allocates:
            variants["empty_like"] = empty_like_of(fw)
        if case.name == NANOBIND_CASE:
            variants["nanobind"] = impls.nanobind.noop if impls.nanobind else None
            variants["nanobind_gil_held"] = impls.nanobind.noop_gil_held if impls.nanobind else None
        progress(f"  {case.name} / {fw.name if fw else NO_FRAMEWORK}")
        result = measure(variants, args, calls, repeat, warmup)
        row = {"case": case.name, "framework": fw.name if fw else NO_FRAMEWORK, "kernel": name}
        for key in variants:
            value = result.get(key)
            row[f"{key}_ns"] = value if isinstance(value, float) else None
            if isinstance(value, BaseException):  # this variant failed on this case
                row[f"{key}_error"] = f"{type(value).__name__}: {_first_line(value)}"
                row[f"{key}_reason"] = _short_reason(value)
            elif value is None and key.startswith("nanobind"):  # nanobind unavailable altogether
                row[f"{key}_error"] = row[f"{key}_reason"] = impls.nanobind_reason
            elif value is None:  # apache-tvm-ffi unavailable altogether
                row[f"{key}_error"] = impls.tvm_ffi_reason
                row[f"{key}_reason"] = impls.tvm_ffi_short
        row["ratio"] = _ratio(row.get("tensorplug_ns"), row.get("tvm_ffi_ns"))
        row["ratio_gil_held"] = _ratio(row.get("tensorplug_gil_held_ns"), row.get("tvm_ffi_gil_held_ns"))
        if case.name == NANOBIND_CASE:
            row["ratio_nanobind"] = _ratio(row.get("tensorplug_ns"), row.get("nanobind_ns"))
            row["ratio_nanobind_gil_held"] = _ratio(row.get("tensorplug_gil_held_ns"), row.get("nanobind_gil_held_ns"))
        if case.allocates:
            base = row.get("empty_like_ns")
            for impl in ("tensorplug", "tvm_ffi"):
                ns = row.get(f"{impl}_ns")
                row[f"{impl}_over_empty_like_ns"] = ns - base if ns is not None and base is not None else None
        rows.append(row)
    return rows


def _ratio(a, b):
    return a / b if a is not None and b else None


# ----------------------------------------------------------------- import ----

_IMPORT_PROBE = """
import sys, time, json
start = time.perf_counter()
import {module}
elapsed = time.perf_counter() - start
print(json.dumps({{"ms": elapsed * 1e3, "modules": [m for m in {frameworks!r} if m in sys.modules]}}))
"""


def import_time(module: str, runs: int) -> dict:
    """Best wall time of ``import module`` in fresh interpreters, and the frameworks it
    imported."""
    if not _installed(module):
        return {"module": module, "available": False, "reason": f"{module} not installed"}
    code = _IMPORT_PROBE.format(module=module, frameworks=FRAMEWORK_MODULES)
    times, imported = [], set()
    for _ in range(runs):
        proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
        if proc.returncode != 0:
            last = (proc.stderr.strip().splitlines() or ["no output"])[-1]
            return {"module": module, "available": False, "reason": f"import failed: {last}"}
        data = json.loads(proc.stdout.strip().splitlines()[-1])
        times.append(data["ms"])
        imported.update(data["modules"])
    return {"module": module, "available": True, "best_ms": min(times), "runs_ms": times,
            "frameworks_imported": sorted(imported)}


# ----------------------------------------------------------------- memory ----


class _MallInfo2(ctypes.Structure):
    _fields_ = [(name, ctypes.c_size_t) for name in
                ("arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks", "uordblks",
                 "fordblks", "keepcost")]


def _c_heap_in_use():
    """Bytes in use on the glibc heap (mallinfo2), or None where unavailable."""
    try:
        mallinfo2 = ctypes.CDLL(None).mallinfo2
    except (OSError, AttributeError):
        return None
    mallinfo2.restype = _MallInfo2
    info = mallinfo2()
    return info.uordblks + info.hblkhd


def memory_per_call(func, args: list, calls: int) -> dict:
    """What ``calls`` calls of ``func(*args)`` allocate: the Python heap (tracemalloc) left
    behind per call and its transient peak above the starting point, and the C heap
    (glibc mallinfo2) left behind per call."""
    loop = _loop(len(args), timed=False)
    loop(func, min(calls, 1000), *args)  # caches, lazily created objects
    gc.collect()
    gc_enabled = gc.isenabled()
    gc.disable()
    try:
        # The C heap first, without tracemalloc (whose traces live on the C heap).
        c_before = _c_heap_in_use()
        loop(func, calls, *args)
        c_after = _c_heap_in_use()
        tracemalloc.start()
        try:
            loop(func, 100, *args)  # let tracemalloc's own structures settle
            tracemalloc.reset_peak()
            loop(func, 0, *args)  # what the loop itself allocates (its frame, the iterator)
            _, setup_peak = tracemalloc.get_traced_memory()
            before, _ = tracemalloc.get_traced_memory()
            tracemalloc.reset_peak()
            loop(func, calls, *args)
            after, peak = tracemalloc.get_traced_memory()
        finally:
            tracemalloc.stop()
    finally:
        if gc_enabled:
            gc.enable()
    return {"calls": calls,
            "py_retained_bytes_per_call": (after - before) / calls,
            "py_transient_peak_bytes": max(0, peak - setup_peak),
            "c_heap_retained_bytes_per_call": (c_after - c_before) / calls if c_before is not None else None}


def run_memory(impls: Implementations, frameworks: list[Framework], cases: list[Case], calls: int) -> list[dict]:
    out = []
    for case in cases:
        if case.allocates:
            continue  # a new tensor per call is the point of that kernel
        for fw in (frameworks if case.tensors else [None]):
            args = case_arguments(case, fw)
            for impl, funcs in (("tensorplug", impls.tensorplug), ("tvm_ffi", impls.tvm_ffi)):
                if funcs is None:
                    continue
                func = getattr(funcs, case.function) if impl == "tensorplug" else funcs[case.function]
                try:
                    result = memory_per_call(func, args, calls)
                except Exception as exc:
                    result = {"error": f"{type(exc).__name__}: {_first_line(exc)}"}
                out.append({"case": case.name, "framework": fw.name if fw else NO_FRAMEWORK,
                            "implementation": impl, **result})
    return out


