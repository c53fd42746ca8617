"""Train a small model with a fused RMSNorm kernel (rms_norm.cc) from torch and from jax.

The kernel and its backward are declared once::

    rms_norm = tensorplug.op("example::rms_norm", mod.rms_norm, returns=tensorplug.like("x"),
                             backward=tensorplug.backward(mod.rms_norm_backward, saves=("x", "weight", "eps"),
                                                          differentiable=("x", "weight")))

and each framework trains with it, by its own autodiff (``loss.backward()``; ``jax.grad``
under ``jax.jit``), next to the same model written in the framework's own ops. The model:
``mean((rms_norm(x @ W1) @ W2 - target) ** 2)`` with a learned RMSNorm weight, plain SGD.

    python examples/rms_norm_training/train.py [--steps N]

prints both loss curves per framework and the largest relative difference between them.
"""

from __future__ import annotations

import argparse
import functools
from pathlib import Path

import numpy as np

import tensorplug
from tensorplug import cpp

EPS = 1e-6
LEARNING_RATE = 0.5


@functools.cache
def rms_norm_op() -> tensorplug.Op:
    mod = tensorplug.load_module(cpp.build("rms_norm_example", [Path(__file__).with_name("rms_norm.cc")]))
    return tensorplug.op("example::rms_norm", mod.rms_norm, returns=tensorplug.like("x"),
                         backward=tensorplug.backward(mod.rms_norm_backward, saves=("x", "weight", "eps"),
                                                      differentiable=("x", "weight")))


def problem(seed: int = 0, rows: int = 16, features: int = 8):
    """The data and the initial parameters (float32 numpy arrays): x, target, w1, w2, weight."""
    rng = np.random.RandomState(seed)
    x = rng.randn(rows, features).astype(np.float32)
    target = rng.randn(rows, features).astype(np.float32)
    w1 = (rng.randn(features, features) / np.sqrt(features)).astype(np.float32)
    w2 = (rng.randn(features, features) / np.sqrt(features)).astype(np.float32)
    weight = np.ones(features, np.float32)
    return x, target, w1, w2, weight


def train_torch(steps: int) -> tuple[list[float], list[float]]:
    """Loss curves (fused kernel, torch's own ops) of ``steps`` SGD steps."""
    import torch

    rms_norm = rms_norm_op()

    def reference(h, weight, eps):
        return h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + eps) * weight

    curves = []
    for norm in (rms_norm, reference):
        x, target, *params = (torch.from_numpy(a) for a in problem())
        params = [p.clone().requires_grad_() for p in params]
        losses = []
        for _ in range(steps):
            w1, w2, weight = params
            loss = ((norm(x @ w1, weight, EPS) @ w2 - target) ** 2).mean()
            loss.backward()
            with torch.no_grad():
                for p in params:
                    p -= LEARNING_RATE * p.grad
                    p.grad = None
            losses.append(loss.item())
        curves.append(losses)
    return curves[0], curves[1]


def train_jax(steps: int) -> tuple[list[float], list[float]]:
    """Loss curves (fused kernel, jax's own ops) of ``steps`` SGD steps under ``jax.jit``."""
    import jax
    import jax.numpy as jnp

    rms_norm = rms_norm_op()

    def reference(h, weight, eps):
        return h * jax.lax.rsqrt(jnp.mean(h ** 2, axis=-1, keepdims=True) + eps) * weight

    curves = []
    for norm in (rms_norm, reference):
        x, target, *params = (jnp.asarray(a) for a in problem())

        @jax.jit
        def step(params, x, target, norm=norm):
            def loss_fn(params):
                w1, w2, weight = params
                return jnp.mean((norm(x @ w1, weight, EPS) @ w2 - target) ** 2)

            loss, grads = jax.value_and_grad(loss_fn)(params)
            return loss, [p - LEARNING_RATE * g for p, g in zip(params, grads)]

        losses = []
        for _ in range(steps):
            loss, params = step(params, x, target)
            losses.append(float(loss))
        curves.append(losses)
    return curves[0], curves[1]


def largest_relative_difference(a, b) -> float:
    return max(abs(p - q) / abs(q) for p, q in zip(a, b))


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=20)
    steps = parser.parse_args(argv).steps
    for name, train in (("torch", train_torch), ("jax", train_jax)):
        fused, reference = train(steps)
        print(f"{name}: fused     {' '.join(f'{v:.4f}' for v in fused)}")
        print(f"{name}: reference {' '.join(f'{v:.4f}' for v in reference)}")
        print(f"{name}: largest relative difference {largest_relative_difference(fused, reference):.1e}")


if __name__ == "__main__":
    main()
