"""The decode loop of a small random LLM with the library's kernels, in each framework:
``python -m fused_kernels.demo``. Prints each framework's tokens and its time per decode
step, and whether the frameworks agree (exit status 1 when they do not).

The model is :data:`fused_kernels.model.SMALL` (hidden 1024, 4 layers, int8 weights) with
random weights, so the tokens mean nothing; they are the same in every framework because
the weights and kernels are. ``--native`` adds each framework running the same model in
its own operations, for comparison. A progress bar on stderr follows the long parts
(making the weights, each framework's decode loop, whose first step includes
``torch.compile``'s or ``jax.jit``'s compilation); ``--progress never`` turns it off.

The time per step is measured after the decode loops, by :mod:`fused_kernels.timing`, the
measurement ``benchmarks/bench_fused.py`` uses too (one step at a fixed position, each run
warmed up, the median of interleaved rounds), so the demo and the benchmark agree on the
same machine; the loops give the tokens and each run's first step (its compilation).

On a machine busy with other work, thread pools whose workers get descheduled make the
times jump; ``FUSED_KERNELS_NUM_THREADS=1 OMP_NUM_THREADS=1
XLA_FLAGS=--xla_cpu_multi_thread_eigen=false python -m fused_kernels.demo`` runs the kernels,
numpy's BLAS, torch and XLA on one thread each, as ``bench_fused.py --threads 1`` does (read
when the libraries load; the line under the header says what each got).
"""

from __future__ import annotations

import argparse
import importlib.util
import sys
import time
from typing import Callable

import numpy as np

import fused_kernels
from fused_kernels import model, timing

FRAMEWORKS = ("numpy", "torch", "torch.compile", "jax.jit")
SIZES = {"tiny": model.Config(), "small": model.SMALL}


class ProgressBar:
    """``label [#####-----] 12/40`` redrawn in place on ``stream``; when ``interactive`` is
    false only the final line is written (a log gets one line, not a hundred)."""

    WIDTH = 30

    def __init__(self, label: str, total: int, stream, interactive: bool):
        self.label, self.total, self.stream, self.interactive = label, total, stream, interactive
        self.done = 0
        self.start = time.perf_counter()
        self._draw()

    def advance(self, n: int = 1) -> None:
        self.done = min(self.total, self.done + n)
        self._draw()

    def close(self) -> None:
        elapsed = time.perf_counter() - self.start
        line = f"{self.label} [{'#' * self.WIDTH}] {self.total}/{self.total} in {elapsed:.1f} s"
        self.stream.write(("\r" if self.interactive else "") + line + "\n")
        self.stream.flush()

    def _draw(self) -> None:
        if not self.interactive:
            return
        filled = self.WIDTH * self.done // max(self.total, 1)
        self.stream.write(f"\r{self.label} [{'#' * filled}{'-' * (self.WIDTH - filled)}] {self.done}/{self.total}")
        self.stream.flush()


def _runner(framework: str, native: bool, config: model.Config, weights: dict) -> Callable:
    """``run(prompt, steps, on_step) -> tokens`` for one framework, with the library's ops
    or (``native``) the framework's own."""
    if framework == "numpy":
        from fused_kernels import numpy_block as nb
        ops = nb.NativeOps() if native else nb.FusedOps()
        return lambda prompt, steps, on_step: nb.generate(ops, config, weights, prompt, steps, on_step)
    if framework in ("torch", "torch.compile"):
        import torch

        from fused_kernels import torch_block as tb
        decoder = tb.Decoder(tb.NativeOps() if native else tb.FusedOps(), config, weights)
        step = decoder
        if framework == "torch.compile":
            torch._dynamo.reset()
            step = torch.compile(decoder, backend="inductor", fullgraph=True)
        return lambda prompt, steps, on_step: tb.generate(step, decoder, prompt, steps, on_step)
    from fused_kernels import jax_block as jb
    ops = jb.NativeOps() if native else jb.FusedOps()
    arrays = jb.device_weights(weights)
    return lambda prompt, steps, on_step: jb.generate(ops, config, arrays, prompt, steps, on_step)


def _available(framework: str) -> bool:
    return importlib.util.find_spec(framework.split(".")[0]) is not None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m fused_kernels.demo", description=__doc__.split("\n\n")[0])
    parser.add_argument("--size", choices=sorted(SIZES), default="small", help="model size (default: small)")
    parser.add_argument("--batch", type=int, default=1, help="sequences decoded together (default: 1)")
    parser.add_argument("--prompt", type=int, default=8, help="prompt length in tokens (default: 8)")
    parser.add_argument("--steps", type=int, default=24, help="tokens to generate (default: 24)")
    parser.add_argument("--frameworks", default=",".join(FRAMEWORKS),
                        help=f"comma-separated, of {', '.join(FRAMEWORKS)} (default: all installed)")
    parser.add_argument("--native", action="store_true", help="also run each framework's own operations")
    parser.add_argument("--rounds", type=int, default=timing.ROUNDS,
                        help=f"interleaved timing rounds of the decode step (default: {timing.ROUNDS})")
    parser.add_argument("--progress", choices=("auto", "always", "never"), default="auto",
                        help="progress bar on stderr: auto draws it when stderr is a terminal")
    args = parser.parse_args(argv)

    frameworks = [f.strip() for f in args.frameworks.split(",") if f.strip()]
    unknown = [f for f in frameworks if f not in FRAMEWORKS]
    if unknown:
        parser.error(f"argument --frameworks: unknown {', '.join(unknown)}; choose from {', '.join(FRAMEWORKS)}")
    if args.steps < 2 or args.prompt < 1 or args.batch < 1 or args.rounds < 1:
        parser.error("--steps must be at least 2, --prompt, --batch and --rounds at least 1")
    config = SIZES[args.size]
    if args.prompt + args.steps > config.max_positions:
        parser.error(f"--prompt + --steps is {args.prompt + args.steps}; the {args.size} model holds "
                     f"{config.max_positions} positions")
    interactive = args.progress == "always" or (args.progress == "auto" and sys.stderr.isatty())

    print(f"fused_kernels demo: {args.size} model (hidden {config.hidden}, {config.layers} layers, "
          f"vocab {config.vocab}, int8 weights), batch {args.batch}, prompt {args.prompt} tokens, "
          f"{args.steps} new tokens; kernels for {fused_kernels.isa}")
    bar = ProgressBar("weights", 1, sys.stderr, interactive) if args.progress != "never" else None
    weights = model.random_weights(config)
    if bar:
        bar.advance()
        bar.close()
    prompt = model.prompt(config, args.batch, args.prompt)

    results: dict[str, np.ndarray] = {}
    firsts: dict[tuple[str, bool], float] = {}
    for framework in frameworks:
        for native in ((False, True) if args.native else (False,)):
            label = f"{framework} ({'own ops' if native else 'fused_kernels'})"
            if not _available(framework):
                print(f"{label:32s} skipped: {framework.split('.')[0]} not installed")
                continue
            run = _runner(framework, native, config, weights)
            total = args.prompt + args.steps - 1
            stamps: list[float] = []
            bar = ProgressBar(label, total, sys.stderr, interactive) if args.progress != "never" else None

            def on_step(pos: int) -> None:
                stamps.append(time.perf_counter())
                if bar:
                    bar.advance()

            start = time.perf_counter()
            results[label] = run(prompt, args.steps, on_step)
            firsts[(framework, not native)] = stamps[0] - start
            if bar:
                bar.close()

    # The time per step: timing.decode_step_times, the benchmark's measurement (module docstring).
    if firsts:
        bar = ProgressBar("timing", 1, sys.stderr, interactive) if args.progress != "never" else None
        times = timing.decode_step_times(list(firsts), config, weights, args.batch, args.rounds)
        if bar:
            bar.advance()
            bar.close()
        print(f"{timing.threads()}; each time: {timing.method(args.batch, args.rounds)}")
        for (framework, fused), seconds in times.items():
            label = f"{framework} ({'fused_kernels' if fused else 'own ops'})"
            print(f"{label:32s} {seconds * 1e3:8.2f} ms/step (first step {firsts[(framework, fused)] * 1e3:.0f} ms)"
                  f"  tokens {results[label].tolist()}")
        speedups = [f"{f} {times[(f, False)] / times[(f, True)]:.2f}x" for f in frameworks
                    if (f, True) in times and (f, False) in times]
        if speedups:
            print(f"fused_kernels ops over own ops: {', '.join(speedups)}")

    if not results:
        print("no framework ran")
        return 1
    reference = next(iter(results.values()))
    differ = [label for label, tokens in results.items() if tokens.tolist() != reference.tolist()]
    if differ:
        print(f"tokens differ from {next(iter(results))}'s: {', '.join(differ)}")
        return 1
    print(f"tokens equal across {len(results)} run{'s' if len(results) > 1 else ''}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
