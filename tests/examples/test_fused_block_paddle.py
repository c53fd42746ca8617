"""The decoder of examples/fused_kernels in paddle (float32): written with the fused ops it
matches the same decoder written in paddle's own ops, eagerly and under
``paddle.jit.to_static`` (SOT and full_graph), where each fused op is a node of the static
program (issue 43, item 6): one step's logits (rtol/atol 1e-4, as the torch test) and greedy
decoding of a tiny random model."""

from __future__ import annotations

import numpy as np
import pytest

from fused_kernels_support import fused_kernels

paddle = pytest.importorskip("paddle", reason="paddle not installed")

STEPS = 4


@pytest.fixture(scope="module")
def setup():
    fused_kernels()
    from fused_kernels import model
    from tensorplug_adapters.paddle import static as paddle_static

    if not paddle_static.register():
        pytest.skip(f"paddle's operator could not be built: {paddle_static.error()}")
    config = model.Config()
    return config, model.random_weights(config), model.prompt(config, batch=2, length=3)


@pytest.mark.parametrize("mode", ["eager", "sot", "full_graph"])
def test_paddle_block_matches_paddle_ops(setup, mode):
    from fused_kernels import paddle_block as pb

    config, weights, prompt = setup
    native = pb.Decoder(pb.NativeOps(), config, weights)
    fused = pb.Decoder(pb.FusedOps(), config, weights)
    step = fused if mode == "eager" else paddle.jit.to_static(fused, full_graph=mode == "full_graph")
    with paddle.no_grad():
        caches = [native.new_cache(2), fused.new_cache(2)]
        for pos in range(3):
            tokens = paddle.to_tensor(prompt[:, pos])
            want, caches[0] = native(tokens, pos, caches[0])
            got, caches[1] = step(tokens, pos, caches[1])
            np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=1e-4, atol=1e-4)
    tokens_native = pb.generate(native, native, prompt, STEPS)
    tokens_fused = pb.generate(step, fused, prompt, STEPS)
    assert tokens_native.shape == (2, STEPS) and tokens_fused.tolist() == tokens_native.tolist()
