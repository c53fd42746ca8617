"""The decoder block in jax: :class:`NativeOps` (jax's own operations) and :class:`FusedOps`
(the library's ops, XLA custom calls under ``jax.jit``), one pure :func:`decode_step`
written over either (the cache goes in and comes out; the position is traced, so the step
compiles once).
"""

from __future__ import annotations

import math
from functools import partial

import jax
import jax.numpy as jnp
import numpy as np

import fused_kernels as fk

from .model import Config


class NativeOps:
    """The block's operations in jax (float32 math, results in the input dtype)."""

    @staticmethod
    def rms_norm(x, w, eps):
        xf = x.astype(jnp.float32)
        return (xf * jax.lax.rsqrt(jnp.mean(xf * xf, -1, keepdims=True) + eps) * w.astype(jnp.float32)).astype(x.dtype)

    def add_rms_norm(self, x, residual, w, eps):
        h = x + residual
        return self.rms_norm(h, w, eps), h

    @staticmethod
    def rotary(positions, q, k, cos_sin):
        half = cos_sin.shape[1] // 2
        cs = cos_sin[positions][:, None, :]
        cos, sin = cs[..., :half], cs[..., half:]

        def rotate(x):
            xf = x.astype(jnp.float32)
            x1, x2 = xf[..., :half], xf[..., half:]
            return jnp.concatenate([x1 * cos - x2 * sin, x2 * cos + x1 * sin], axis=-1).astype(x.dtype)

        return rotate(q), rotate(k)

    @staticmethod
    def silu_and_mul(x):
        a, b = jnp.split(x.astype(jnp.float32), 2, axis=-1)
        return (jax.nn.silu(a) * b).astype(x.dtype)

    @staticmethod
    def softmax(x):
        return jax.nn.softmax(x.astype(jnp.float32), axis=-1).astype(x.dtype)

    @staticmethod
    def linear(x, w):
        q, scales = w
        return ((x.astype(jnp.float32) @ q.astype(jnp.float32).T) * scales).astype(x.dtype)

    @staticmethod
    def greedy(logits):
        return jnp.argmax(logits, -1)


class FusedOps:
    """The block's operations as fused_kernels ops (rotary returns the new q and k)."""

    rms_norm = staticmethod(fk.rms_norm)
    add_rms_norm = staticmethod(fk.add_rms_norm)
    silu_and_mul = staticmethod(fk.silu_and_mul)
    softmax = staticmethod(fk.softmax)
    greedy = staticmethod(fk.sample_greedy)
    rotary = staticmethod(fk.rotary_embedding)

    @staticmethod
    def linear(x, w):
        return fk.int8_matmul(x, *w)


def device_weights(weights: dict, dtype=jnp.float32) -> dict:
    """The numpy weights as jax arrays: float ones in ``dtype`` (the rotary table stays float32)."""
    def convert(value):
        if isinstance(value, dict):
            return {k: convert(v) for k, v in value.items()}
        if isinstance(value, (list, tuple)):
            return type(value)(convert(v) for v in value)
        return jnp.asarray(value, dtype if value.dtype == np.float32 and value.ndim > 0 else value.dtype)

    out = convert({k: v for k, v in weights.items() if k != "cos_sin"})
    out["cos_sin"] = jnp.asarray(weights["cos_sin"])
    for layer in out["layers"]:
        for name in ("qkv", "o", "gate_up", "down"):
            layer[name] = (layer[name][0], layer[name][1].astype(jnp.float32))
    out["lm_head"] = (out["lm_head"][0], out["lm_head"][1].astype(jnp.float32))
    return out


def new_cache(config: Config, batch: int, dtype=jnp.float32):
    shape = (batch, config.max_positions, config.kv_heads, config.head_dim)
    return tuple((jnp.zeros(shape, dtype), jnp.zeros(shape, dtype)) for _ in range(config.layers))


@partial(jax.jit, static_argnums=(0, 1))
def decode_step(ops, config: Config, weights: dict, tokens, pos, cache):
    """One decode step: ``(logits [batch, vocab], new cache)`` for ``tokens`` ``[batch]`` at ``pos``."""
    c = config
    b = tokens.shape[0]
    positions = jnp.full((b,), pos, jnp.int32)
    h = weights["embed"][tokens]
    residual = None
    group = c.heads // c.kv_heads
    nq, nk = c.heads * c.head_dim, c.kv_heads * c.head_dim
    visible = jnp.arange(c.max_positions) <= pos
    new_cache = []
    for layer, (k_cache, v_cache) in zip(weights["layers"], cache):
        if residual is None:
            x, residual = ops.rms_norm(h, layer["attn_norm"], c.eps), h
        else:
            x, residual = ops.add_rms_norm(h, residual, layer["attn_norm"], c.eps)
        qkv = ops.linear(x, layer["qkv"])
        q = qkv[:, :nq].reshape(b, c.heads, c.head_dim)
        k = qkv[:, nq:nq + nk].reshape(b, c.kv_heads, c.head_dim)
        v = qkv[:, nq + nk:].reshape(b, c.kv_heads, c.head_dim)
        q, k = ops.rotary(positions, q, k, weights["cos_sin"])
        k_cache = jax.lax.dynamic_update_slice(k_cache, k[:, None], (0, pos, 0, 0))
        v_cache = jax.lax.dynamic_update_slice(v_cache, v[:, None], (0, pos, 0, 0))
        new_cache.append((k_cache, v_cache))
        qg = q.reshape(b, c.kv_heads, group, c.head_dim)
        scores = jnp.einsum("bkgd,btkd->bkgt", qg, k_cache) / math.sqrt(c.head_dim)
        scores = jnp.where(visible, scores, jnp.asarray(-1e30, scores.dtype))
        probs = ops.softmax(scores)
        attn = jnp.einsum("bkgt,btkd->bkgd", probs, v_cache).reshape(b, nq)
        h = ops.linear(attn, layer["o"])
        x, residual = ops.add_rms_norm(h, residual, layer["mlp_norm"], c.eps)
        h = ops.linear(ops.silu_and_mul(ops.linear(x, layer["gate_up"])), layer["down"])
    x, _ = ops.add_rms_norm(h, residual, weights["final_norm"], c.eps)
    return ops.linear(x, weights["lm_head"]), tuple(new_cache)


def generate(ops, config: Config, weights: dict, prompt: np.ndarray, steps: int, on_step=None) -> np.ndarray:
    """Greedy decoding (the prompt a token at a time, then ``steps`` tokens); int64 ``[batch, steps]``.
    ``on_step(pos)``, if given, is called after each step (jax runs the prompt's steps
    asynchronously: a generated token waits for them)."""
    cache = new_cache(config, prompt.shape[0], weights["embed"].dtype)
    token = jnp.asarray(prompt[:, 0])
    out = []
    for pos in range(prompt.shape[1] + steps - 1):
        logits, cache = decode_step(ops, config, weights, token, jnp.int32(pos), cache)
        if pos + 1 < prompt.shape[1]:
            token = jnp.asarray(prompt[:, pos + 1])
        else:
            token = ops.greedy(logits).astype(jnp.int32)
            out.append(np.asarray(token))
        if on_step is not None:
            on_step(pos)
    return np.stack(out, axis=1).astype(np.int64)
