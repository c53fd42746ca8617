"""A result whose strides are a transposition, for the jax versions that read it in memory order.

``jax.numpy.from_dlpack`` takes a tensor whose strides are a permutation of a compact layout
(``x.T``) and refuses other strides. jax 0.6.2 (jax's last release for Python 3.10), given such
a tensor whose data is aligned, wraps the buffer without a copy and drops the layout: the
array has the right shape and the elements in memory order, a wrong answer without an error
(jax-ml/jax#17784); given the same tensor unaligned, it copies and gets it right. jax 0.10.2
reads both right.

So the first transposed result the jax adapter converts asks jax once (:func:`reads_strides`:
a 2x2 transposed view of 64-byte-aligned memory, the case that goes wrong; under 1 ms with
jax 0.10.2 once jax has made its first DLPack import, which costs about 130 ms in a process
whichever tensor it takes), and
where jax reads it in memory order, every transposed result is copied into a row-major array
on the host first (:func:`compact_on_host`). Until then, and on such a jax, each result's
strides are looked at in Python (:func:`row_major`); once jax is known to read strides, a
result costs one flag read more than before. On a device other than the CPU there is no host copy
to make, and such a result is refused with a ValueError saying what to do (not tested: no GPU
was lent); a jax that reads strides takes every result as before, zero copy.
"""

from __future__ import annotations

import ctypes

_reads_strides: bool | None = None


def known_to_read_strides() -> bool:
    """Whether :func:`reads_strides` has asked and jax reads strides (the adapter's one check
    per result then)."""
    return _reads_strides is True


def reads_strides(jax) -> bool:
    """Whether ``jax.numpy.from_dlpack`` reads a transposed tensor of aligned memory by its
    strides (asked once per process). A jax that refuses the transposed tensor counts as
    reading strides: its own error reaches the caller, as it always has."""
    global _reads_strides
    if _reads_strides is None:
        import numpy  # here: importing the plugin imports no framework

        from tensorplug import empty, from_dlpack

        memory = empty((2, 2), "float32")  # tensorplug's allocator: 64-byte aligned
        host = numpy.from_dlpack(memory)
        host[...] = [[0.0, 1.0], [2.0, 3.0]]
        try:
            got = numpy.asarray(jax.numpy.from_dlpack(from_dlpack(host.T))).tolist()
        except Exception:  # noqa: BLE001 (any refusal: the real call raises it again)
            got = None
        _reads_strides = got != [[0.0, 1.0], [2.0, 3.0]]  # memory order: the strides were dropped
    return _reads_strides


def row_major(shape, strides) -> bool:
    """Whether ``strides`` (in elements) are the row-major ones of ``shape`` (dimensions of
    size 1 may have any stride; a tensor of no elements is row-major)."""
    if 0 in shape:
        return True
    expected = 1
    for size, stride in zip(reversed(shape), reversed(strides)):
        if size != 1 and stride != expected:
            return False
        expected *= size
    return True


def transposition(shape, strides) -> bool:
    """Whether ``strides`` are the row-major strides of ``shape`` in some order of its
    dimensions: the layouts jax takes (it refuses gaps, overlaps and negative strides)."""
    if 0 in shape:
        return True
    dims = sorted((stride, size) for size, stride in zip(shape, strides) if size != 1)
    expected = 1
    for stride, size in dims:
        if stride != expected:
            return False
        expected *= size
    return True


def compact_on_host(jax, tensor):
    """``tensor`` (a CPU :class:`tensorplug.Tensor` whose strides are a transposition) as a new row-major
    ``jax.Array`` on the CPU device of its index, copied through numpy: the elements read
    by the strides, whatever the dtype (ml_dtypes' bfloat16 too, which numpy's own DLPack
    import refuses)."""
    import numpy

    device = tensor.device
    if device.type != "cpu":
        raise ValueError(
            f"jax {jax.__version__} reads a DLPack tensor whose strides are a transposition in memory order "
            f"(jax-ml/jax#17784), and a {tensor.dtype}{list(tensor.shape)} result on {device} has strides "
            f"{list(tensor.strides)}: return a row-major tensor from the kernel, or use a jax that reads strides "
            "(0.10.2 does)")
    dtype = numpy.dtype(jax.numpy.dtype(tensor.dtype))
    shape, strides = tuple(tensor.shape), tuple(tensor.strides)
    span = (sum((n - 1) * s for n, s in zip(shape, strides)) + 1) * dtype.itemsize
    memory = (ctypes.c_byte * span).from_address(tensor.data_ptr)
    view = numpy.ndarray(shape, dtype=dtype, buffer=memory, strides=tuple(s * dtype.itemsize for s in strides))
    copy = numpy.ascontiguousarray(view)  # read while ``tensor`` holds the memory
    return jax.device_put(copy, jax.devices("cpu")[device.index])
