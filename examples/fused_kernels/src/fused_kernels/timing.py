"""How a decode step is timed: the one measurement behind both ``python -m fused_kernels.demo``
and ``benchmarks/bench_fused.py`` (so the two print the same numbers for the same step).

The step: :func:`step_function` builds one decode step of the model at a fixed position
(:data:`POSITION`), on a KV cache of its own, with the framework's own ops or the library's;
every call of it is one more step at that position. The method: :func:`interleaved` warms
each contender up (``torch.compile``'s and ``jax.jit``'s compilation happen there), finds a
burst of calls that lasts at least ``min_time``, then times every contender once per round,
round after round, and reports the median seconds per call of each: a slow moment of a
shared machine hits all contenders alike, and the speedup (own time over fused time, from
the same rounds) holds up better than the absolute times.

Threads are read when the libraries load, so they are set by the environment before the
process imports numpy, torch or jax (``FUSED_KERNELS_NUM_THREADS``, ``OMP_NUM_THREADS``; the
benchmark's ``--threads`` does that for you); :func:`threads` says what each contender got.
"""

from __future__ import annotations

import os
import statistics
import sys
import time
from typing import Callable

import numpy as np

import fused_kernels

from . import model

FRAMEWORKS = ("numpy", "torch", "torch.compile", "jax.jit")
#: The position of the timed step (the 11th token); the attention reads the whole cache
#: (masked), so a step costs the same at every position.
POSITION = 10
#: Interleaved rounds of the decode step, and the shortest burst of one contender.
ROUNDS = 5
MIN_TIME = 0.05


def method(batch: int = 1, rounds: int = ROUNDS) -> str:
    """One line for a page or a report: what a decode-step time is."""
    return (f"one decode step at position {POSITION}, batch {batch}, each run warmed up first; the median of "
            f"{rounds} interleaved rounds (each round times every run once, a burst of at least "
            f"{MIN_TIME * 1e3:.0f} ms)")


def interleaved(contenders: dict[str, Callable[[], object]], rounds: int = ROUNDS,
                min_time: float = 2e-3) -> dict[str, float]:
    """Median seconds per call of each ``name -> fn``, timed round-robin (see the module)."""
    bursts = {}
    for name, fn in contenders.items():
        fn()  # warm up (compiles under jit)
        n = 1
        while True:
            start = time.perf_counter()
            for _ in range(n):
                fn()
            if time.perf_counter() - start >= min_time or n >= 1 << 14:
                break
            n *= 4
        bursts[name] = n
    samples: dict[str, list[float]] = {name: [] for name in contenders}
    for _ in range(rounds):
        for name, fn in contenders.items():
            n = bursts[name]
            start = time.perf_counter()
            for _ in range(n):
                fn()
            samples[name].append((time.perf_counter() - start) / n)
    return {name: statistics.median(s) for name, s in samples.items()}


def step_function(framework: str, fused: bool, config: model.Config, weights: dict, batch: int = 1,
                  pos: int = POSITION) -> Callable[[], object]:
    """One decode step of ``framework`` (one of :data:`FRAMEWORKS`) with the library's ops
    (``fused``) or its own, at position ``pos``, returning when the logits are computed."""
    tokens = model.prompt(config, batch, 1)[:, 0]
    if framework == "numpy":
        from . import numpy_block as nb
        ops = nb.FusedOps() if fused else nb.NativeOps()
        cache = nb.new_cache(config, batch)
        return lambda: nb.decode_step(ops, config, weights, tokens, pos, cache)
    if framework in ("torch", "torch.compile"):
        import torch

        from . import torch_block as tb
        decoder = tb.Decoder(tb.FusedOps() if fused else tb.NativeOps(), config, weights)
        cache = decoder.new_cache(batch)
        run = torch.compile(decoder, backend="inductor", fullgraph=True) if framework == "torch.compile" else decoder
        tt, tp = torch.from_numpy(tokens), torch.tensor([pos])

        def torch_step():
            with torch.no_grad():
                return run(tt, tp, cache)
        return torch_step
    if framework == "jax.jit":
        import jax
        import jax.numpy as jnp

        from . import jax_block as jb
        ops = jb.FusedOps() if fused else jb.NativeOps()
        arrays, cache = jb.device_weights(weights), jb.new_cache(config, batch)
        jt, jp = jnp.asarray(tokens.astype(np.int32)), jnp.int32(pos)
        return lambda: jax.block_until_ready(jb.decode_step(ops, config, arrays, jt, jp, cache))
    raise ValueError(f"step_function() argument 'framework': expected one of {', '.join(FRAMEWORKS)}, "
                     f"got {framework!r}")


def decode_step_times(runs: list[tuple[str, bool]], config: model.Config, weights: dict, batch: int = 1,
                      rounds: int = ROUNDS) -> dict[tuple[str, bool], float]:
    """Seconds per decode step of each ``(framework, fused)`` of ``runs``, all timed together."""
    steps = {run: step_function(run[0], run[1], config, weights, batch) for run in runs}
    times = interleaved({f"{f}/{fused}": fn for (f, fused), fn in steps.items()}, rounds, MIN_TIME)
    return {run: times[f"{run[0]}/{run[1]}"] for run in runs}


def threads() -> str:
    """The threads each contender runs on, as far as this process can tell."""
    parts = [f"fused_kernels {fused_kernels.num_threads}"]
    blas = os.environ.get("OPENBLAS_NUM_THREADS") or os.environ.get("OMP_NUM_THREADS")
    parts.append(f"numpy's BLAS {blas}" if blas else f"numpy's BLAS its default ({os.cpu_count()} cores)")
    if "torch" in sys.modules:
        parts.append(f"torch {sys.modules['torch'].get_num_threads()}")
    if "jax" in sys.modules:
        one = "--xla_cpu_multi_thread_eigen=false" in os.environ.get("XLA_FLAGS", "")
        parts.append("XLA 1" if one else "XLA its default")
    return "threads: " + ", ".join(parts)
