"""The decoder block in torch: :class:`NativeOps` (torch's own operators) and
:class:`FusedOps` (the library's ops, which are ``torch.ops.fused_kernels.*``), one
:class:`Decoder` module written over either. It runs eagerly and under ``torch.compile``
(the fused ops are one graph node each; the step is traced once: the position is a tensor).
"""

from __future__ import annotations

import math

import numpy as np
import torch
import torch.nn.functional as F

import fused_kernels as fk

from .model import Config


class NativeOps:
    """The block's operations in torch's own operators (float32 math, results in the input dtype)."""

    @staticmethod
    def rms_norm(x, w, eps):
        return F.rms_norm(x.float(), (x.shape[-1],), w.float(), eps).to(x.dtype)

    def add_rms_norm(self, x, residual, w, eps):
        h = x + residual
        return self.rms_norm(h, w, eps), h

    @staticmethod
    def rotary(positions, q, k, cos_sin):
        half = cos_sin.shape[1] // 2
        cs = cos_sin[positions.long()][:, None, :]
        cos, sin = cs[..., :half], cs[..., half:]

        def rotate(x):
            xf = x.float()
            x1, x2 = xf[..., :half], xf[..., half:]
            return torch.cat([x1 * cos - x2 * sin, x2 * cos + x1 * sin], dim=-1).to(x.dtype)

        return rotate(q), rotate(k)

    @staticmethod
    def silu_and_mul(x):
        a, b = x.float().chunk(2, dim=-1)
        return (F.silu(a) * b).to(x.dtype)

    @staticmethod
    def softmax(x):
        return torch.softmax(x.float(), dim=-1).to(x.dtype)

    @staticmethod
    def linear(x, w):
        q, scales = w
        return ((x.float() @ q.float().T) * scales).to(x.dtype)

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


class Decoder(torch.nn.Module):
    """The model of :mod:`fused_kernels.model` over ``ops``; :meth:`forward` is one decode step."""

    def __init__(self, ops, config: Config, weights: dict, dtype=torch.float32):
        super().__init__()
        self.ops, self.config, self.dtype = ops, config, dtype
        self.embed = torch.from_numpy(weights["embed"]).to(dtype)
        self.cos_sin = torch.from_numpy(weights["cos_sin"])  # float32 always
        self.final_norm = torch.from_numpy(weights["final_norm"]).to(dtype)
        self.lm_head = tuple(torch.from_numpy(a) for a in weights["lm_head"])
        self.layers = [{name: (tuple(torch.from_numpy(a) for a in v) if isinstance(v, tuple)
                               else torch.from_numpy(v).to(dtype)) for name, v in layer.items()}
                       for layer in weights["layers"]]

    def new_cache(self, batch: int):
        c = self.config
        shape = (batch, c.max_positions, c.kv_heads, c.head_dim)
        return [(torch.zeros(shape, dtype=self.dtype), torch.zeros(shape, dtype=self.dtype)) for _ in range(c.layers)]

    def forward(self, tokens: torch.Tensor, pos: torch.Tensor, cache) -> torch.Tensor:
        """Logits ``[batch, vocab]`` for ``tokens`` int64 ``[batch]`` at position ``pos`` (int64 ``[1]``);
        writes the cache in place."""
        c, ops = self.config, self.ops
        b = tokens.shape[0]
        positions = pos.expand(b).contiguous()
        h = self.embed[tokens]
        residual = None
        group = c.heads // c.kv_heads
        nq, nk = c.heads * c.head_dim, c.kv_heads * c.head_dim
        hidden = torch.arange(c.max_positions) > pos
        for layer, (k_cache, v_cache) in zip(self.layers, cache):
            if residual is None:
                x, residual = ops.rms_norm(h, layer["attn_norm"], c.eps), h
            else:
                x, residual = ops.add_rms_norm(h, residual, layer["attn_norm"], c.eps)
            qkv = ops.linear(x, layer["qkv"])
            q = qkv[:, :nq].reshape(b, c.heads, c.head_dim)
            k = qkv[:, nq:nq + nk].reshape(b, c.kv_heads, c.head_dim)
            v = qkv[:, nq + nk:].reshape(b, c.kv_heads, c.head_dim)
            q, k = ops.rotary(positions, q, k, self.cos_sin)
            k_cache.index_copy_(1, pos, k[:, None])
            v_cache.index_copy_(1, pos, v[:, None])
            qg = q.reshape(b, c.kv_heads, group, c.head_dim)
            scores = torch.einsum("bkgd,btkd->bkgt", qg, k_cache) / math.sqrt(c.head_dim)
            scores = scores.masked_fill(hidden, -1e30)
            probs = ops.softmax(scores)
            attn = torch.einsum("bkgt,btkd->bkgd", probs, v_cache).reshape(b, nq)
            h = ops.linear(attn, layer["o"])
            x, residual = ops.add_rms_norm(h, residual, layer["mlp_norm"], c.eps)
            h = ops.linear(ops.silu_and_mul(ops.linear(x, layer["gate_up"])), layer["down"])
        x, _ = ops.add_rms_norm(h, residual, self.final_norm, c.eps)
        return ops.linear(x, self.lm_head)


def generate(step, decoder: Decoder, prompt: np.ndarray, steps: int, on_step=None) -> np.ndarray:
    """Greedy decoding with ``step`` (the decoder, or it compiled): the prompt a token at a
    time, then ``steps`` tokens; returns int64 ``[batch, steps]``. ``on_step(pos)``, if given,
    is called after each step."""
    cache = decoder.new_cache(prompt.shape[0])
    prompt_t = torch.from_numpy(prompt)
    token = prompt_t[:, 0]
    out = []
    with torch.no_grad():
        for pos in range(prompt.shape[1] + steps - 1):
            logits = step(token, torch.tensor([pos]), cache)
            if pos + 1 < prompt.shape[1]:
                token = prompt_t[:, pos + 1]
            else:
                token = decoder.ops.greedy(logits)
                out.append(token)
            if on_step is not None:
                on_step(pos)
    return torch.stack(out, dim=1).numpy()
