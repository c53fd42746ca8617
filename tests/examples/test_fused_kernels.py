"""examples/fused_kernels: each kernel against the same computation in each framework's own
operations (the NativeOps of the package's *_block modules: torch, jax, numpy; paddle's own
functional ops), float32 and bfloat16, contiguous and strided inputs; the backward kernels
against torch's autograd and jax.vjp; errors.

Tolerances: float32 results within rtol 1e-5 / atol 2e-5 of the reference (the kernels
reassociate sums and use their own exp, within 2 ulp). bfloat16 results within one
bfloat16 rounding of a float32 reference computed from the same bfloat16 inputs: rtol 1.6e-2,
atol 1.6e-2 (an ulp of bfloat16 is 2**-8 relative; the reference rounds once more at its end).
"""

from __future__ import annotations

import numpy as np
import pytest

from fused_kernels_support import Framework, fused_kernels

TOL = {"float32": dict(rtol=1e-5, atol=2e-5), "bfloat16": dict(rtol=1.6e-2, atol=1.6e-2)}
CASES = [("numpy", "float32"), ("torch", "float32"), ("torch", "bfloat16"), ("jax", "float32"),
         ("jax", "bfloat16"), ("paddle", "float32")]
# paddle 3.3 has no bfloat16 CPU kernels for add, matmul or softmax: its reference cannot run in bfloat16.


@pytest.fixture(scope="module")
def fk():
    return fused_kernels()


def native(framework: str):
    """The framework's own operations (NativeOps of its block module; paddle's written here)."""
    if framework == "numpy":
        from fused_kernels import numpy_block
        return numpy_block.NativeOps()
    if framework == "torch":
        from fused_kernels import torch_block
        return torch_block.NativeOps()
    if framework == "jax":
        from fused_kernels import jax_block
        return jax_block.NativeOps()
    return PaddleOps()


class PaddleOps:
    """paddle's own functional ops, float32 math."""

    def __init__(self):
        import paddle
        import paddle.nn.functional as F
        self.paddle, self.F = paddle, F

    def rms_norm(self, x, w, eps):
        xf = x.astype("float32")
        out = xf * self.paddle.rsqrt((xf * xf).mean(-1, keepdim=True) + eps) * w.astype("float32")
        return out.astype(x.dtype)

    def add_rms_norm(self, x, residual, w, eps):
        h = x + residual
        return self.rms_norm(h, w, eps), h

    def silu_and_mul(self, x):
        a, b = self.paddle.chunk(x.astype("float32"), 2, axis=-1)
        return (self.F.silu(a) * b).astype(x.dtype)

    def softmax(self, x):
        return self.F.softmax(x.astype("float32"), axis=-1).astype(x.dtype)

    def linear(self, x, w):
        q, scales = w
        return (x.astype("float32") @ q.astype("float32").T * scales).astype(x.dtype)

    def greedy(self, logits):
        return logits.argmax(-1)


def strided(a: np.ndarray) -> np.ndarray:
    """The same values as ``a``, as a view with a row stride and an element stride of 2."""
    big = np.zeros((a.shape[0] * 2, a.shape[1] * 2), a.dtype) if a.ndim == 2 else None
    if big is None:
        raise ValueError(a.shape)
    big[::2, ::2] = a
    return big[::2, ::2]


def make(fw: Framework, a: np.ndarray, dtype: str, layout: str):
    """``a`` in the framework, contiguous or as a strided view (numpy and torch only: jax arrays
    have no strides, paddle's slices are copies)."""
    if layout == "contiguous":
        return fw.array(a, dtype)
    if fw.name == "numpy":
        return strided(a)
    t = fw.array(np.zeros((a.shape[0] * 2, a.shape[1] * 2), np.float32), dtype)[::2, ::2]
    t.copy_(fw.array(a, dtype))
    assert not t.is_contiguous()
    return t


def layouts(framework):
    return ("contiguous", "strided") if framework in ("numpy", "torch") else ("contiguous",)


PARAMS = [(f, d, lay) for f, d in CASES for lay in layouts(f)]


def check(fw, got, want, dtype):
    assert type(got) is type(want)
    np.testing.assert_allclose(fw.numpy(got), fw.numpy(want), **TOL[dtype])


@pytest.mark.parametrize("framework,dtype,layout", PARAMS)
def test_norms_silu_softmax_match_the_frameworks_ops(fk, framework, dtype, layout):
    fw = Framework(framework)
    ops = native(framework)
    rng = np.random.default_rng(0)
    x_np = rng.standard_normal((5, 96)).astype(np.float32)
    r_np = rng.standard_normal((5, 96)).astype(np.float32)
    w_np = (1 + 0.1 * rng.standard_normal(96)).astype(np.float32)
    x, r, w = make(fw, x_np, dtype, layout), make(fw, r_np, dtype, layout), fw.array(w_np, dtype)

    check(fw, fk.rms_norm(x, w, 1e-5), ops.rms_norm(x, w, 1e-5), dtype)
    out, h = fk.add_rms_norm(x, r, w, 1e-5)
    want_out, want_h = ops.add_rms_norm(x, r, w, 1e-5)
    check(fw, h, want_h, dtype)
    check(fw, out, want_out, dtype)
    check(fw, fk.silu_and_mul(x), ops.silu_and_mul(x), dtype)
    assert tuple(fk.silu_and_mul(x).shape) == (5, 48)
    check(fw, fk.softmax(x * 4), ops.softmax(x * 4), dtype)
    assert str(fk.rms_norm(x, w, 1e-5).dtype).endswith(dtype)


@pytest.mark.parametrize("framework,dtype,layout", PARAMS)
def test_int8_linear_matches_dequantized_matmul(fk, framework, dtype, layout):
    fw = Framework(framework)
    ops = native(framework)
    rng = np.random.default_rng(1)
    w_np = rng.standard_normal((40, 64)).astype(np.float32)
    q_np, s_np = fk.quantize_int8(w_np)
    # The quantization: within one step of round(w / scale), scale = max|w| / 127 per row.
    np.testing.assert_allclose(s_np, np.abs(w_np).max(1) / 127, rtol=1e-6)
    assert q_np.dtype == np.int8 and np.abs(q_np.astype(int) - np.round(w_np / s_np[:, None])).max() <= 1
    q, s = fw.array(q_np), fw.array(s_np)
    x_np = rng.standard_normal((6, 64)).astype(np.float32)
    x = make(fw, x_np, dtype, layout)
    got = fk.int8_matmul(x, q, s)
    assert tuple(got.shape) == (6, 40)
    # An int8 dot product of 64 terms: float32 sums in another order, a few ulp of the total.
    tol = TOL[dtype] if dtype == "bfloat16" else dict(rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(fw.numpy(got), fw.numpy(ops.linear(x, (q, s))), **tol)
    row = x[2]
    np.testing.assert_allclose(fw.numpy(fk.int8_matvec(row, q, s)), fw.numpy(ops.linear(x, (q, s)))[2], **tol)


@pytest.mark.parametrize("framework,dtype,layout", PARAMS)
def test_sampling(fk, framework, dtype, layout):
    fw = Framework(framework)
    ops = native(framework)
    rng = np.random.default_rng(2)
    logits_np = rng.standard_normal((4, 300)).astype(np.float32)
    logits = make(fw, logits_np, dtype, layout)
    greedy = fw.numpy(fk.sample_greedy(logits))
    # jax without x64 holds the int64 result as int32, as it does every int64 array.
    index_type = np.int32 if framework == "jax" and not fw.mod.config.jax_enable_x64 else np.int64
    assert greedy.dtype == index_type and greedy.tolist() == fw.numpy(ops.greedy(logits)).astype(np.int64).tolist()
    assert fw.numpy(fk.sample_top_k(logits, 1, 1.0, 7)).tolist() == greedy.tolist()
    values = fw.numpy(logits)
    top5 = np.argsort(-values, axis=1, kind="stable")[:, :5]
    for seed in range(20):
        picked = fw.numpy(fk.sample_top_k(logits, 5, 0.7, seed))
        assert all(p in top5[i] for i, p in enumerate(picked))
    # Reproducible: the same seed gives the same tokens as from numpy.
    assert fw.numpy(fk.sample_top_k(logits, 5, 0.7, 3)).tolist() == \
        fk.sample_top_k(np.ascontiguousarray(values), 5, 0.7, 3).tolist()


def test_top_k_draws_follow_the_softmax_of_the_top_k(fk):
    logits = np.array([2.0, 1.0, 0.5, 3.0, -1.0, 0.0], np.float32)
    rows = np.tile(logits, (20000, 1))
    picked = fk.sample_top_k(rows, 3, 0.8, 11)
    top = [3, 0, 1]
    p = np.exp(logits[top] / 0.8)
    p /= p.sum()
    freq = np.array([(picked == t).mean() for t in top])
    assert set(np.unique(picked)) <= set(top)
    np.testing.assert_allclose(freq, p, atol=0.015)  # 4 standard deviations at 20000 draws


@pytest.mark.parametrize("framework,dtype", [c for c in CASES if c[0] != "paddle"])
def test_rotary_in_place_matches_the_frameworks_rotation(fk, framework, dtype):
    fw = Framework(framework)
    ops = native(framework)
    from fused_kernels import model
    config = model.Config(head_dim=32, max_positions=16)
    cos_sin = fw.array(model.cos_sin_cache(config))
    rng = np.random.default_rng(3)
    qkv_np = rng.standard_normal((3, (4 + 2 * 2) * 32)).astype(np.float32)
    positions = fw.array(np.array([0, 5, 15], np.int64))
    qkv = fw.array(qkv_np, dtype)
    # q and k as strided views of the projection's output (torch, numpy): the kernel writes them in place.
    q, k = qkv[:, :128].reshape(3, 4, 32), qkv[:, 128:192].reshape(3, 2, 32)
    want_q, want_k = ops.rotary(positions, q, k, cos_sin)
    want_q, want_k = fw.numpy(want_q), fw.numpy(want_k)
    result = fk.rotary_embedding(positions, q, k, cos_sin)
    if framework == "jax":
        q, k = result  # immutable arrays: the new values are returned
    else:
        assert result is None
        np.testing.assert_array_equal(fw.numpy(qkv)[:, 192:], fw.numpy(fw.array(qkv_np, dtype))[:, 192:])
    np.testing.assert_allclose(fw.numpy(q), want_q, **TOL[dtype])
    np.testing.assert_allclose(fw.numpy(k), want_k, **TOL[dtype])
    if framework == "torch":
        np.testing.assert_allclose(fw.numpy(qkv)[:, :128], want_q.reshape(3, 128), **TOL[dtype])


# ------------------------------------------------------------------ backward ----
@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_backward_kernels_match_torch_autograd(fk, dtype):
    torch = pytest.importorskip("torch", reason="torch not installed")
    from fused_kernels import torch_block
    ops = torch_block.NativeOps()
    tol = TOL[dtype] if dtype == "bfloat16" else dict(rtol=1e-4, atol=1e-5)
    dt = getattr(torch, dtype)
    g = torch.Generator().manual_seed(0)

    def leaf(*shape, scale=1.0):
        return (torch.randn(*shape, generator=g) * scale).to(dt).requires_grad_()

    def grads(f, inputs, grad_out):
        outs = f(*inputs)
        outs = outs if isinstance(outs, tuple) else (outs,)
        grad_out = grad_out if isinstance(grad_out, tuple) else (grad_out,)
        return torch.autograd.grad(outs, inputs, grad_out)

    def close(a, b):
        np.testing.assert_allclose(a.float().numpy(), b.float().numpy(), **tol)

    x, w = leaf(6, 64), leaf(64, scale=0.1)
    gy = torch.randn(6, 64, generator=g).to(dt)
    dx, dw = grads(lambda x, w: ops.rms_norm(x, w, 1e-5), (x, w), gy)
    kx, kw = fk.rms_norm_backward(gy, x.detach(), w.detach(), 1e-5)
    close(kx, dx)
    # dw sums 6 rows of bfloat16-rounded products: the tolerance of a sum.
    np.testing.assert_allclose(kw.float().numpy(), dw.float().numpy(), rtol=tol["rtol"], atol=6 * tol["atol"])

    r = leaf(6, 64)
    gh = torch.randn(6, 64, generator=g).to(dt)
    dx, dr, dw = grads(lambda x, r, w: ops.add_rms_norm(x, r, w, 1e-5), (x, r, w), (gy, gh))
    h = (x + r).detach()
    kx, kr, kw = fk.add_rms_norm_backward(gy, gh, h, w.detach(), 1e-5)
    close(kx, dx)
    close(kr, dr)
    assert kx.data_ptr() != kr.data_ptr()  # two tensors: an operator's results must not alias
    np.testing.assert_allclose(kw.float().numpy(), dw.float().numpy(), rtol=tol["rtol"], atol=6 * tol["atol"])

    gu = leaf(6, 128)
    gs = torch.randn(6, 64, generator=g).to(dt)
    (dgu,) = grads(ops.silu_and_mul, (gu,), gs)
    close(fk.silu_and_mul_backward(gs, gu.detach()), dgu)

    s = leaf(6, 64, scale=3.0)
    (ds,) = grads(ops.softmax, (s,), gy)
    close(fk.softmax_backward(gy, ops.softmax(s).detach()), ds)

    from fused_kernels import model
    cos_sin = torch.from_numpy(model.cos_sin_cache(model.Config(head_dim=32, max_positions=8)))
    positions = torch.tensor([1, 7])
    q, k = leaf(2, 4, 32), leaf(2, 2, 32)
    gq, gk = torch.randn(2, 4, 32, generator=g).to(dt), torch.randn(2, 2, 32, generator=g).to(dt)
    dq, dk = grads(lambda q, k: ops.rotary(positions, q, k, cos_sin), (q, k), (gq, gk))
    kq, kk = gq.clone(), gk.clone()
    assert fk.rotary_embedding_backward(positions, kq, kk, cos_sin) is None
    close(kq, dq)
    close(kk, dk)


def test_backward_kernels_match_jax_vjp(fk):
    jax = pytest.importorskip("jax", reason="jax not installed")
    jnp = jax.numpy
    from fused_kernels import jax_block
    ops = jax_block.NativeOps()
    rng = np.random.default_rng(4)
    x, w = jnp.asarray(rng.standard_normal((4, 32)), jnp.float32), jnp.asarray(rng.random(32), jnp.float32)
    g = jnp.asarray(rng.standard_normal((4, 32)), jnp.float32)
    _, vjp = jax.vjp(lambda x, w: ops.rms_norm(x, w, 1e-5), x, w)
    dx, dw = vjp(g)
    kx, kw = fk.rms_norm_backward(g, x, w, 1e-5)
    np.testing.assert_allclose(np.asarray(kx), np.asarray(dx), rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(np.asarray(kw), np.asarray(dw), rtol=1e-4, atol=1e-5)
    _, vjp = jax.vjp(ops.softmax, x)
    np.testing.assert_allclose(np.asarray(fk.softmax_backward(g, ops.softmax(x))), np.asarray(vjp(g)[0]),
                               rtol=1e-4, atol=1e-6)
    _, vjp = jax.vjp(ops.silu_and_mul, x)
    np.testing.assert_allclose(np.asarray(fk.silu_and_mul_backward(g[:, :16], x)), np.asarray(vjp(g[:, :16])[0]),
                               rtol=1e-4, atol=1e-5)


# ------------------------------------------- gradients through the ops (declared backward) ----
def _grad_cases():
    """(name, loss maker, inputs as float32 numpy, loss weights) for rms_norm, add_rms_norm (a
    loss using both of its results), silu_and_mul and softmax. ``make(ops, c)`` is the loss
    as a function of the differentiable inputs, from ``ops`` (the library or a NativeOps)."""
    rng = np.random.default_rng(7)
    x, r = rng.standard_normal((5, 48)).astype(np.float32), rng.standard_normal((5, 48)).astype(np.float32)
    w = (rng.random(48) + 0.5).astype(np.float32)
    u = rng.standard_normal((5, 96)).astype(np.float32)
    c = rng.standard_normal((5, 48)).astype(np.float32)  # weights the loss, so no gradient is trivially 0

    def add_norm(ops, c):
        def loss(x, r, w):
            out, h = ops.add_rms_norm(x, r, w, 1e-5)
            return (out * c).sum() + (h * h).sum()
        return loss

    return {
        "rms_norm": (lambda ops, c: lambda x, w: (ops.rms_norm(x, w, 1e-5) * c).sum(), (x, w), c),
        "add_rms_norm": (add_norm, (x, r, w), c),
        "silu_and_mul": (lambda ops, c: lambda u: (ops.silu_and_mul(u) * c).sum(), (u,), c),
        "softmax": (lambda ops, c: lambda x: (ops.softmax(x * 3.0) * c).sum(), (x,), c),
    }


class _FusedOps:
    """The library's ops under the NativeOps names the cases use."""

    def __init__(self, fk):
        self.rms_norm, self.add_rms_norm = fk.rms_norm, fk.add_rms_norm
        self.silu_and_mul, self.softmax = fk.silu_and_mul, fk.softmax


@pytest.mark.parametrize("case", ["rms_norm", "add_rms_norm", "silu_and_mul", "softmax"])
def test_torch_autograd_through_the_ops_equals_torch_own_gradients(fk, case):
    torch = pytest.importorskip("torch", reason="torch not installed")
    from fused_kernels import torch_block
    make, inputs, c = _grad_cases()[case]
    cw = torch.from_numpy(c)

    def gradients(ops):
        leaves = [torch.from_numpy(a).requires_grad_() for a in inputs]
        make(ops, cw)(*leaves).backward()
        return [leaf.grad.numpy() for leaf in leaves]

    got, want = gradients(_FusedOps(fk)), gradients(torch_block.NativeOps())
    assert len(got) == len(inputs)
    for g, e in zip(got, want):
        assert np.abs(e).max() > 1e-3  # the loss reaches every input
        np.testing.assert_allclose(g, e, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("jit", [False, True], ids=["eager", "jit"])
@pytest.mark.parametrize("case", ["rms_norm", "add_rms_norm", "silu_and_mul", "softmax"])
def test_jax_grad_through_the_ops_equals_jax_own_gradients(fk, case, jit):
    jax = pytest.importorskip("jax", reason="jax not installed")
    jnp = jax.numpy
    from fused_kernels import jax_block
    make, inputs, c = _grad_cases()[case]
    arrays = [jnp.asarray(a) for a in inputs]
    argnums = tuple(range(len(arrays)))

    def gradients(ops):
        f = jax.grad(make(ops, jnp.asarray(c)), argnums=argnums)
        return [np.asarray(g) for g in (jax.jit(f) if jit else f)(*arrays)]

    got, want = gradients(_FusedOps(fk)), gradients(jax_block.NativeOps())
    for g, e in zip(got, want):
        assert np.abs(e).max() > 1e-3
        np.testing.assert_allclose(g, e, rtol=1e-4, atol=1e-5)


def test_the_declarations_name_their_backward_and_sharding(fk):
    assert fk.rms_norm.backward.function is fk.rms_norm_backward
    assert [s.name for s in fk.rms_norm.backward.saves] == ["x", "weight", "eps"]
    assert fk.add_rms_norm.backward.differentiable == ("x", "residual", "weight")
    assert [s.name for s in fk.softmax.backward.saves] == ["result"]
    assert fk.silu_and_mul.backward.function is fk.silu_and_mul_backward
    # An op that writes its arguments has none (and cannot declare one).
    assert fk.rotary_embedding.backward is None
    for op in (fk.int8_matmul, fk.quantize_int8, fk.sample_greedy):
        assert op.backward is None
    assert fk.rms_norm.sharding.text == "... [n], [n] -> ... [n]"
    assert fk.int8_matmul.sharding.text == "m k, n k, n -> m n"
    assert fk.sample_top_k.sharding.whole == frozenset({"b", "v"})


def test_sharding_rules_fit_the_shapes_of_a_decode_step(fk):
    """Each rule bound to the shapes the decoder block calls the op with: which dimensions split."""
    from tensorplug import Device, TensorSpec

    def split(op, **args):
        cpu = Device("cpu", 0)
        specs = {k: TensorSpec(v[0], v[1], cpu) if isinstance(v, tuple) else v for k, v in args.items()}
        return set(op.sharding.bind(op, specs).splittable)

    f32 = "float32"
    assert split(fk.rms_norm, x=((4, 64), f32), weight=((64,), f32), eps=1e-5) == {"...0"}
    assert split(fk.add_rms_norm, x=((2, 4, 64), f32), residual=((2, 4, 64), f32), weight=((64,), f32),
                 eps=1e-5) == {"...0", "...1"}
    assert split(fk.silu_and_mul, x=((4, 128), f32)) == {"...0"}
    assert split(fk.softmax, x=((4, 8, 16), f32)) == {"...0", "...1"}
    assert split(fk.rotary_embedding, positions=((4,), "int64"), q=((4, 8, 32), f32), k=((4, 2, 32), f32),
                 cos_sin_cache=((16, 32), f32)) == {"...0"}
    assert split(fk.int8_matvec, x=((64,), f32), w=((32, 64), "int8"), scales=((32,), f32)) == {"n"}
    assert split(fk.int8_matmul, x=((4, 64), f32), w=((32, 64), "int8"), scales=((32,), f32)) == {"m", "n"}
    assert split(fk.quantize_int8, w=((32, 64), f32)) == {"n"}
    assert split(fk.sample_greedy, logits=((4, 100), f32)) == {"b"}
    assert split(fk.sample_top_k, logits=((4, 100), f32), k=5, temperature=1.0, seed=0) == set()
    with pytest.raises(ValueError, match=r"fused_kernels::rms_norm: sharding rule '\.\.\. \[n\], \[n\] -> "
                                         r"\.\.\. \[n\]': dimension 'n' is 64 in argument 'x' \(4, 64\) and 32 "
                                         r"in argument 'weight' \(32,\)"):
        split(fk.rms_norm, x=((4, 64), f32), weight=((32,), f32), eps=1e-5)


# -------------------------------------------------------------------- errors ----
def test_bad_arguments_raise_errors_naming_the_function_and_argument(fk):
    x = np.ones((2, 8), np.float32)
    w = np.ones(8, np.float32)
    with pytest.raises(TypeError, match=r"rms_norm\(\) argument 'x': expected a float32 or bfloat16 tensor, "
                                        r"got int32"):
        fk.rms_norm(x.astype(np.int32), w, 1e-5)
    with pytest.raises(ValueError, match=r"rms_norm\(\) argument 'weight': expected shape \[8\] \(the last "
                                         r"dimension of 'x'\), got \[4\]"):
        fk.rms_norm(x, w[:4], 1e-5)
    with pytest.raises(ValueError, match=r"rms_norm\(\) argument 'eps': expected a finite number >= 0, got -1"):
        fk.rms_norm(x, w, -1.0)
    with pytest.raises(ValueError, match=r"silu_and_mul\(\) argument 'x': expected an even last dimension"):
        fk.silu_and_mul(np.ones((2, 7), np.float32))
    q, s = fk.quantize_int8(np.ones((3, 8), np.float32))
    with pytest.raises(TypeError, match=r"int8_matmul\(\) argument 'w': expected a int8 tensor, got float32"):
        fk.int8_matmul(x, q.astype(np.float32), s)
    with pytest.raises(ValueError, match=r"int8_matmul\(\) argument 'w': expected \[n, 4\]"):
        fk.int8_matmul(x[:, :4], q, s)
    with pytest.raises(ValueError, match=r"int8_matvec\(\) argument 'scales': expected shape \[3\]"):
        fk.int8_matvec(x[0], q, s[:2])
    with pytest.raises(ValueError, match=r"sample_top_k\(\) argument 'k': expected 1 <= k <= vocab \(8\), got 9"):
        fk.sample_top_k(x, 9, 1.0, 0)
    with pytest.raises(ValueError, match=r"sample_top_k\(\) argument 'temperature': expected a finite number > 0"):
        fk.sample_top_k(x, 2, 0.0, 0)
    cache = np.zeros((4, 8), np.float32)
    qv, kv = np.ones((2, 2, 8), np.float32), np.ones((2, 1, 8), np.float32)
    with pytest.raises(IndexError, match=r"rotary_embedding\(\) argument 'positions': position 4 \(token 1\) is "
                                         r"outside the cache's 4 positions"):
        fk.rotary_embedding(np.array([0, 4]), qv, kv, cache)
    assert (qv == 1).all() and (kv == 1).all()  # nothing written before the check
    with pytest.raises(ValueError, match=r"rotary_embedding\(\) argument 'k': expected one position per token "
                                         r"\(2 positions\), got shape \[3, 1, 8\]"):
        fk.rotary_embedding(np.array([0, 1]), qv, np.ones((3, 1, 8), np.float32), cache)
    with pytest.raises(TypeError, match=r"rotary_embedding\(\) argument 'k': expected a float32 or bfloat16"):
        fk.rotary_embedding(np.array([0, 1]), qv, kv.astype(np.float64), cache)
    assert (qv == 1).all()


def test_ops_declare_their_outputs(fk):
    import tensorplug
    cpu = tensorplug.Device("cpu", 0)

    def spec(shape, dtype):
        return tensorplug.TensorSpec(shape, dtype, cpu)
    assert fk.silu_and_mul.output_specs({"x": spec((3, 5, 8), "bfloat16")}) == (spec((3, 5, 4), "bfloat16"),)
    assert fk.int8_matmul.output_specs({"x": spec((2, 16), "float32"), "w": spec((7, 16), "int8"),
                                        "scales": spec((7,), "float32")})[0].shape == (2, 7)
    assert fk.sample_greedy.output_specs({"logits": spec((4, 10), "float32")})[0] == spec((4,), "int64")
    assert fk.rotary_embedding.written == ("q", "k") and fk.rotary_embedding.n_outputs == 0
    assert fk.isa in ("avx512f+avx512bw+avx512vl+avx512dq", "avx2+fma", "generic")
