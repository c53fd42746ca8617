"""``python -m fused_kernels.demo`` (examples/fused_kernels, issue 26 item 6): run briefly on
the tiny model, it prints each framework's tokens and time per step, the tokens are equal
across frameworks (and equal to greedy decoding with numpy's own operations), and its
progress bar goes to stderr."""

from __future__ import annotations

import importlib.util
import os
import re
import subprocess
import sys

import numpy as np
import pytest

from fused_kernels_support import fused_kernels

LINE = re.compile(r"^(?P<label>\S+ \((?:fused_kernels|own ops)\)) +(?P<ms>[0-9.]+) ms/step \(median of (?P<n>\d+); "
                  r"first step (?P<first>\d+) ms\)  tokens (?P<tokens>\[\[.*\]\])$")


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
    rows = [LINE.match(line) for line in lines[1:-1]]
    assert all(rows), lines
    assert [m["label"] for m in rows] == [f"{f} ({kind})" for f in frameworks for kind in ("fused_kernels", "own ops")]
    for m in rows:
        assert int(m["n"]) == 3 and float(m["ms"]) > 0  # 4 generated steps: 3 intervals after the first
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
    assert re.fullmatch(r"weights \[#{30}\] 1/1 in [0-9.]+ s\nnumpy \(fused_kernels\) \[#{30}\] 3/3 in [0-9.]+ s\n",
                        done.stderr), done.stderr
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
    assert "--steps must be at least 2, --prompt and --batch at least 1" in done.stderr


def test_on_step_is_called_once_per_decode_step():
    fused_kernels()
    from fused_kernels import model, numpy_block as nb
    config = model.Config()
    seen: list[int] = []
    tokens = nb.generate(nb.FusedOps(), config, model.random_weights(config), model.prompt(config, 1, 3), 2,
                         on_step=seen.append)
    assert seen == [0, 1, 2, 3] and tokens.shape == (1, 2) and tokens.dtype == np.int64
