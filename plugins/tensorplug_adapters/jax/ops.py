"""tensorplug ops as XLA custom calls: what makes ``op(x, ...)`` work inside ``jax.jit``.

Each call form of an op (its plan: which arguments are None, how long each list is)
becomes an XLA FFI target named after the plan's key, served by a compiled handler of this
plugin that runs the op's call plan (``_native.xla_ffi_handler``, xla_ffi.cc). A call is traced as one
``jax.ffi.ffi_call``:

- tensor arguments are XLA operands; a parameter the kernel writes is an operand aliased to
  a result (jax arrays are immutable: its new value is returned, not written in place);
- a parameter the kernel writes may instead be given as a ``jax.ShapeDtypeStruct``: it is
  then a plain XLA result, no operand and no alias, so XLA hands the kernel an uninitialized
  buffer (as ``jax.ffi.ffi_call``'s results), which the kernel must write whole; the caller
  saves filling one (``jnp.empty_like(x)`` is a fill inside ``jax.jit``);
- a list of tensors (views) is a run of operands, one per tensor, read-only;
- int, float, bool, str and dtype arguments are XLA attributes, an int list (ints) an i64
  array attribute, so they must be static Python values, not traced ones;
- the op's output rule gives the shapes of the tensors the kernel allocates with
  ``Tensor::FromEnvAlloc``; inside the handler that allocator hands out XLA's result
  buffers in order, checked against the rule.

The call returns the written parameters' new values, then the allocated tensors: one array
when there is one, a tuple when there are several, None when there are none. ``jax.vmap``
runs the kernel once per batch element (``vmap_method="sequential"``).

Like every plugin module, this one imports no framework: it runs only once a jax value is
in hand, and finds jax in ``sys.modules``.
"""

from __future__ import annotations

import sys
import threading

from tensorplug import Device, plans
from tensorplug.shapes import TensorSpec, dtype_name

# Plan sources (xla_ffi.cc, Source).
_INPUT, _OUTPUT, _ATTR, _NONE, _INPUTS = 0, 1, 2, 3, 4
_ATTR_KINDS = ("int", "float", "bool", "str", "dtype", "ints")
# The platforms the core has a handler for, as jax names them.
_PLATFORMS = {"cpu": "cpu", "cuda": "CUDA"}

_lock = threading.Lock()
_plans: dict[str, int] = {}  # plan key -> its slot in the core, registered with XLA


def _jax():
    return sys.modules["jax"]


class JaxOp:
    """The callable the jax adapter hands an op for jax values (``tensorplug_op_impl``)."""

    def __init__(self, op):
        self.op = op
        self.__name__ = op.opname
        self.__doc__ = op.__doc__

    def __call__(self, *args, **kwargs):
        op = self.op
        jax = _jax()
        bound = op.bind(args, kwargs)

        # Operands (tensor arguments), attributes (the rest), and the plan of this call.
        operands, specs, plan, attrs, aliases = [], {}, [], {}, {}
        written, fresh = [], []
        for p in op.params:
            value = bound.get(p.name)
            if isinstance(value, jax.ShapeDtypeStruct) or (
                    p.is_tensor_list and isinstance(value, (list, tuple))
                    and any(isinstance(item, jax.ShapeDtypeStruct) for item in value)):
                # A fresh result buffer: a plain XLA result, no operand (the kernel writes it whole).
                spec = _fresh_spec(op, p, value)
                specs[p.name] = spec
                plan.append((p.name, _OUTPUT, len(written), "", "tensor" if p.kind == "tensor" else "view"))
                written.append(jax.ShapeDtypeStruct(spec.shape, value.dtype))  # the result XLA allocates
                fresh.append(p.name)
                continue
            if value is None:
                if not p.optional:
                    what = "a tensor" if p.is_tensor else f"{'a list of tensors' if p.is_tensor_list else p.kind}"
                    raise TypeError(f"{op.name}() argument '{p.name}': expected {what}, got None")
                plan.append((p.name, _NONE, 0, "", "view"))
                specs[p.name] = None
                continue
            if p.is_tensor:
                array = _as_array(jax, value)
                specs[p.name] = TensorSpec(tuple(array.shape), dtype_name(array.dtype), _device_of(array))
                kind = "tensor" if p.kind == "tensor" else "view"
                if p.written:
                    aliases[len(operands)] = len(written)
                    plan.append((p.name, _OUTPUT, len(written), "", kind))
                    written.append(array)
                else:
                    plan.append((p.name, _INPUT, len(operands), "", kind))
                operands.append(array)
                continue
            if p.is_tensor_list:
                if not isinstance(value, (list, tuple)):
                    raise TypeError(f"{op.name}() argument '{p.name}': expected a list of tensors, got "
                                    f"{type(value).__name__}")
                arrays = [_as_array(jax, item) for item in value]
                specs[p.name] = [TensorSpec(tuple(a.shape), dtype_name(a.dtype), _device_of(a)) for a in arrays]
                plan.append((p.name, _INPUTS, len(operands), "", "views", len(arrays)))
                operands.extend(arrays)
                continue
            if p.kind not in _ATTR_KINDS:
                raise TypeError(f"{op.name}() argument '{p.name}': {p.kind} arguments cannot be passed to a "
                                "kernel inside jax (XLA attributes are numbers, strings and int arrays); call the "
                                "kernel function eagerly instead")
            attrs[p.name] = _attribute(op, p, value)
            specs[p.name] = tuple(int(v) for v in attrs[p.name]) if p.is_int_list else value
            plan.append((p.name, _ATTR, 0, p.name, p.kind))

        allocated = op.output_specs(specs)
        key = _define_plan(op, plan, len(operands), len(written), len(allocated), fresh)
        result_shapes = [jax.ShapeDtypeStruct(a.shape, a.dtype) for a in written]
        result_shapes += [jax.ShapeDtypeStruct(tuple(s.shape), jax.numpy.dtype(s.dtype)) for s in allocated]
        call = jax.ffi.ffi_call(key, result_shapes, has_side_effect=not result_shapes,
                                vmap_method="sequential", input_output_aliases=aliases)
        results = call(*operands, **attrs)
        if not result_shapes:
            return None
        return results[0] if len(results) == 1 else tuple(results)


def _fresh_spec(op, p, value) -> TensorSpec:
    """The TensorSpec of a ``jax.ShapeDtypeStruct`` given for parameter ``p``: a fresh result
    buffer, which only a tensor parameter the kernel writes can take (TypeError naming the
    op and the argument otherwise; ValueError for a shape or dtype no tensor has)."""
    where = f"{op.name}() argument '{p.name}'"
    if not (p.is_tensor and p.written):
        what = ("a tensor the kernel reads" if p.is_tensor else "a list of tensors" if p.is_tensor_list
                else f"a {p.kind} argument")
        writes = (f"(this op writes {', '.join(repr(w) for w in op.written)})" if op.written
                  else "(this op writes none)")
        passed = "a jax.ShapeDtypeStruct"
        if isinstance(value, (list, tuple)):
            passed = "a list holding " + passed
        expected = "an array" if p.is_tensor else "a list of arrays" if p.is_tensor_list else f"a {p.kind}"
        raise TypeError(f"{where}: expected {expected}, "
                        f"got {passed}; '{p.name}' is {what}, and a ShapeDtypeStruct (a fresh result buffer) stands "
                        f"only for a tensor parameter the kernel writes {writes}")
    shape = tuple(value.shape)
    if any(isinstance(d, (bool, float)) or (isinstance(d, int) and d < 0) for d in shape):
        raise ValueError(f"{where}: expected a jax.ShapeDtypeStruct whose shape holds non-negative ints, got "
                         f"shape {shape}")
    numpy = sys.modules["numpy"]  # jax imports numpy
    try:
        dtype = _jax().numpy.dtype(value.dtype)
    except TypeError:
        dtype = None
    if dtype is None or not (dtype == numpy.bool_ or _jax().numpy.issubdtype(dtype, _jax().numpy.number)):
        raise ValueError(f"{where}: expected a jax.ShapeDtypeStruct of a numeric or bool dtype, got dtype "
                         f"{value.dtype}")
    return TensorSpec(shape, dtype_name(dtype), _spec_device(value))


def _spec_device(value) -> Device:
    """The device of a ``jax.ShapeDtypeStruct``: its sharding's (the device when it names one,
    the platform's first otherwise), or, without one, the default backend's, as for a tracer."""
    devices = getattr(getattr(value, "sharding", None), "device_set", None)
    if not devices:
        return _device_of(value)
    device = min(devices, key=lambda d: d.id)
    if device.platform == "cpu":
        return Device("cpu", 0)
    return Device("cuda", device.id if len(devices) == 1 else 0)


def _as_array(jax, value):
    return value if isinstance(value, (jax.Array, jax.core.Tracer)) else jax.numpy.asarray(value)


def _device_of(array) -> Device:
    devices = getattr(array, "devices", None)
    if devices is not None:
        try:
            device = next(iter(devices()))
            return Device("cpu" if device.platform == "cpu" else "cuda", device.id if device.platform != "cpu" else 0)
        except Exception:  # noqa: BLE001  (a tracer: no concrete device)
            pass
    return Device("cpu", 0) if _jax().default_backend() == "cpu" else Device("cuda", 0)


def _attribute(op, p, value):
    """The XLA attribute for scalar argument ``value`` of parameter ``p``."""
    jax = _jax()
    numpy = sys.modules["numpy"]  # jax imports numpy
    if isinstance(value, jax.core.Tracer):
        raise TypeError(f"{op.name}() argument '{p.name}': a traced value cannot be a kernel's {p.kind} argument "
                        "inside jax.jit (XLA attributes are compile-time constants); pass a Python "
                        f"{p.kind} (mark it static with jax.jit(..., static_argnames=...)) or a 0-d array "
                        "to a tensor parameter")
    if p.kind == "str":
        if not isinstance(value, str):
            raise TypeError(f"{op.name}() argument '{p.name}': expected a str, got {type(value).__name__}")
        return value
    if p.kind == "dtype":
        return dtype_name(value)
    if p.is_int_list:
        if isinstance(value, numpy.ndarray) and value.ndim == 1 and value.dtype.kind in "iu":
            value = value.tolist()
        items = list(value) if isinstance(value, (list, tuple)) else None
        if items is None or any(isinstance(v, (bool, float)) or isinstance(v, jax.core.Tracer) for v in items):
            raise TypeError(f"{op.name}() argument '{p.name}': expected a list of Python ints, got {value!r}")
        try:
            return numpy.array([int(v) for v in items], dtype=numpy.int64)
        except (TypeError, ValueError, OverflowError):
            raise TypeError(f"{op.name}() argument '{p.name}': expected a list of Python ints, got {value!r}") from None
    try:
        if p.kind == "bool":
            return numpy.bool_(bool(value))
        if p.kind == "int":
            if isinstance(value, float):
                raise TypeError
            return numpy.int64(int(value))
        return numpy.float64(float(value))
    except (TypeError, ValueError):
        raise TypeError(f"{op.name}() argument '{p.name}': expected {p.kind}, got {type(value).__name__}") from None


def _define_plan(op, plan, n_inputs, n_outputs, n_alloc, fresh=()) -> str:
    """Define the plan of this call's form in the core and register its XLA FFI target
    (once); returns its key, the target's name. A plan fixes which arguments are None, the
    length of each list of tensors and which written parameters are fresh results (given as
    ``jax.ShapeDtypeStruct``: no operand): calls that differ there have plans of their own
    (and XLA passes each call exactly its plan's operands and attributes)."""
    absent = [entry[0] for entry in plan if entry[1] == _NONE]
    lengths = [f"{entry[0]}={entry[5]}" for entry in plan if entry[1] == _INPUTS]
    key = op.name
    if absent:
        key += f"/without:{','.join(absent)}"
    if lengths:
        key += f"/lists:{','.join(lengths)}"
    if fresh:
        key += f"/fresh:{','.join(fresh)}"
    if key not in _plans:
        from . import _native  # the plugin's compiled module: the XLA FFI handler (xla_ffi.cc)

        with _lock:
            if key not in _plans:
                slot = _native.xla_ffi_define(key, plans.make(op, rules=False), plan, n_inputs, n_outputs, n_alloc)
                jax = _jax()
                for platform, jax_platform in _PLATFORMS.items():
                    try:
                        jax.ffi.register_ffi_target(key, _native.xla_ffi_handler(platform, slot),
                                                    platform=jax_platform)
                    except Exception:  # noqa: BLE001  (a jaxlib without that platform)
                        if platform == "cpu":
                            raise
                _plans[key] = slot
    return key
