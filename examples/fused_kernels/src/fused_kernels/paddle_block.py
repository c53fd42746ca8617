"""The decoder block in paddle: :class:`NativeOps` (paddle's own operators) and
:class:`FusedOps` (the library's ops, each a node of paddle's static program under
``paddle.jit.to_static``), one :class:`Decoder` written over either. It runs eagerly and
under ``paddle.jit.to_static`` (SOT, or ``full_graph=True``); float32.

The KV cache is updated functionally (a step returns the new caches) and the position is a
Python int, so a compiled step is traced once per position.
"""

from __future__ import annotations

import math

import numpy as np
import paddle
import paddle.nn.functional as F

import fused_kernels as fk

from .model import Config


class NativeOps:
    """The block's operations in paddle's own operators (float32)."""

    @staticmethod
    def rms_norm(x, w, eps):
        return x * paddle.rsqrt((x * x).mean(-1, keepdim=True) + eps) * w

    def add_rms_norm(self, x, residual, w, eps):
        h = x + residual
        return self.rms_norm(h, w, eps), h

    @staticmethod
    def rotary(positions, q, k, cos_sin):
        half = cos_sin.shape[1] // 2
        cs = paddle.gather(cos_sin, positions)[:, None, :]
        cos, sin = cs[..., :half], cs[..., half:]

        def rotate(x):
            x1, x2 = x[..., :half], x[..., half:]
            return paddle.concat([x1 * cos - x2 * sin, x2 * cos + x1 * sin], axis=-1)

        return rotate(q), rotate(k)

    @staticmethod
    def silu_and_mul(x):
        a, b = paddle.chunk(x, 2, axis=-1)
        return F.silu(a) * b

    @staticmethod
    def softmax(x):
        return F.softmax(x, axis=-1)

    @staticmethod
    def linear(x, w):
        q, scales = w
        return paddle.matmul(x, q.astype("float32"), transpose_y=True) * scales

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
        # q and k are views of qkv; paddle's to_static refuses an in-place write into a view
        # (assign_out_ of a strided tensor), so the op writes copies.
        q, k = paddle.assign(q), paddle.assign(k)
        fk.rotary_embedding(positions, q, k, cos_sin)
        return q, k

    @staticmethod
    def linear(x, w):
        return fk.int8_matmul(x, *w)


class Decoder(paddle.nn.Layer):
    """The model of :mod:`fused_kernels.model` over ``ops``; :meth:`forward` is one decode step."""

    def __init__(self, ops, config: Config, weights: dict):
        super().__init__()
        self.ops, self.config = ops, config
        self.embed = paddle.to_tensor(weights["embed"])
        self.cos_sin = paddle.to_tensor(weights["cos_sin"])
        self.final_norm = paddle.to_tensor(weights["final_norm"])
        self.lm_head = tuple(paddle.to_tensor(a) for a in weights["lm_head"])
        self.weights = [{name: (tuple(paddle.to_tensor(a) for a in v) if isinstance(v, tuple)
                                else paddle.to_tensor(v)) for name, v in layer.items()}
                        for layer in weights["layers"]]

    def new_cache(self, batch: int):
        c = self.config
        shape = [batch, c.max_positions, c.kv_heads, c.head_dim]
        return [(paddle.zeros(shape), paddle.zeros(shape)) for _ in range(c.layers)]

    def forward(self, tokens, pos: int, cache):
        """``(logits [batch, vocab], new cache)`` for ``tokens`` int64 ``[batch]`` at position ``pos``."""
        c, ops = self.config, self.ops
        b = tokens.shape[0]
        positions = paddle.full([b], pos, dtype="int64")
        h = paddle.gather(self.embed, tokens)
        residual = None
        group = c.heads // c.kv_heads
        nq, nk = c.heads * c.head_dim, c.kv_heads * c.head_dim
        hidden = paddle.arange(c.max_positions) > pos
        new_cache = []
        for layer, (k_cache, v_cache) in zip(self.weights, cache):
            if residual is None:
                x, residual = ops.rms_norm(h, layer["attn_norm"], c.eps), h
            else:
                x, residual = ops.add_rms_norm(h, residual, layer["attn_norm"], c.eps)
            qkv = ops.linear(x, layer["qkv"])
            q = qkv[:, :nq].reshape([b, c.heads, c.head_dim])
            k = qkv[:, nq:nq + nk].reshape([b, c.kv_heads, c.head_dim])
            v = qkv[:, nq + nk:].reshape([b, c.kv_heads, c.head_dim])
            q, k = ops.rotary(positions, q, k, self.cos_sin)
            k_cache = paddle.concat([k_cache[:, :pos], k[:, None], k_cache[:, pos + 1:]], axis=1)
            v_cache = paddle.concat([v_cache[:, :pos], v[:, None], v_cache[:, pos + 1:]], axis=1)
            new_cache.append((k_cache, v_cache))
            qg = q.reshape([b, c.kv_heads, group, c.head_dim])
            scores = paddle.einsum("bkgd,btkd->bkgt", qg, k_cache) / math.sqrt(c.head_dim)
            scores = paddle.where(hidden, paddle.full_like(scores, -1e30), scores)
            probs = ops.softmax(scores)
            attn = paddle.einsum("bkgt,btkd->bkgd", probs, v_cache).reshape([b, nq])
            h = ops.linear(attn, layer["o"])
            x, residual = ops.add_rms_norm(h, residual, layer["mlp_norm"], c.eps)
            h = ops.linear(ops.silu_and_mul(ops.linear(x, layer["gate_up"])), layer["down"])
        x, _ = ops.add_rms_norm(h, residual, self.final_norm, c.eps)
        return ops.linear(x, self.lm_head), new_cache


def generate(step, decoder: Decoder, prompt: np.ndarray, steps: int) -> np.ndarray:
    """Greedy decoding with ``step`` (the decoder, or it under ``to_static``): the prompt a
    token at a time, then ``steps`` tokens; returns int64 ``[batch, steps]``."""
    cache = decoder.new_cache(prompt.shape[0])
    prompt_t = paddle.to_tensor(prompt)
    token = prompt_t[:, 0]
    out = []
    with paddle.no_grad():
        for pos in range(prompt.shape[1] + steps - 1):
            logits, cache = step(token, pos, cache)
            if pos + 1 < prompt.shape[1]:
                token = prompt_t[:, pos + 1]
            else:
                token = decoder.ops.greedy(logits)
                out.append(token)
    return paddle.stack(out, axis=1).numpy()
