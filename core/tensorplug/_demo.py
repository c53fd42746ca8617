"""``tensorplug demo``: compile the example kernel library, call it from every framework.

Tensors of each adapter are made through the adapter's own output table (from numpy
memory) and read back through DLPack: only public API, so third-party adapters take part
exactly as first-party ones do.
"""

from __future__ import annotations

import time
from pathlib import Path

from . import _core, adapters, cpp, empty, from_dlpack, output_table

HEADER = ["framework", "input type", "output type", "result correct", "call overhead (us)"]
# What the table's last two columns measured, printed under it.
FOOTNOTE = ("result correct: add(x, x), with x = arange(8) as float32 in the framework and the result allocated by "
            "the framework, equals 2 * x\n"
            "call overhead: numel(x), a kernel that only reads x's shape: the best of 5 runs of 20,000 calls")


def example_source(name: str) -> Path:
    """Path of a shipped example source (``kernels.cc``, ``add_one.c``)."""
    return Path(_core.__file__).parent / "examples" / name


def _type_name(obj, public: tuple[str, ...] = ()) -> str:
    """The public name of ``obj``'s type: one of the adapter's ``public`` tensor types it is
    an instance of (``jax.Array`` for ``jaxlib._jax.ArrayImpl``), else its class's own."""
    import sys

    for name in public:
        module, _, attribute = name.rpartition(".")
        declared = getattr(sys.modules.get(module), attribute, None)
        if isinstance(declared, type) and isinstance(obj, declared):
            return name
    t = type(obj)
    return f"{t.__module__}.{t.__qualname__}"


def _overhead_us(func, *args, calls: int = 20000, repeats: int = 5) -> float:
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        for _ in range(calls):
            func(*args)
        best = min(best, time.perf_counter() - start)
    return best / calls * 1e6


def run_demo() -> tuple[list[list[str]], bool]:
    """The demo's rows (one per framework, under :data:`HEADER`) and whether every result
    was correct."""
    print("compiling the example kernel library ...", flush=True)
    module = cpp.load("tensorplug_demo_kernels", [example_source("kernels.cc")])
    n = 8
    rows = []
    ok_all = True
    try:
        import numpy as np
    except ImportError:
        np = None
    if np is None:
        x = empty((n,), "float32")
        module.fill(x, 1.0)
        y = module.add(x, x)
        correct = module.sum(y) == 2.0 * n
        rows.append(["tensorplug", _type_name(x), _type_name(y), "yes" if correct else "NO",
                     f"{_overhead_us(module.numel, x):.3f}"])
        return rows, correct
    # Every loaded adapter whose framework is here (third-party ones included), then
    # tensorplug.Tensor itself; the generic DLPack fallback is not a framework.
    expected = 2 * np.arange(n, dtype=np.float32)
    records = {r.name: r for r in adapters() if r.error is None and r.framework_installed and r.name != "dlpack"}
    for name in [*records, "tensorplug"]:
        public = records[name].tensor_types if name in records else ("tensorplug.Tensor",)
        # Importing a framework and timing its calls takes seconds each: say which runs.
        print(f"calling it from {name} ...", flush=True)
        try:
            source = from_dlpack(np.arange(n, dtype=np.float32))
            x = source if name == "tensorplug" else output_table(name).to_framework(source)
            y = module.add(x, x)  # allocates its result through the caller's framework
            correct = bool(np.array_equal(np.from_dlpack(y), expected))
            rows.append([name, _type_name(x, public), _type_name(y, public), "yes" if correct else "NO",
                         f"{_overhead_us(module.numel, x):.3f}"])
            ok_all &= correct
        except Exception as exc:  # one framework's failure should not hide the others
            rows.append([name, "-", "-", f"ERROR: {type(exc).__name__}: {exc}", "-"])
            ok_all = False
    return rows, ok_all
