"""The tiny decoder-only model of the examples: its configuration and random weights (numpy,
the same for every framework, so that every framework decodes the same tokens).

A layer is pre-norm: ``h = h + attention(rms_norm(h))``, ``h = h + mlp(rms_norm(h))``, with
grouped-query attention (rotary embeddings, a KV cache) and a gated SiLU MLP; every linear
layer is weight-only int8 with one scale per output channel (``quantize_int8``).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class Config:
    """Sizes of the model. The defaults are a tiny model for tests; :data:`SMALL` is the
    benchmark's and the demo's."""

    vocab: int = 256
    hidden: int = 128
    heads: int = 4
    kv_heads: int = 2
    head_dim: int = 32
    intermediate: int = 256
    layers: int = 2
    max_positions: int = 64
    eps: float = 1e-5
    rope_theta: float = 10000.0


#: A small LLM's layer shapes (hidden 1024, 16 heads of 64, 4 KV heads, MLP 2816), 4 layers.
SMALL = Config(vocab=8192, hidden=1024, heads=16, kv_heads=4, head_dim=64, intermediate=2816, layers=4,
               max_positions=256)


def cos_sin_cache(config: Config) -> np.ndarray:
    """float32 ``[max_positions, head_dim]``: cos of the rotary angles, then sin."""
    half = config.head_dim // 2
    inv_freq = 1.0 / config.rope_theta ** (np.arange(half, dtype=np.float64) / half)
    angles = np.arange(config.max_positions, dtype=np.float64)[:, None] * inv_freq[None, :]
    return np.concatenate([np.cos(angles), np.sin(angles)], axis=1).astype(np.float32)


def random_weights(config: Config, seed: int = 0) -> dict:
    """Random weights, the linear layers quantized to int8 with per-channel scales:
    ``{"embed", "cos_sin", "final_norm", "lm_head": (q, scales), "layers": [{...}]}``."""
    import fused_kernels

    rng = np.random.default_rng(seed)
    c = config

    def linear(n_out, n_in):
        w = (rng.standard_normal((n_out, n_in)) / np.sqrt(n_in)).astype(np.float32)
        return fused_kernels.quantize_int8(w)

    def norm():
        return (1.0 + 0.1 * rng.standard_normal(c.hidden)).astype(np.float32)

    layers = []
    for _ in range(c.layers):
        layers.append({
            "attn_norm": norm(),
            "qkv": linear((c.heads + 2 * c.kv_heads) * c.head_dim, c.hidden),
            "o": linear(c.hidden, c.heads * c.head_dim),
            "mlp_norm": norm(),
            "gate_up": linear(2 * c.intermediate, c.hidden),
            "down": linear(c.hidden, c.intermediate),
        })
    return {
        "embed": rng.standard_normal((c.vocab, c.hidden)).astype(np.float32),
        "cos_sin": cos_sin_cache(c),
        "final_norm": norm(),
        "lm_head": linear(c.vocab, c.hidden),
        "layers": layers,
    }


def prompt(config: Config, batch: int, length: int, seed: int = 1) -> np.ndarray:
    """int64 ``[batch, length]`` random token ids."""
    return np.random.default_rng(seed).integers(0, config.vocab, size=(batch, length), dtype=np.int64)
