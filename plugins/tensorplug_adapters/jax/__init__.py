"""jax adapter: CPU and GPU ``jax.Array``.

jax arrays are immutable, so they enter kernels flagged read-only and results come back
as new ``jax.Array`` objects. A traced value inside ``jax.jit`` has no data to hand over:
passing one to a plain function raises TypeError saying so; a function declared with
``tensorplug.op`` is an XLA custom call instead (``ops``), usable inside ``jax.jit``,
``vmap`` and ``grad`` (its declared backward, ``grad``).
"""

from __future__ import annotations

import sys

from tensorplug import AdapterInfo, ExchangeTable, empty, hookimpl

from . import dlpack_strides

_tables: dict[str, ExchangeTable] = {}


def _jax():
    return sys.modules["jax"]


def _from_dlpack(tensor):
    jax = _jax()
    if dlpack_strides.known_to_read_strides() or dlpack_strides.row_major(tensor.shape, tensor.strides) \
            or not dlpack_strides.transposition(tensor.shape, tensor.strides) or dlpack_strides.reads_strides(jax):
        return jax.numpy.from_dlpack(tensor)
    # a transposed result, which this jax (0.6.2) would read in memory order (dlpack_strides.py)
    return dlpack_strides.compact_on_host(jax, tensor)


def _allocate(shape, dtype, device):
    jax = _jax()
    if device.type == "cpu":
        # A fresh CPU buffer from tensorplug's allocator (numpy cannot export ml_dtypes
        # such as bfloat16 through DLPack); jax imports it when the result is returned.
        return empty(shape, dtype, device)
    platform = "gpu" if device.type in ("cuda", "rocm") else device.type
    try:
        devices = jax.devices(platform)
    except RuntimeError as e:  # jax has no such platform: the device is refused, as numpy and torch refuse it
        raise ValueError(f"jax cannot allocate on {device}: {str(e).splitlines()[0]}") from None
    if device.index >= len(devices):
        raise ValueError(f"jax cannot allocate on {device}: it has {len(devices)} {platform} device(s)")
    return jax.numpy.empty(shape, dtype=dtype, device=devices[device.index])


def _refuse_tracer(value):
    raise TypeError(
        f"a traced jax value ({type(value).__name__}) has no data: tensorplug functions cannot be "
        "called inside jax.jit / vmap / grad; declare the function with tensorplug.op(...) to make it an "
        "XLA custom call, or call it on concrete arrays")


def _array_table() -> ExchangeTable:
    if "array" not in _tables:
        # The plugin's C importer (importer.cc) reads the array directly: __dlpack__ costs about 2 us.
        from . import _native

        _tables["array"] = ExchangeTable.from_python(
            "jax", from_dlpack=_from_dlpack, allocate=_allocate, read_only=True, importer=_native.importer())
    return _tables["array"]


def _tracer_table() -> ExchangeTable:
    if "tracer" not in _tables:
        _tables["tracer"] = ExchangeTable.from_python("jax", from_dlpack=_from_dlpack, to_dlpack=_refuse_tracer,
                                                      read_only=True)
    return _tables["tracer"]


@hookimpl
def tensorplug_adapter_info():
    return AdapterInfo(name="jax", framework="jax", tensor_types=("jax.Array",),
                       capabilities=("exchange", "allocator", "output", "compiler"), fast_path=True)


@hookimpl
def tensorplug_exchange_table(tensor_type):
    jax = sys.modules.get("jax")
    if jax is None:
        return None
    if issubclass(tensor_type, jax.core.Tracer):
        return _tracer_table()
    if issubclass(tensor_type, jax.Array):
        return _array_table()
    return None


@hookimpl
def tensorplug_output_table(framework):
    if framework == "jax":
        import jax  # noqa: F401  (asked for by name)

        return _array_table()
    return None


@hookimpl
def tensorplug_op_declared(op):
    # The XLA target is registered at the op's first call with jax values (ops.JaxOp),
    # so declaring an op never imports jax.
    return None


@hookimpl
def tensorplug_op_impl(op, arg_type):
    jax = sys.modules.get("jax")
    if jax is None or not issubclass(arg_type, (jax.Array, jax.core.Tracer, jax.ShapeDtypeStruct)):
        return None
    from . import grad, ops

    # A jax.ShapeDtypeStruct first: a written parameter's fresh result buffer (ops.JaxOp),
    # eager or traced alike, so the traced route (the custom call in its custom_vjp).
    struct = issubclass(arg_type, jax.ShapeDtypeStruct)
    if op.sharding is not None:
        from . import sharding

        sharded = sharding.ShardedJaxOp(op)  # decides per call: on one device, as below
        if not issubclass(arg_type, jax.core.Tracer) and not struct:
            return sharded
        # Traced: the partitioned call inside the custom_vjp of the declared backward (jax has
        # no differentiation rule for custom_partitioning itself).
        return grad.GradJaxOp(op, sharded)
    if not op.written and not issubclass(arg_type, jax.core.Tracer) and not struct:
        # Concrete arrays and a kernel that writes none of them: the direct call (as for a
        # plain function) is the fastest, and gives what the XLA custom call would.
        return None
    # The custom call inside a custom_vjp whose rules come from the op's declared backward.
    return grad.GradJaxOp(op, ops.JaxOp(op))
