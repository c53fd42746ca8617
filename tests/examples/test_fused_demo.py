"""``python -m fused_kernels.demo`` (examples/fused_kernels, issue 26 item 6): run briefly on
the tiny model, it prints each framework's tokens and time per step, the tokens are equal
across frameworks (and equal to greedy decoding with numpy's own operations), and its
progress bar goes to stderr. Its time per step is fused_kernels.timing's measurement, the
one benchmarks/bench_fused.py reports (issue 45 item 2)."""

from __future__ import annotations

import importlib.util
import os
import re
import subprocess
import sys

import numpy as np
import pytest

from fused_kernels_support import fused_kernels

LINE = re.compile(r"^(?P<label>\S+ \((?:fused_kernels|own ops)\)) +(?P<ms>[0-9.]+) ms/step "
                  r"\(first step (?P<first>\d+) ms\)  tokens (?P<tokens>\[\[.*\]\])$")


def timing_method(batch: int, rounds: int) -> str:
    fused_kernels()
    from fused_kernels import timing
    return timing.method(batch, rounds)


def run_demo(*args: str) -> subprocess.CompletedProcess:
    package = os.path.dirname(os.path.dirname(fused_kernels().__file__))
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([package, os.environ.get("PYTHONPATH", "")])}
    done = subprocess.run([sys.executable, "-m", "fused_kernels.demo", *args], capture_output=True, env=env,
                          timeout=600)
    # Decoded by hand: text=True would turn the bar's carriage returns into newlines.
    return subprocess.CompletedProcess(done.args, done.returncode, done.stdout.decode(), done.stderr.decode())


def test_demo_prints_equal_tokens_and_time_per_step_in_each_framework():
    frameworks = ["numpy"] + [f for f in ("torch", "jax.jit") if importlib.util.find_spec(f.split(".")[0])]
    done = run_demo("--size", "tiny", "--batch", "2", "--prompt", "3", "--steps", "4", "--native",
                    "--frameworks", ",".join(frameworks), "--progress", "always")
    assert done.returncode == 0, done.stdout + done.stderr
    lines = done.stdout.splitlines()
    assert lines[0].startswith("fused_kernels demo: tiny model (hidden 128, 2 layers, vocab 256, int8 weights), "
                               "batch 2, prompt 3 tokens, 4 new tokens; kernels for ")
    # The measurement's method and the threads, then a row per run, the speedups, the verdict.
    assert lines[1].startswith("threads: fused_kernels "), lines
    assert lines[1].endswith("; each time: " + timing_method(2, 5)), lines
    rows = [LINE.match(line) for line in lines[2:-2]]
    assert all(rows), lines
    assert [m["label"] for m in rows] == [f"{f} ({kind})" for f in frameworks for kind in ("fused_kernels", "own ops")]
    assert all(float(m["ms"]) > 0 for m in rows)
    ms = {m["label"]: float(m["ms"]) for m in rows}
    speedups = re.fullmatch(r"fused_kernels ops over own ops: (.*)", lines[-2])
    assert speedups, lines
    pairs = [item.rsplit(" ", 1) for item in speedups.group(1).split(", ")]
    assert [f for f, _ in pairs] == frameworks
    for f, x in pairs:  # own time over fused time (the rows are rounded to 0.01 ms)
        assert float(x.rstrip("x")) == pytest.approx(ms[f"{f} (own ops)"] / ms[f"{f} (fused_kernels)"], rel=0.05, abs=0.02)
    tokens = {m["tokens"] for m in rows}
    assert len(tokens) == 1
    assert lines[-1] == f"tokens equal across {len(rows)} runs"

    # The tokens are those of greedy decoding in numpy's own operations.
    from fused_kernels import model, numpy_block as nb
    config = model.Config()
    want = nb.generate(nb.NativeOps(), config, model.random_weights(config), model.prompt(config, 2, 3), 4)
    assert tokens == {str(want.tolist())}

    # The progress bar: redrawn in place on stderr, step by step, ending with each run's total.
    assert "\rnumpy (fused_kernels) [------------------------------] 0/6" in done.stderr
    assert "\rnumpy (fused_kernels) [###############---------------] 3/6" in done.stderr
    assert re.search(r"\rnumpy \(own ops\) \[#{30}\] 6/6 in [0-9.]+ s\n", done.stderr)
    assert "ms/step" not in done.stderr


def test_demo_without_a_terminal_writes_one_line_per_run_and_refuses_bad_arguments():
    done = run_demo("--size", "tiny", "--prompt", "2", "--steps", "2", "--frameworks", "numpy")
    assert done.returncode == 0, done.stderr
    # stderr is a pipe: no redrawing, one final line per bar.
    assert "\r" not in done.stderr
    assert re.fullmatch(r"weights \[#{30}\] 1/1 in [0-9.]+ s\nnumpy \(fused_kernels\) \[#{30}\] 3/3 in [0-9.]+ s\n"
                        r"timing \[#{30}\] 1/1 in [0-9.]+ s\n", done.stderr), done.stderr
    assert done.stdout.splitlines()[-1] == "tokens equal across 1 run"

    done = run_demo("--frameworks", "numpy,tensorflow")
    assert done.returncode == 2
    assert ("python -m fused_kernels.demo: error: argument --frameworks: unknown tensorflow; choose from numpy, "
            "torch, torch.compile, jax.jit") in done.stderr
    done = run_demo("--size", "tiny", "--prompt", "60", "--steps", "10")
    assert done.returncode == 2
    assert "--prompt + --steps is 70; the tiny model holds 64 positions" in done.stderr
    done = run_demo("--steps", "1")
    assert done.returncode == 2
    assert "--steps must be at least 2, --prompt, --batch and --rounds at least 1" in done.stderr


def test_on_step_is_called_once_per_decode_step():
    fused_kernels()
    from fused_kernels import model, numpy_block as nb
    config = model.Config()
    seen: list[int] = []
    tokens = nb.generate(nb.FusedOps(), config, model.random_weights(config), model.prompt(config, 1, 3), 2,
                         on_step=seen.append)
    assert seen == [0, 1, 2, 3] and tokens.shape == (1, 2) and tokens.dtype == np.int64


def test_the_demo_and_the_benchmark_time_the_same_step_the_same_way():
    """One source for the decode-step times (issue 45 item 2): the benchmark's decode table
    comes from fused_kernels.timing.decode_step_times, the function the demo calls, and both
    runs of one step see the same model at the same position."""
    from pathlib import Path

    fused_kernels()
    from fused_kernels import demo, model, timing
    bench_path = Path(__file__).resolve().parents[2] / "benchmarks" / "bench_fused.py"
    source = bench_path.read_text()
    assert "timing.decode_step_times(" in source and "def interleaved" not in source
    assert "timing.decode_step_times(" in Path(demo.__file__).read_text()

    # The step itself: numpy's own ops and the fused ops give the same logits at POSITION.
    config = model.Config()
    weights = model.random_weights(config)
    own = timing.step_function("numpy", False, config, weights)()
    fused = timing.step_function("numpy", True, config, weights)()
    np.testing.assert_allclose(fused, own, rtol=2e-3, atol=2e-3)
    times = timing.decode_step_times([("numpy", False), ("numpy", True)], config, weights, rounds=1)
    assert set(times) == {("numpy", False), ("numpy", True)} and all(t > 0 for t in times.values())
    with pytest.raises(ValueError, match=r"step_function\(\) argument 'framework': expected one of numpy, torch, "
                                         r"torch.compile, jax.jit, got 'tensorflow'"):
        timing.step_function("tensorflow", True, config, weights)
