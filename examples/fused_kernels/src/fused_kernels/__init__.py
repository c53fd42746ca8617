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


def _op(name, returns=None):
    return tensorplug.op(f"fused_kernels::{name}", getattr(_library, name), returns=returns)


_like_x = tensorplug.like("x")
_tokens = tensorplug.Output(shape=("logits.shape[0]",), dtype="int64")

#: ``rms_norm(x, weight, eps)``: ``x / sqrt(mean(x**2, -1) + eps) * weight``; x ``[..., n]``, weight ``[n]``.
rms_norm = _op("rms_norm", _like_x)
#: ``add_rms_norm(x, residual, weight, eps) -> (out, h)``: ``h = x + residual`` and ``rms_norm(h, weight, eps)``
#: in one pass (the pre-norm transformer's residual stream).
add_rms_norm = _op("add_rms_norm", (_like_x, _like_x))
#: ``rotary_embedding(positions, q, k, cos_sin_cache)``: rotates q ``[..., heads, d]`` and k ``[..., kv_heads, d]``
#: in place ("rotate half" form); ``cos_sin_cache`` is float32 ``[max_positions, d]``, cos then sin; positions
#: int64 or int32, one per token. Under jax (immutable arrays) it returns the new ``(q, k)``.
rotary_embedding = _op("rotary_embedding")
#: ``silu_and_mul(x)``: ``silu(x[..., :d]) * x[..., d:]`` for x ``[..., 2d]``.
silu_and_mul = _op("silu_and_mul", _half_last)
#: ``softmax(x)``: softmax over the last dimension.
softmax = _op("softmax", _like_x)
#: ``int8_matvec(x, w, scales)``: ``(w * scales[:, None]) @ x`` for x ``[k]``, int8 w ``[n, k]``, float32 scales ``[n]``.
int8_matvec = _op("int8_matvec", tensorplug.Output(shape=("w.shape[0]",), dtype="x"))
#: ``int8_matmul(x, w, scales)``: ``x @ (w * scales[:, None]).T`` for x ``[m, k]``: a weight-only int8 linear layer.
int8_matmul = _op("int8_matmul", tensorplug.Output(shape=("x.shape[0]", "w.shape[0]"), dtype="x"))
#: ``quantize_int8(w) -> (q, scales)``: symmetric per-row int8 weights, ``scales = max|w| / 127`` (float32).
quantize_int8 = _op("quantize_int8", (tensorplug.Output(shape=("w.shape[0]", "w.shape[1]"), dtype="int8"),
                                      tensorplug.Output(shape=("w.shape[0]",), dtype="float32")))
#: ``sample_greedy(logits)``: int64 ``[batch]``, the argmax of each row of ``[batch, vocab]`` (first on ties).
sample_greedy = _op("sample_greedy", _tokens)
#: ``sample_top_k(logits, k, temperature, seed)``: int64 ``[batch]``, a draw from the softmax of each row's k
#: largest logits over temperature; reproducible from ``seed`` (the same tokens in every framework).
sample_top_k = _op("sample_top_k", _tokens)

#: ``rms_norm_backward(grad, x, weight, eps) -> (grad_x, grad_weight)``.
rms_norm_backward = _op("rms_norm_backward", (_like_x, tensorplug.like("weight")))
#: ``add_rms_norm_backward(grad, grad_residual, h, weight, eps) -> (grad_h, grad_weight)``: ``grad`` of the
#: normalized output, ``grad_residual`` of the returned sum ``h``; ``grad_h`` is the gradient of both x and residual.
add_rms_norm_backward = _op("add_rms_norm_backward", (tensorplug.like("h"), tensorplug.like("weight")))
#: ``rotary_embedding_backward(positions, grad_q, grad_k, cos_sin_cache)``: the inverse rotation, in place.
rotary_embedding_backward = _op("rotary_embedding_backward")
#: ``silu_and_mul_backward(grad, x)``: the gradient of x ``[..., 2d]``.
silu_and_mul_backward = _op("silu_and_mul_backward", _like_x)
#: ``softmax_backward(grad, y)``: the gradient of softmax's input, from its output y.
softmax_backward = _op("softmax_backward", tensorplug.like("y"))

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
