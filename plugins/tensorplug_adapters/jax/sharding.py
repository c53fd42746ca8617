"""jax's form of an op's sharding rule: the op partitions under ``jax.jit`` over a mesh.

An op declared with ``sharding=`` (:mod:`tensorplug.sharding`) is traced as the XLA custom
call of :mod:`.ops` wrapped in ``jax.experimental.custom_partitioning``:

- the rule becomes a Shardy rule (``SdyShardingRule``): one factor per dimension of the
  work, every factor that must stay whole a ``need_replication`` factor, so that Shardy
  propagates the inputs' splits through the op;
- the partition callback chooses, per factor that may be split, the mesh axes of the
  first input that splits it, and returns the inputs' and results' shardings from them:
  a whole factor's dimension is gathered, and only that dimension; then each device runs
  the kernel on its own shard (the custom call traced again with the shard's shapes);
- it checks the split against the op's output rule (``BoundRule.check_split``): a result
  whose per-shard shape the two rules disagree on is refused, naming the op;
- ``custom_partitioning`` has no batching rule, so the call is wrapped in
  ``jax.custom_batching.custom_vmap``, whose rule maps the plain custom call (``vmap``
  runs the kernel per batch element, as for an op without a rule).

Concrete arrays on one device call the kernel function as before; arrays split over
several devices are run through ``jax.jit`` (one compiled function per op and form of the
static arguments). Inside ``shard_map`` the values are per-device already and the kernel
runs on them. A written parameter given as a ``jax.ShapeDtypeStruct`` (a fresh result,
:mod:`.ops`) is no operand of the partitioned call, only a result: the Shardy rule maps the
arrays given, its term still names its factors among the results', and each device's call
gets a struct of its shard's shape (each factor's size over its mesh axes). A factor that
only a fresh parameter names has no input to take a split from: it stays whole. Split
concrete arrays pass the struct to ``jax.jit`` as a static argument. No framework is
imported here: jax is taken from ``sys.modules``.
"""

from __future__ import annotations

import functools
import inspect
import math
import sys
import threading

from tensorplug.shapes import TensorSpec, dtype_name

from .ops import JaxOp, _as_array, _device_of, _fresh_spec


def _jax():
    return sys.modules["jax"]


class ShardedJaxOp:
    """The callable the jax adapter hands an op with a sharding rule (``tensorplug_op_impl``)."""

    def __init__(self, op):
        self.op = op
        self.plain = JaxOp(op)
        self.__name__ = op.opname
        self.__doc__ = op.__doc__
        self.jitted: dict = {}
        self.lock = threading.Lock()

    def __call__(self, *args, **kwargs):
        op = self.op
        jax = _jax()
        bound = op.bind(args, kwargs)
        # The arrays given (a written parameter given as a struct is a fresh result, no operand).
        names = [p.name for p in op.params if p.is_tensor and bound.get(p.name) is not None
                 and not isinstance(bound[p.name], jax.ShapeDtypeStruct)]
        values = [bound[name] for name in names]
        if not any(isinstance(v, jax.core.Tracer) for v in values):
            if not any(_split(jax, v) for v in values):
                # Concrete arrays on one device: as an op without a rule.
                fresh = any(isinstance(v, jax.ShapeDtypeStruct) for v in bound.values())
                return self.plain(**bound) if op.written or fresh else op.function(**bound)
            return self.jitted_call(jax, bound, names)(*values)
        return self.traced(jax, bound, names, [_as_array(jax, v) for v in values])

    def traced(self, jax, bound, names, arrays):
        from jax.experimental.custom_partitioning import ArrayMapping, SdyShardingRule, custom_partitioning

        op = self.op
        params = {p.name: p for p in op.params}
        fresh = {name: _fresh_spec(op, params[name], v) for name, v in bound.items()  # TypeError for a read one
                 if isinstance(v, jax.ShapeDtypeStruct)}
        specs = {**_specs(op, bound, dict(zip(names, arrays))), **fresh}
        rule = op.sharding.bind(op, specs)  # ValueError naming the op when the shapes do not fit
        for factor in sorted(rule.splittable):
            # Whether the output rule splits as the sharding rule says, before any mesh is known: a
            # ValueError at the call, not an XLA error at compile time (partition checks the real split).
            rule.check_split({factor: 2})

        def call_with(structs):  # the call on these arrays, with these structs for the fresh parameters
            return lambda *tensors: self.plain(**{**bound, **structs, **dict(zip(names, tensors))})

        call = call_with({})
        if not rule.results:  # nothing returned: nothing to split
            return call(*arrays)

        # Shardy names factors with identifiers: the rule's own names, "..." expanded ones renamed.
        # They are listed as the operands', then the results' terms name them first: jax numbers
        # them so, and Shardy wants the need_replication ones in that order.
        factors = list(dict.fromkeys(f for term in (*(rule.inputs[name] for name in names), *rule.results)
                                     for f in term))
        jax_name = {f: f"f{i}" for i, f in enumerate(factors)}
        # A factor that only fresh parameters name has no operand to take a split from: whole.
        splittable = rule.splittable & {f for name in names for f in rule.inputs[name]}
        whole = tuple(jax_name[f] for f in factors if f not in splittable)
        # jax 0.6 (the last for Python 3.10) has no need_replication_factors: its SdyShardingRule
        # takes every other keyword as a factor's size and refuses this one. Without it the
        # split is still checked, in shardings() below.
        sdy_rule = SdyShardingRule(
            tuple(ArrayMapping(*(jax_name[f] for f in rule.inputs[name])) for name in names),
            tuple(ArrayMapping(*(jax_name[f] for f in term)) for term in rule.results),
            **({"need_replication_factors": whole} if _takes_need_replication(SdyShardingRule) else {}))
        single = len(rule.results) == 1

        def shardings(mesh, arg_shapes):
            NamedSharding, P = jax.sharding.NamedSharding, jax.sharding.PartitionSpec
            specs = [arg.sharding.spec if isinstance(arg.sharding, NamedSharding) else P() for arg in arg_shapes]
            axes = _factor_axes(rule, names, specs)
            parts = {f: math.prod(mesh.shape[a] for a in a_s) for f, a_s in axes.items()}  # shards per factor
            rule.check_split(parts)
            results = tuple(NamedSharding(mesh, _spec(P, axes, term)) for term in rule.results)
            return (tuple(NamedSharding(mesh, _spec(P, axes, rule.inputs[name])) for name in names),
                    results[0] if single else results, parts)

        def partition(mesh, arg_shapes, result_shape):
            arg_shardings, result_shardings, parts = shardings(mesh, arg_shapes)
            # Each fresh parameter on one device: its shard's shape (each split factor's size over
            # its shards, rounded up as jax tiles) and the struct's dtype.
            structs = {name: jax.ShapeDtypeStruct(tuple(-(-size // parts.get(f, 1)) for f, size in
                                                        zip(rule.inputs[name], spec.shape)), bound[name].dtype)
                       for name, spec in fresh.items()}
            return mesh, call_with(structs), result_shardings, arg_shardings

        def infer_sharding_from_operands(mesh, arg_shapes, result_shape):  # the GSPMD partitioner's question
            return shardings(mesh, arg_shapes)[1]

        partitioned = custom_partitioning(call)
        partitioned.def_partition(partition, infer_sharding_from_operands=infer_sharding_from_operands,
                                  sharding_rule=sdy_rule)

        batchable = jax.custom_batching.custom_vmap(lambda *tensors: partitioned(*tensors))

        @batchable.def_vmap
        def per_element(axis_size, in_batched, *tensors):
            out = jax.vmap(call, in_axes=[0 if b else None for b in in_batched])(*tensors)
            return out, (True if single else (True,) * len(rule.results))

        explicit = _explicit_specs(jax, arrays)
        if explicit is None:
            return batchable(*arrays)
        # Explicit mesh axes (jax.make_mesh's default): a result's sharding is part of its type,
        # which the custom call cannot give; the call runs with those axes made automatic, and
        # its results are typed with the sharding the rule gives them, on the inputs' mesh (named:
        # jax 0.6 has no mesh in context here, and refuses a bare PartitionSpec).
        explicit, mesh = explicit
        NamedSharding, P = jax.sharding.NamedSharding, jax.sharding.PartitionSpec
        axes = _factor_axes(rule, names, explicit)
        out = tuple(NamedSharding(mesh, _spec(P, axes, term)) for term in rule.results)
        return _auto_axes(jax)(lambda *a: batchable(*a), out_sharding=out[0] if single else out)(*arrays)

    def jitted_call(self, jax, bound, names):
        """The jitted call for concrete arrays split over devices, per form of the static arguments
        (a fresh parameter's ``jax.ShapeDtypeStruct`` among them: hashable, by shape, dtype and sharding)."""
        static = {k: v for k, v in bound.items() if k not in names}
        key = (tuple(names), tuple((k, _frozen(v)) for k, v in static.items()))
        jitted = self.jitted.get(key)
        if jitted is None:
            with self.lock:
                jitted = self.jitted.setdefault(key, jax.jit(lambda *arrays: self(**static, **dict(zip(names, arrays)))))
        return jitted


def _auto_axes(jax):
    """``jax.sharding.auto_axes``; jax 0.6 (the last for Python 3.10) has it as
    ``jax.experimental.shard.auto_axes``, the same function."""
    auto_axes = getattr(jax.sharding, "auto_axes", None)
    if auto_axes is None:
        from jax.experimental.shard import auto_axes
    return auto_axes


@functools.cache
def _takes_need_replication(sdy_rule_type) -> bool:
    """Whether this jax's SdyShardingRule has ``need_replication_factors`` (jax 0.6 has not)."""
    return "need_replication_factors" in inspect.signature(sdy_rule_type).parameters


def _factor_axes(rule, names, specs) -> dict[str, tuple]:
    """The mesh axes of each factor the op splits, from the inputs' partition specs: those
    of the first input that splits it, unless an earlier factor took one of them (a mesh
    axis splits one factor). Whole factors get none: their dimensions are gathered."""
    axes: dict[str, tuple] = {}
    used: set = set()
    for name, spec in zip(names, specs):
        for factor, entry in zip(rule.inputs[name], tuple(spec)):
            if entry is None or factor not in rule.splittable or factor in axes:
                continue
            entry = (entry,) if isinstance(entry, str) else tuple(entry)
            if entry and used.isdisjoint(entry):
                axes[factor] = entry
                used.update(entry)
    return axes


def _spec(P, axes, term):
    return P(*((axes[f] if len(axes[f]) > 1 else axes[f][0]) if f in axes else None for f in term))


def _explicit_specs(jax, arrays):
    """The inputs' partition specs and the (abstract) mesh of the first input split over
    explicit mesh axes, or None when none is."""
    specs = []
    mesh = None
    for a in arrays:
        sharding = getattr(jax.typeof(a), "sharding", None)
        spec = getattr(sharding, "spec", None)
        specs.append(spec if spec is not None else jax.sharding.PartitionSpec())
        if mesh is None and any(entry is not None for entry in tuple(specs[-1])):
            mesh = sharding.mesh
    return (specs, mesh) if mesh is not None else None


def _split(jax, value) -> bool:
    return isinstance(value, jax.Array) and len(value.sharding.device_set) > 1


def _frozen(value):
    return tuple(value) if isinstance(value, list) else value


def _specs(op, bound, arrays) -> dict:
    """The arguments of a traced call as an output rule reads them (tensors as TensorSpec)."""
    specs = {}
    for p in op.params:
        value = bound.get(p.name)
        if p.name in arrays:
            a = arrays[p.name]
            specs[p.name] = TensorSpec(tuple(a.shape), dtype_name(a.dtype), _device_of(a))
        elif p.is_int_list and value is not None:
            specs[p.name] = tuple(int(v) for v in value)
        else:
            specs[p.name] = value
    return specs
