"""examples/rms_norm_training: a fused RMSNorm with its backward in C++, trained a few steps
from torch and from jax; the loss curves equal those of the same model in each framework's
own ops (docs/compilers.md records the full run)."""

import importlib.util
from pathlib import Path

import pytest

EXAMPLE = Path(__file__).parents[2] / "examples" / "rms_norm_training" / "train.py"


@pytest.fixture(scope="module")
def train():
    spec = importlib.util.spec_from_file_location("rms_norm_training", EXAMPLE)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("framework", ["torch", "jax"])
def test_loss_curve_equals_the_frameworks_own_ops(train, framework):
    pytest.importorskip(framework)
    fused, reference = getattr(train, f"train_{framework}")(steps=6)
    assert len(fused) == len(reference) == 6
    assert train.largest_relative_difference(fused, reference) < 1e-5, (fused, reference)
    assert fused[-1] < fused[0] * 0.5  # it trains: the fused kernel's gradients move the loss
    assert fused[0] == pytest.approx(1.9520, abs=1e-4)
