"""torch's side of :func:`tensorplug.op`: each op becomes a ``torch.library`` custom op.

The schema comes from the kernel's exported signature (:func:`schema`): tensors are
``Tensor`` (``Tensor(a!)`` when written: a mutated argument), ints ``SymInt``, floats
``float``, bools ``bool``, strings ``str``, devices ``Device``, dtypes ``ScalarType``, each
with ``?`` when optional; the result is ``()``, ``Tensor`` or a tuple of them. The fake
(meta) implementation makes empty tensors from the op's output rule, so ``torch.compile``,
``torch.export`` and ``functionalize`` trace the op as one node; its real implementation
calls the kernel. Users attach a backward with ``torch.library.register_autograd(op.name,
...)``, as for any custom op.

Registration happens when the op is declared if torch is imported, else when the op is
first called with a torch tensor (or an adapter hook runs with torch imported). torch is
never imported here.
"""

from __future__ import annotations

import sys
import threading

from tensorplug import Device, TensorSpec, output_framework
from tensorplug.shapes import dtype_name

_SCHEMA_TYPES = {"view": "Tensor", "tensor": "Tensor", "mview": "Tensor", "int": "SymInt", "float": "float",
                 "bool": "bool", "str": "str", "device": "Device", "dtype": "ScalarType"}

_lock = threading.RLock()
_pending: list = []           # ops declared before torch was imported
_overloads: dict[str, object] = {}  # op name -> torch.ops.<ns>.<name>.default


def schema(op) -> str:
    """The ``torch.library`` schema of ``op``: ``"(Tensor x, Tensor(a!) out, float alpha) -> ()"``."""
    parts = []
    letters = iter("abcdefghijklmnopqrstuvwxyz")
    for p in op.params:
        kind = _SCHEMA_TYPES[p.kind]
        if p.written:
            kind = f"Tensor({next(letters)}!)"
        parts.append(f"{kind}{'?' if p.optional else ''} {p.name}")
    results = {0: "()", 1: "Tensor"}.get(op.n_outputs) or "(" + ", ".join(["Tensor"] * op.n_outputs) + ")"
    return f"({', '.join(parts)}) -> {results}"


def declared(op) -> None:
    """Hook ``tensorplug_op_declared``: register now if torch is imported."""
    torch = sys.modules.get("torch")
    with _lock:
        if torch is None:
            _pending.append(op)
            return
        _register_pending(torch)
        _register(torch, op)


def impl(op, arg_type):
    """Hook ``tensorplug_op_impl``: the torch operator for torch tensors."""
    torch = sys.modules.get("torch")
    if torch is None or not issubclass(arg_type, torch.Tensor):
        return None
    with _lock:
        _register_pending(torch)
        return _overloads[op.name]


def _register_pending(torch) -> None:
    while _pending:
        _register(torch, _pending.pop(0))


def _register(torch, op) -> None:
    if op.name in _overloads:
        return
    kernel = _kernel(op)
    custom = torch.library.custom_op(op.name, kernel, mutates_args=op.written, schema=schema(op))
    if op.n_outputs:
        custom.register_fake(_fake(torch, op))
    else:
        # A destination-passing kernel returns nothing: its fake does nothing either.
        custom.register_fake(lambda *args: None)
    _overloads[op.name] = getattr(getattr(torch.ops, op.namespace), op.opname).default


def _kernel(op):
    function = op.function
    if any(p.is_tensor for p in op.params):
        def kernel(*args):
            return function(*args)
    else:
        # No tensor argument decides the output framework: ask for torch tensors.
        as_torch = output_framework("torch")

        def kernel(*args):
            with as_torch:
                return function(*args)
    kernel.__name__ = op.opname
    return kernel


def _fake(torch, op):
    names = [p.name for p in op.params]
    tensors = {p.name for p in op.params if p.is_tensor}
    single = op.n_outputs == 1

    def fake(*args):
        bound = dict(zip(names, args))
        for name in tensors:
            x = bound[name]
            if x is not None:
                bound[name] = TensorSpec(tuple(x.shape), dtype_name(x.dtype), Device(x.device.type, x.device.index or 0))
        outs = tuple(torch.empty(spec.shape, dtype=getattr(torch, spec.dtype), device=_torch_device(torch, spec.device))
                     for spec in op.output_specs(bound))
        return outs[0] if single else outs

    fake.__name__ = f"{op.opname}_fake"
    return fake


def _torch_device(torch, device: Device):
    name = "cuda" if device.type in ("cuda", "rocm") else device.type
    return torch.device(name) if name == "cpu" else torch.device(name, device.index)
