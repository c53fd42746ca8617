"""torch's form of an op's sharding rule: a ``DTensor`` sharding strategy.

For an op declared with ``sharding=`` (:mod:`tensorplug.sharding`) the torch operator gets
a strategy through ``torch.distributed.tensor.experimental.register_sharding``: for one
mesh dimension, the acceptable placements are

- everything ``Replicate()`` (the kernel runs on whole tensors on every rank), and
- per factor that may be split: ``Shard(d)`` for every tensor that has the factor (``d``
  its position there), ``Replicate()`` for the inputs without it (weights);

DTensor picks the one its inputs already have (no collective), else redistributes to the
cheapest, and runs the kernel on each rank's local shards. A ``Partial`` input is reduced
first: the kernel is no linear map that DTensor could push a pending sum through. Each
call's shapes are checked against the rule, and each split against the op's output rule
(``BoundRule.check_split``), naming the op.

An op that writes an argument gets no strategy: DTensor may redistribute an input into a
new tensor, and the kernel's write would then be lost. Its DTensor calls are refused
(RuntimeError naming the op; docs/compilers.md).

:mod:`.registration` registers the strategy when the op becomes a torch operator if
``torch.distributed.tensor`` is imported then, else right after it is imported
(:mod:`tensorplug_adapters.after_import`): importing DTensor costs about 2.3 s (measured
with torch 2.13), which no op declaration should pay, and an op first called with a DTensor
inside ``torch.compile`` must find its strategy and its DTensor resolution already there
(dynamo cannot run the adapter hooks).
"""

from __future__ import annotations

import sys

from tensorplug import Device, TensorSpec
from tensorplug.shapes import dtype_name

DTENSOR = "torch.distributed.tensor"


def dtensor_type():
    """``DTensor`` when torch's distributed tensors are imported, else None."""
    module = sys.modules.get(DTENSOR)
    return getattr(module, "DTensor", None)


def strategy(op):
    """The DTensor strategy of ``op`` from its sharding rule (for ``register_sharding``)."""
    from torch.distributed.tensor import Replicate, Shard

    names = [p.name for p in op.params]
    tensors = {p.name for p in op.params if p.is_tensor}
    rule_text = op.sharding.text

    def strategy(*args, **kwargs):
        if op.written:
            raise RuntimeError(f"{op.name}: an op that writes arguments ({', '.join(op.written)}) cannot run on "
                               "DTensors: DTensor may hand the kernel a redistributed copy, and the write would be "
                               "lost; call it on the local tensors (to_local()) instead")
        bound = dict(zip(names, args))
        bound.update(kwargs)
        specs, mesh_sizes = {}, set()
        for p in op.params:
            value = bound.get(p.name)
            if p.name in tensors and value is not None:
                specs[p.name] = TensorSpec(tuple(value.shape), dtype_name(value.tensor_meta.dtype),
                                           Device(value.mesh.device_type, 0))
                mesh_sizes.update(value.mesh.shape)
            elif p.is_int_list and value is not None:
                specs[p.name] = tuple(value)
            else:
                specs[p.name] = value
        try:
            rule = op.sharding.bind(op, specs)
            for factor in sorted(rule.splittable):
                for n in mesh_sizes:
                    rule.check_split({factor: n})
        except ValueError as e:
            # DTensor's dispatcher reports a strategy's ValueError as its own; a RuntimeError keeps the message.
            raise RuntimeError(str(e)) from e

        def placement(name, factor):
            if name not in rule.inputs:
                return None  # not a tensor, or an optional tensor left out
            term = rule.inputs[name]
            return Shard(term.index(factor)) if factor in term else Replicate()

        acceptable = [([Replicate()] * len(rule.outputs),
                       [Replicate() if n in rule.inputs else None for n in names])]
        for factor in sorted(rule.splittable):
            acceptable.append(([Shard(term.index(factor)) for term in rule.outputs],
                               [placement(n, factor) for n in names]))
        return acceptable

    strategy.__name__ = f"{op.opname}_sharding"
    strategy.__doc__ = f"DTensor strategy of {op.name} from its sharding rule {rule_text!r}."
    return strategy
