"""The decoder of examples/fused_kernels under jax.jit: the fused ops (XLA custom calls) give
the logits (rtol/atol 1e-4) and the greedy tokens of the same decoder in jax's own ops, and
the tokens numpy's decoder gives."""

from __future__ import annotations

import numpy as np
import pytest

from fused_kernels_support import fused_kernels


def test_jax_jit_block_matches_jax_ops():
    jax = pytest.importorskip("jax", reason="jax not installed")
    fused_kernels()
    from fused_kernels import jax_block as jb
    from fused_kernels import model
    from fused_kernels import numpy_block as nb
    config = model.Config()
    weights = model.random_weights(config)
    prompt = model.prompt(config, batch=2, length=4)
    dw = jb.device_weights(weights)
    native, fused = jb.NativeOps(), jb.FusedOps()
    logits = []
    for ops in (native, fused):
        cache = jb.new_cache(config, 2)
        for pos in range(3):
            out, cache = jb.decode_step(ops, config, dw, jax.numpy.asarray(prompt[:, pos]), jax.numpy.int32(pos),
                                        cache)
        logits.append(np.asarray(out))
    np.testing.assert_allclose(logits[1], logits[0], rtol=1e-4, atol=1e-4)
    # The fused step is compiled with the ops as custom calls.
    text = jb.decode_step.lower(fused, config, dw, jax.numpy.asarray(prompt[:, 0]), jax.numpy.int32(0),
                                jb.new_cache(config, 2)).as_text()
    assert "fused_kernels::int8_matmul" in text and "fused_kernels::rotary_embedding" in text
    tokens = jb.generate(native, config, dw, prompt, 5)
    assert jb.generate(fused, config, dw, prompt, 5).tolist() == tokens.tolist()
    assert nb.generate(nb.FusedOps(), config, weights, prompt, 5).tolist() == tokens.tolist()
