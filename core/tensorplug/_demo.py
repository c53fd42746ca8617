"""``tensorplug demo``: compile the example kernel library, call it from every framework."""

from __future__ import annotations

import time
from pathlib import Path

from . import _core, _frameworks, adapters, cpp, load_module


def example_source(name: str) -> Path:
    """Path of a shipped example source (``kernels.cc``, ``add_one.c``)."""
    return Path(_core.__file__).parent / "examples" / name


def _overhead_us(func, *args, calls: int = 20000, repeats: int = 5) -> float:
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        for _ in range(calls):
            func(*args)
        best = min(best, time.perf_counter() - start)
    return best / calls * 1e6


def run_demo() -> int:
    print("compiling the example kernel library ...", flush=True)
    module = load_module(cpp.build("tensorplug_demo_kernels", [example_source("kernels.cc")]))
    n = 8
    rows = []
    ok_all = True
    try:
        import numpy as np
    except ImportError:
        np = None
    if np is not None:
        # Every loaded adapter whose framework is here (third-party ones included), then
        # tensorplug.Tensor itself; the generic DLPack fallback is not a framework.
        names = [r.name for r in adapters() if r.error is None and r.name != "dlpack"] + ["tensorplug"]
        expected = 2 * np.arange(n, dtype=np.float32)
        for name in names:
            framework = _frameworks.get_framework(name)
            if framework is None or framework.missing() is not None:
                continue
            try:
                x = framework.from_numpy(np.arange(n, dtype=np.float32))
                y = module.add(x, x)  # allocates its result through the caller's framework
                correct = bool(np.array_equal(framework.to_numpy(y), expected))
                overhead = f"{_overhead_us(module.numel, x):.3f}"
                rows.append([name, _frameworks.type_name(x), _frameworks.type_name(y), "yes" if correct else "NO",
                             overhead])
                ok_all &= correct
            except Exception as exc:  # one framework's failure should not hide the others
                rows.append([name, "-", "-", f"ERROR: {type(exc).__name__}: {exc}", "-"])
                ok_all = False
    else:
        x = _core.empty((n,), "float32")
        module.fill(x, 1.0)
        y = module.add(x, x)
        correct = module.sum(y) == 2.0 * n
        rows.append(["tensorplug", _frameworks.type_name(x), _frameworks.type_name(y), "yes" if correct else "NO",
                     f"{_overhead_us(module.numel, x):.3f}"])
        ok_all &= correct
    from .__main__ import _table

    print(_table(rows, ["framework", "input type", "output type", "result correct", "call overhead (us)"]))
    return 0 if ok_all else 1
