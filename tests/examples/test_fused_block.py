"""The decoder of examples/fused_kernels (attention with rotary and a KV cache, gated MLP,
norms; int8 linear layers) written with the fused ops matches the same decoder written in
the framework's own ops: one step's logits (float32: rtol/atol 1e-4, the int8 matmul and the
norms reassociate sums), and greedy decoding of a tiny random model gives the same tokens,
in numpy, torch eager and torch.compile (inductor). jax.jit is tests/examples/test_fused_block_jax.py."""

from __future__ import annotations

import numpy as np
import pytest

from fused_kernels_support import fused_kernels

STEPS = 5


@pytest.fixture(scope="module")
def setup():
    fused_kernels()
    from fused_kernels import model
    config = model.Config()
    return config, model.random_weights(config), model.prompt(config, batch=2, length=4)


def test_numpy_block_matches_numpy_ops(setup):
    from fused_kernels import numpy_block as nb
    config, weights, prompt = setup
    logits = []
    for ops in (nb.NativeOps(), nb.FusedOps()):
        cache = nb.new_cache(config, 2)
        for pos in range(3):
            out = nb.decode_step(ops, config, weights, prompt[:, pos], pos, cache)
        logits.append(out)
    np.testing.assert_allclose(logits[1], logits[0], rtol=1e-4, atol=1e-4)
    native = nb.generate(nb.NativeOps(), config, weights, prompt, STEPS)
    fused = nb.generate(nb.FusedOps(), config, weights, prompt, STEPS)
    assert native.shape == (2, STEPS) and fused.tolist() == native.tolist()


def test_torch_block_eager_and_compiled_match_torch_ops(setup):
    torch = pytest.importorskip("torch", reason="torch not installed")
    from fused_kernels import numpy_block as nb
    from fused_kernels import torch_block as tb
    config, weights, prompt = setup
    native = tb.Decoder(tb.NativeOps(), config, weights)
    fused = tb.Decoder(tb.FusedOps(), config, weights)
    with torch.no_grad():
        caches = [native.new_cache(2), fused.new_cache(2)]
        for pos in range(3):
            p = torch.tensor([pos])
            want = native(torch.from_numpy(prompt[:, pos]), p, caches[0])
            got = fused(torch.from_numpy(prompt[:, pos]), p, caches[1])
    np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(caches[1][0][0].numpy(), caches[0][0][0].numpy(), rtol=1e-4, atol=1e-4)

    tokens = tb.generate(native, native, prompt, STEPS)
    assert tb.generate(fused, fused, prompt, STEPS).tolist() == tokens.tolist()
    # The same tokens as numpy's: one model, one set of weights.
    assert nb.generate(nb.FusedOps(), config, weights, prompt, STEPS).tolist() == tokens.tolist()

    torch._dynamo.reset()
    compiled = torch.compile(fused, backend="inductor", fullgraph=True)
    assert tb.generate(compiled, fused, prompt, STEPS).tolist() == tokens.tolist()
    # Each fused op is one node of the compiled graph (fullgraph=True: no graph break).
    graphs = []
    torch._dynamo.reset()
    torch.compile(fused, backend=lambda gm, _: graphs.append(gm) or gm.forward, fullgraph=True)(
        torch.from_numpy(prompt[:, 0]), torch.tensor([0]), fused.new_cache(2))
    targets = {str(n.target) for n in graphs[0].graph.nodes if n.op == "call_function"}
    assert {"fused_kernels.int8_matmul.default", "fused_kernels.add_rms_norm.default",
            "fused_kernels.rotary_embedding.default", "fused_kernels.softmax.default",
            "fused_kernels.silu_and_mul.default"} <= targets, targets


def test_torch_block_bfloat16(setup):
    torch = pytest.importorskip("torch", reason="torch not installed")
    from fused_kernels import torch_block as tb
    config, weights, prompt = setup
    native = tb.Decoder(tb.NativeOps(), config, weights, torch.bfloat16)
    fused = tb.Decoder(tb.FusedOps(), config, weights, torch.bfloat16)
    with torch.no_grad():
        p = torch.tensor([0])
        want = native(torch.from_numpy(prompt[:, 0]), p, native.new_cache(2))
        got = fused(torch.from_numpy(prompt[:, 0]), p, fused.new_cache(2))
    assert got.dtype == torch.bfloat16
    # bfloat16 through 2 layers: the two roundings orders differ by a few bfloat16 ulp of the logits' scale.
    scale = want.float().abs().max().item()
    np.testing.assert_allclose(got.float().numpy(), want.float().numpy(), rtol=0, atol=0.05 * scale)
