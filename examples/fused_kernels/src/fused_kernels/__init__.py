"""fused_kernels: the fused CPU kernels of a small LLM layer, as tensorplug ops.

Every kernel takes float32 or bfloat16 tensors of numpy, torch, jax or paddle at any
strides, computes in float32, and returns the caller's framework's tensors. Each is a
:func:`tensorplug.op`, so it is one operator inside ``torch.compile`` and one XLA custom
call inside ``jax.jit``. The wheel holds one host library that embeds the kernels built for
AVX-512, AVX2+FMA and baseline x86-64; the loader runs the first this CPU supports
(:data:`isa` says which).

Forward ops: :data:`rms_norm`, :data:`add_rms_norm`, :data:`rotary_embedding` (in place),
:data:`silu_and_mul`, :data:`softmax`, :data:`int8_matvec`, :data:`int8_matmul`,
:data:`quantize_int8`, :data:`sample_greedy`, :data:`sample_top_k`. Backward kernels, for
training: :data:`rms_norm_backward`, :data:`add_rms_norm_backward`,
:data:`rotary_embedding_backward`, :data:`silu_and_mul_backward`, :data:`softmax_backward`.
"""

import tensorplug

_library = tensorplug.load_module_from_package(__name__, "libfused_kernels.so")


def _half_last(x):
    # silu_and_mul: [..., 2d] -> [..., d]
    return tensorplug.TensorSpec((*x.shape[:-1], x.shape[-1] // 2), x.dtype)


def _op(name, returns=None, backward=None, sharding=None):
    return tensorplug.op(f"fused_kernels::{name}", getattr(_library, name), returns=returns, backward=backward,
                         sharding=sharding)


_like_x = tensorplug.like("x")
_tokens = tensorplug.Output(shape=("logits.shape[0]",), dtype="int64")

# Sharding rules (docs/compilers.md): the row-wise kernels split over their leading
# dimensions; the last dimension, which each row reduces over, stays whole ("[n]").

# The backward kernels come first: the forward ops' declarations name them.

#: ``rms_norm_backward(grad, x, weight, eps) -> (grad_x, grad_weight)``.
rms_norm_backward = _op("rms_norm_backward", (_like_x, tensorplug.like("weight")))
#: ``add_rms_norm_backward(grad, grad_residual, h, weight, eps) -> (grad_x, grad_residual_in, grad_weight)``:
#: ``grad`` of the normalized output, ``grad_residual`` of the returned sum ``h``; x and residual have one
#: gradient (that of h), returned as two tensors (copies: an operator's results must not alias).
add_rms_norm_backward = _op("add_rms_norm_backward",
                            (tensorplug.like("h"), tensorplug.like("h"), tensorplug.like("weight")))
#: ``rotary_embedding_backward(positions, grad_q, grad_k, cos_sin_cache)``: the inverse rotation, in place.
#: Not declared as rotary_embedding's backward: an op that writes its arguments cannot have one
#: (tensorplug.gradients); a training step calls it directly on the gradients of q and k.
rotary_embedding_backward = _op("rotary_embedding_backward", sharding="..., ... h [d], ... g [d], p [d] ->")
#: ``silu_and_mul_backward(grad, x)``: the gradient of x ``[..., 2d]``.
silu_and_mul_backward = _op("silu_and_mul_backward", _like_x, sharding="... [d], ... [n] -> ... [n]")
#: ``softmax_backward(grad, y)``: the gradient of softmax's input, from its output y.
softmax_backward = _op("softmax_backward", tensorplug.like("y"), sharding="... [n], ... [n] -> ... [n]")

#: ``rms_norm(x, weight, eps)``: ``x / sqrt(mean(x**2, -1) + eps) * weight``; x ``[..., n]``, weight ``[n]``.
#: Differentiable in x and weight.
rms_norm = _op("rms_norm", _like_x,
               backward=tensorplug.backward(rms_norm_backward, saves=("x", "weight", "eps"),
                                            differentiable=("x", "weight")),
               sharding="... [n], [n] -> ... [n]")
#: ``add_rms_norm(x, residual, weight, eps) -> (out, h)``: ``h = x + residual`` and ``rms_norm(h, weight, eps)``
#: in one pass (the pre-norm transformer's residual stream). Differentiable in x, residual and weight.
add_rms_norm = _op("add_rms_norm", (_like_x, _like_x),
                   backward=tensorplug.backward(add_rms_norm_backward, saves=("result[1]", "weight", "eps"),
                                                differentiable=("x", "residual", "weight"),
                                                grads=("grad", "grad_residual")),
                   sharding="... [n], ... [n], [n] -> ... [n], ... [n]")
#: ``rotary_embedding(positions, q, k, cos_sin_cache)``: rotates q ``[..., heads, d]`` and k ``[..., kv_heads, d]``
#: in place ("rotate half" form); ``cos_sin_cache`` is float32 ``[max_positions, d]``, cos then sin; positions
#: int64 or int32, one per token. Under jax (immutable arrays) it returns the new ``(q, k)``. It writes its
#: arguments, so it has no declared backward (see :data:`rotary_embedding_backward`); its sharding rule
#: needs positions with q's leading dimensions (``[tokens]`` for q ``[tokens, heads, d]``).
rotary_embedding = _op("rotary_embedding", sharding="..., ... h [d], ... g [d], p [d] ->")
#: ``silu_and_mul(x)``: ``silu(x[..., :d]) * x[..., d:]`` for x ``[..., 2d]``. Differentiable.
silu_and_mul = _op("silu_and_mul", _half_last,
                   backward=tensorplug.backward(silu_and_mul_backward, saves="x", differentiable="x"),
                   sharding="... [n] -> ... [d]")
#: ``softmax(x)``: softmax over the last dimension. Differentiable.
softmax = _op("softmax", _like_x,
              backward=tensorplug.backward(softmax_backward, saves="result", differentiable="x"),
              sharding="... [n] -> ... [n]")
#: ``int8_matvec(x, w, scales)``: ``(w * scales[:, None]) @ x`` for x ``[k]``, int8 w ``[n, k]``, float32 scales ``[n]``.
#: Splits over the output rows n (w's rows); k, the reduction, stays whole.
int8_matvec = _op("int8_matvec", tensorplug.Output(shape=("w.shape[0]",), dtype="x"), sharding="k, n k, n -> n")
#: ``int8_matmul(x, w, scales)``: ``x @ (w * scales[:, None]).T`` for x ``[m, k]``: a weight-only int8 linear layer.
#: Splits over the tokens m and the output features n; k stays whole.
int8_matmul = _op("int8_matmul", tensorplug.Output(shape=("x.shape[0]", "w.shape[0]"), dtype="x"),
                  sharding="m k, n k, n -> m n")
#: ``quantize_int8(w) -> (q, scales)``: symmetric per-row int8 weights, ``scales = max|w| / 127`` (float32).
quantize_int8 = _op("quantize_int8", (tensorplug.Output(shape=("w.shape[0]", "w.shape[1]"), dtype="int8"),
                                      tensorplug.Output(shape=("w.shape[0]",), dtype="float32")),
                    sharding="n [k] -> n [k], n")
#: ``sample_greedy(logits)``: int64 ``[batch]``, the argmax of each row of ``[batch, vocab]`` (first on ties).
sample_greedy = _op("sample_greedy", _tokens, sharding="b [v] -> b")
#: ``sample_top_k(logits, k, temperature, seed)``: int64 ``[batch]``, a draw from the softmax of each row's k
#: largest logits over temperature; reproducible from ``seed`` (the same tokens in every framework). The
#: draw of a row depends on its index in the batch, so the batch stays whole (a shard would renumber rows).
sample_top_k = _op("sample_top_k", _tokens, sharding="[b] [v] -> [b]")

#: The ISA of the kernel variant this CPU runs: ``"avx512f+avx512bw+avx512vl+avx512dq"``, ``"avx2+fma"`` or ``"generic"``.
isa: str = _library.isa()
#: Threads of the kernels' pool (``FUSED_KERNELS_NUM_THREADS``, else the number of cores).
num_threads: int = _library.num_threads()
#: The tensorplug ABI the binary was built for.
built_for_abi: int = _library.built_for_abi()

__all__ = [
    "add_rms_norm", "add_rms_norm_backward", "built_for_abi", "int8_matmul", "int8_matvec", "isa", "num_threads",
    "quantize_int8", "rms_norm", "rms_norm_backward", "rotary_embedding", "rotary_embedding_backward",
    "sample_greedy", "sample_top_k", "silu_and_mul", "silu_and_mul_backward", "softmax", "softmax_backward",
]
