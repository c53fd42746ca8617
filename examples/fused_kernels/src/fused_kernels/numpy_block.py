"""The decoder block in numpy: :class:`NativeOps` (numpy's own operations) and
:class:`FusedOps` (the library's ops), one :func:`decode_step` written over either.

numpy has no graph compiler: each op is one kernel call. numpy has no bfloat16, so this
block is float32.
"""

from __future__ import annotations

import numpy as np

import fused_kernels as fk

from .model import Config


class NativeOps:
    """The block's operations in numpy."""

    @staticmethod
    def rms_norm(x, w, eps):
        return x / np.sqrt((x * x).mean(-1, keepdims=True) + eps) * w

    def add_rms_norm(self, x, residual, w, eps):
        h = x + residual
        return self.rms_norm(h, w, eps), h

    @staticmethod
    def rotary(positions, q, k, cos_sin):
        half = cos_sin.shape[1] // 2
        cos, sin = cos_sin[positions, None, :half], cos_sin[positions, None, half:]

        def rotate(x):
            x1, x2 = x[..., :half], x[..., half:]
            return np.concatenate([x1 * cos - x2 * sin, x2 * cos + x1 * sin], axis=-1)

        return rotate(q), rotate(k)

    @staticmethod
    def silu_and_mul(x):
        d = x.shape[-1] // 2
        a = x[..., :d]
        return a / (1 + np.exp(-a)) * x[..., d:]

    @staticmethod
    def softmax(x):
        e = np.exp(x - x.max(-1, keepdims=True))
        return e / e.sum(-1, keepdims=True)

    @staticmethod
    def linear(x, w):
        q, scales = w
        return (x @ q.T.astype(np.float32)) * scales

    @staticmethod
    def greedy(logits):
        return logits.argmax(-1)


class FusedOps:
    """The block's operations as fused_kernels ops (rotary in place)."""

    rms_norm = staticmethod(fk.rms_norm)
    add_rms_norm = staticmethod(fk.add_rms_norm)
    silu_and_mul = staticmethod(fk.silu_and_mul)
    softmax = staticmethod(fk.softmax)
    greedy = staticmethod(fk.sample_greedy)

    @staticmethod
    def rotary(positions, q, k, cos_sin):
        fk.rotary_embedding(positions, q, k, cos_sin)
        return q, k

    @staticmethod
    def linear(x, w):
        return fk.int8_matmul(x, *w)


def new_cache(config: Config, batch: int):
    """The KV cache: per layer, keys and values ``[batch, max_positions, kv_heads, head_dim]``."""
    shape = (batch, config.max_positions, config.kv_heads, config.head_dim)
    return [(np.zeros(shape, np.float32), np.zeros(shape, np.float32)) for _ in range(config.layers)]


def decode_step(ops, config: Config, weights: dict, tokens: np.ndarray, pos: int, cache) -> np.ndarray:
    """One decode step: ``tokens`` int64 ``[batch]`` at position ``pos``; writes the cache, returns logits."""
    c = config
    b = tokens.shape[0]
    positions = np.full(b, pos, np.int64)
    h = weights["embed"][tokens]
    residual = None
    group = c.heads // c.kv_heads
    visible = np.arange(c.max_positions) <= pos
    for layer, (k_cache, v_cache) in zip(weights["layers"], cache):
        if residual is None:
            x, residual = ops.rms_norm(h, layer["attn_norm"], c.eps), h
        else:
            x, residual = ops.add_rms_norm(h, residual, layer["attn_norm"], c.eps)
        qkv = ops.linear(x, layer["qkv"])
        nq, nk = c.heads * c.head_dim, c.kv_heads * c.head_dim
        q = qkv[:, :nq].reshape(b, c.heads, c.head_dim)
        k = qkv[:, nq:nq + nk].reshape(b, c.kv_heads, c.head_dim)
        v = qkv[:, nq + nk:].reshape(b, c.kv_heads, c.head_dim)
        q, k = ops.rotary(positions, q, k, weights["cos_sin"])
        k_cache[:, pos] = k
        v_cache[:, pos] = v
        qg = q.reshape(b, c.kv_heads, group, c.head_dim)
        scores = np.einsum("bkgd,btkd->bkgt", qg, k_cache) / np.float32(np.sqrt(c.head_dim))
        scores = np.where(visible, scores, np.float32(-1e30)).astype(np.float32)
        probs = ops.softmax(scores)
        attn = np.einsum("bkgt,btkd->bkgd", probs, v_cache).reshape(b, nq)
        h = ops.linear(np.ascontiguousarray(attn), layer["o"])
        x, residual = ops.add_rms_norm(h, residual, layer["mlp_norm"], c.eps)
        h = ops.linear(ops.silu_and_mul(ops.linear(x, layer["gate_up"])), layer["down"])
    x, _ = ops.add_rms_norm(h, residual, weights["final_norm"], c.eps)
    return ops.linear(x, weights["lm_head"])


def generate(ops, config: Config, weights: dict, prompt: np.ndarray, steps: int, on_step=None) -> np.ndarray:
    """Greedy decoding: feeds ``prompt`` ``[batch, length]`` a token at a time, then ``steps``
    new tokens; returns them, int64 ``[batch, steps]``. ``on_step(pos)``, if given, is called
    after each step (the demo's progress and timing)."""
    cache = new_cache(config, prompt.shape[0])
    out = []
    token = prompt[:, 0]
    for pos in range(prompt.shape[1] + steps - 1):
        logits = decode_step(ops, config, weights, token, pos, cache)
        if pos + 1 < prompt.shape[1]:
            token = prompt[:, pos + 1]
        else:
            token = np.asarray(ops.greedy(logits), np.int64)
            out.append(token)
        if on_step is not None:
            on_step(pos)
    return np.stack(out, axis=1)
