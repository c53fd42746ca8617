"""torch's side of :func:`tensorplug.op`: each op becomes a ``torch.library`` custom op.

This module is the op's registration, to be read top to bottom: :func:`_register` takes
the stages in order, and the sections below it build what each stage registers, in the
same order.

1. **Schema** (:func:`schema`), from the kernel's exported signature: tensors are ``Tensor``
   (``Tensor(a!)`` when written: a mutated argument), ints ``SymInt``, floats ``float``,
   bools ``bool``, strings ``str``, devices ``Device``, dtypes ``ScalarType``, lists of
   tensors (views) ``Tensor[]``, int lists ``SymInt[]``, each with ``?`` when optional; the
   result is ``()``, ``Tensor`` or a tuple of them. Up to three overloads beside the
   default: ``mutable`` (ops that write), ``nograd`` and ``grad`` (ops with a native
   Autograd kernel).
2. **Kernels**: the native kernel (:mod:`.native`: no Python, no GIL), else a Python kernel
   that calls the kernel function.
3. **Fake**: empty tensors made from the op's output rule, so ``torch.compile``,
   ``torch.export`` and ``functionalize`` trace the op as one node.
4. **Functionalize** (ops that write arguments): a kernel that gives torch's
   functionalization ``auto_functionalized`` of the ``mutable`` overload.
5. **Autograd**: the formula from the op's declared backward (:mod:`.autograd`), behind a
   native Autograd kernel where the op has the native kernel.
6. **Sharding** (ops with a sharding rule): a ``DTensor`` strategy (:mod:`.sharding`).

Registration happens when the op is declared if torch is imported, else right after torch
is imported (:mod:`tensorplug_adapters.after_import`), so that an op first met inside
``torch.compile`` is already a torch op: dynamo traces ``Op.__call__``'s cache lookups but
cannot run the adapter hooks. torch is never imported here.
"""

from __future__ import annotations

import sys
import threading

from tensorplug import Device, TensorSpec, output_framework
from tensorplug.ops import LIST_KINDS, TENSOR_LIST_KINDS
from tensorplug.shapes import dtype_name

from ..after_import import call_after_import
from . import autograd, native, sharding

_SCHEMA_TYPES = {"view": "Tensor", "tensor": "Tensor", "mview": "Tensor", "int": "SymInt", "float": "float",
                 "bool": "bool", "str": "str", "device": "Device", "dtype": "ScalarType", "views": "Tensor[]",
                 "ints": "SymInt[]"}

#: The overload name of an op's auto-functionalizable twin (ops that write arguments only).
#: Graphs call it for every such op: at most 15 characters, because torch's Python call of
#: an overload copies its name into a std::string, which then fits without an allocation.
FUNCTIONALIZABLE = "mutable"
# The overloads a native Autograd kernel passes calls on to (kernel.cc).
NO_GRAD, GRAD = "nograd", "grad"
# The dispatch key of every kernel of stage 2: one kernel for every backend, below autograd.
_KERNEL_KEY = "CompositeExplicitAutograd"

_lock = threading.RLock()
_pending: list = []           # ops declared before torch was imported
_overloads: dict[str, object] = {}  # op name -> torch.ops.<ns>.<name>.default
_sharded: dict[str, tuple] = {}  # op name -> the overloads a DTensor strategy is registered for
_libraries: dict[str, object] = {}  # namespace -> torch.library.Library (kept: dropping one removes its ops)


# ---- the adapter's hooks (torch/__init__.py)

def declared(op) -> None:
    """Hook ``tensorplug_op_declared``: register now if torch is imported, else when it is."""
    torch = sys.modules.get("torch")
    with _lock:
        if torch is None or not hasattr(torch, "library"):  # absent, or being imported
            _pending.append(op)
            call_after_import("torch", _torch_imported)
            return
        _register_pending(torch)
        _register(torch, op)


def impl(op, arg_type):
    """Hook ``tensorplug_op_impl``: the torch operator for torch tensors."""
    torch = sys.modules.get("torch")
    if torch is None or not hasattr(torch, "library") or not issubclass(arg_type, _claimed(torch)):
        return None
    with _lock:
        _register_pending(torch)
        overload = _overloads.get(op.name)
    if overload is not None and op.sharding is not None:
        _register_sharding(op)  # a DTensor may be in hand: its strategy, once
    return overload


def _claimed(torch) -> tuple:
    # torch tensors, and torch devices and dtypes (which also say the call is torch's).
    return (torch.Tensor, torch.SymInt, torch.SymFloat, torch.SymBool, torch.device, torch.dtype)


def _register_pending(torch) -> None:
    while _pending:
        _register(torch, _pending.pop(0))


def _torch_imported(torch) -> None:
    with _lock:
        _register_pending(torch)


# ---- the route

def _register(torch, op) -> None:
    """Make ``op`` a torch operator: the six stages, in order."""
    if op.name in _overloads:
        return
    # torch.library's low-level API: torch.library.custom_op wraps each call in Python
    # checks (about 50 us per eager call against about 10 us, docs/decisions.md).
    lib = _libraries.get(op.namespace)
    if lib is None:
        lib = _libraries[op.namespace] = torch.library.Library(op.namespace, "FRAGMENT")
    # The native kernel's plan, or None: the op keeps the Python kernel (native.reason says why).
    plan = native.define_native_plan(torch, op)
    # A native kernel gets a native Autograd kernel too, where this torch allows it (stage 5).
    native_autograd = plan is not None and plan.autograd
    mutable = [f"{op.opname}.{FUNCTIONALIZABLE}"] if op.written else []
    nograd = [f"{op.opname}.{NO_GRAD}"] if native_autograd else []

    # 1. Schema: the overloads.
    lib.define(f"{op.opname}{schema(op)}")  # default: the op as every caller calls it
    for name in mutable:
        lib.define(f"{name}{schema(op)}")  # without a Functionalize kernel, the form auto_functionalized takes
    for name in nograd:
        # Where the native Autograd kernel sends a call that needs no gradient (below autograd) ...
        lib.define(f"{name}{schema(op)}")
        # ... and one that needs a gradient (the Python formula).
        lib.define(f"{op.opname}.{GRAD}{schema(op)}")
    packet = getattr(getattr(torch.ops, op.namespace), op.opname)

    # 2. Kernels: the compute of every overload but grad (which only passes calls on to nograd).
    if plan is not None:
        for name in [op.opname, *mutable, *nograd]:
            plan.register(_KERNEL_KEY, name)  # native: no Python, no GIL
    else:
        kernel = _kernel(torch, op)
        for name in [op.opname, *mutable]:
            lib.impl(name, kernel, _KERNEL_KEY)  # Python: a shape function's rule, contiguous=, no shim

    # 3. Fake: what tracing (torch.compile, torch.export, functionalize) runs instead of the kernel.
    fake = _fake(torch, op) if op.n_outputs else _no_outputs
    for name in [op.opname, *nograd, *mutable]:
        torch.library.register_fake(f"{op.namespace}::{name}", fake, lib=lib)

    # 4. Functionalize: ops that write, whose functional form torch cannot derive for a custom op.
    if op.written:
        functionalize = _functionalize(torch, op, getattr(packet, FUNCTIONALIZABLE))
        for name in [op.opname, *nograd]:  # not mutable: auto_functionalized takes it only without one
            lib.impl(name, functionalize, "Functionalize")
    _overloads[op.name] = packet.default  # impl() hands it out from here on

    # 5. Autograd: the declared backward's formula (or a refusal naming the op).
    if native_autograd:
        # The Python formula on grad, which redispatches to nograd ...
        lib.impl(f"{op.opname}.{GRAD}", autograd.kernel(torch, op, below=NO_GRAD), "Autograd", with_keyset=True)
        # ... and the native Autograd kernel on the default, which chooses grad or nograd per call.
        plan.register_autograd(torch)
    else:
        lib.impl(op.opname, autograd.kernel(torch, op), "Autograd", with_keyset=True)

    # 6. Sharding: DTensor's strategy, on the overloads that run below autograd.
    _sharded[op.name] = (packet.default, *([getattr(packet, NO_GRAD)] if native_autograd else []))
    _register_sharding(op)

    # Every type a traced call can show for a torch argument, resolved now (dynamo cannot run the hooks).
    for arg_type in (torch.Tensor, torch.nn.Parameter, torch.SymInt, torch.SymFloat, torch.SymBool,
                     torch.device, torch.dtype, sharding.dtensor_type()):
        if arg_type is not None:
            op.resolve(arg_type)


# ---- 1. schema

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


# ---- 2. kernels (the Python kernel; the native one is native.py's)

def _kernel(torch, op):
    function = op.function
    if any(p.is_tensor for p in op.params):
        # The dispatcher calls the compiled function itself when there is no result to
        # check: no Python frame in between.
        call = function
    else:
        # No tensor argument decides the output framework: ask for torch tensors.
        as_torch = output_framework("torch")

        def call(*args):
            with as_torch:
                return function(*args)

    if op.contiguous:
        call = _compacting(op, call)
    if op.written:
        call = _refusing_inference_writes(torch, op, call)
    if not op.n_outputs:
        return call
    return _checked(torch, op, call)


def _compacting(op, call):
    """``call`` with each argument the op declares ``contiguous`` made compact: a copy
    (``Tensor.contiguous``) of one that is not, such as the expanded incoming gradient
    (stride 0) of ``.sum().backward()``. Every torch path runs it: eager calls, the graphs
    of ``torch.compile`` (aot_eager, inductor) and the backward formula, which calls the
    backward op. The op keeps this Python kernel (native.define_native_plan refuses it the native one)."""
    indices = op.contiguous_index

    def kernel(*args):
        args = list(args)
        for i in indices:
            value = args[i]
            if value is not None and not value.is_contiguous():
                args[i] = value.contiguous()
        return call(*args)

    kernel.__name__ = op.opname
    return kernel


# torch's text for a write to an inference tensor outside inference mode (its in-place ops
# raise it, and so does the native kernel's version bump, kernel.cc).
_INFERENCE_WRITE = ("Inplace update to inference tensor outside InferenceMode is not allowed.You can make a clone "
                    "to get a normal tensor before doing inplace update.See https://github.com/pytorch/rfcs/pull/17 "
                    "for more details.")


def _refusing_inference_writes(torch, op, call):
    """``call`` with a write to an inference tensor outside inference mode refused, naming
    the op and the argument in the native kernel's words, before anything is written. The
    version bump of each written tensor is the call's own: the kernel function bumps it
    through the torch table's write hook, as every direct call does (once per call)."""
    written = [(i, p.name, p.kind in TENSOR_LIST_KINDS) for i, p in enumerate(op.params) if p.written]
    inference_mode = torch.is_inference_mode_enabled

    def kernel(*args):
        if not inference_mode():
            for i, name, is_list in written:
                value = args[i]
                if value is None:
                    continue
                for j, t in enumerate(list(value) if is_list else [value]):
                    if t.is_inference():
                        where = f"argument '{name}'" + (f" item {j}" if is_list else "")
                        raise RuntimeError(f"{op.name}(): RuntimeError: {where}: {_INFERENCE_WRITE}")
        return call(*args)

    kernel.__name__ = op.opname
    return kernel


def _checked(torch, op, call):
    """``call`` with its results checked against the op's output rule, as the XLA handler
    checks them: compiled graphs (inductor, aot_eager) planned with the fake's tensors, so a
    result of another dtype, shape or device would be read as the declared one. A
    ValueError names the op, the result and both values (:meth:`tensorplug.Op.check_results`).
    The check costs about 2 us per call (docs/decisions.md)."""
    specs_of = _bound_specs(op)
    single = op.n_outputs == 1
    tensor = torch.Tensor

    def kernel(*args):
        result = call(*args)
        declared = op.output_specs(specs_of(args))
        if single or type(result) is not tuple:
            returned = (_spec(result) if isinstance(result, tensor) else None,)
        else:
            returned = tuple([_spec(t) if isinstance(t, tensor) else None for t in result])
        if returned != declared:
            op.check_results(returned, declared)
        return result

    kernel.__name__ = op.opname
    return kernel


# ---- 3. fake

def _no_outputs(*args):
    # A destination-passing kernel returns nothing: its fake does nothing either.
    return None


_new_tuple = tuple.__new__
_dtype_names: dict = {}  # torch.dtype -> tensorplug dtype name
_devices: dict = {}      # torch.device -> tensorplug Device (torch's device.type costs 0.5 us)


def _spec(x):
    dtype, device = x.dtype, x.device
    name = _dtype_names.get(dtype)
    if name is None:
        name = _dtype_names[dtype] = dtype_name(dtype)
    where = _devices.get(device)
    if where is None:
        where = _devices[device] = Device(device.type, device.index or 0)
    return _new_tuple(TensorSpec, (tuple(x.shape), name, where))  # TensorSpec(...) without its __new__ frame


def _bound_specs(op):
    """A function ``args -> arguments by name``, the tensors as :class:`tensorplug.TensorSpec`,
    int lists as tuples: what an output rule is called with."""
    names = [p.name for p in op.params]
    tensors = [p.name for p in op.params if p.is_tensor]
    lists = {p.name: p.is_tensor_list for p in op.params if p.kind in LIST_KINDS}

    def specs_of(args):
        bound = dict(zip(names, args))
        for name in tensors:
            x = bound[name]
            if x is not None:
                bound[name] = _spec(x)
        for name, is_tensor_list in lists.items():
            x = bound[name]
            if x is not None:
                bound[name] = [_spec(t) for t in x] if is_tensor_list else tuple(x)
        return bound

    return specs_of


def _fake(torch, op):
    specs_of = _bound_specs(op)
    single = op.n_outputs == 1

    def fake(*args):
        bound = specs_of(args)
        try:
            if op.sharding is not None:
                op.sharding.bind(op, bound)  # the sharding rule checked on every trace (sharding.py)
            outs = tuple(torch.empty(spec.shape, dtype=_torch_dtype(torch, spec.dtype),
                                     device=_torch_device(torch, spec.device))
                         for spec in op.output_specs(bound))
        except (TypeError, ValueError, KeyError, AttributeError, IndexError, ZeroDivisionError) as e:
            # A RuntimeError stops dynamo with this message; a TypeError would be taken for
            # a graph break, silently running the op eagerly.
            raise RuntimeError(f"{e}" if str(e).startswith(op.name) else f"{op.name}: output rule: {e}") from e
        return outs[0] if single else outs

    fake.__name__ = f"{op.opname}_fake"
    return fake


def _torch_dtype(torch, name: str):
    dtype = getattr(torch, name, None)
    if not isinstance(dtype, torch.dtype):
        raise ValueError(f"dtype {name!r} is not a torch dtype")
    return dtype


def _torch_device(torch, device: Device):
    name = "cuda" if device.type in ("cuda", "rocm") else device.type
    return torch.device(name) if name == "cpu" else torch.device(name, device.index)


# ---- 4. functionalize

def _functionalize(torch, op, functionalizable):
    """The Functionalize kernel of an op that writes arguments.

    torch's C++ functionalization (``torch.func.functionalize``, and the functional mode
    that aot_autograd and ``torch.export`` run, which hands every op torch cannot
    auto-functionalize to this key) refuses a custom op with written arguments. This
    kernel gives it the functional form ``auto_functionalized`` computes: the op runs,
    through its ``FUNCTIONALIZABLE`` overload, on clones of the written tensors, and each
    written argument is then replaced by its clone, so the graph holds
    ``auto_functionalized(<op>.mutable, ...)`` and, for a written graph input, a
    ``copy_`` at the end; inductor re-inplaces it. The overload is needed because
    torch auto-functionalizes only ops without a Functionalize kernel.
    """
    # torch's own functionalization API, internal in torch 2.13 (no public one exists);
    # tests/torch/test_op_functionalize.py pins what is used of it.
    from torch._C._functorch import TransformType, peek_interpreter_stack
    from torch._functorch.pyfunctorch import FunctionalizeInterpreter
    from torch._higher_order_ops.auto_functionalize import auto_functionalized
    from torch._subclasses.functional_tensor import CppFunctionalizeAPI, FunctorchFunctionalizeAPI

    names = [p.name for p in op.params]
    written = op.written
    cpp = CppFunctionalizeAPI()

    def functionalize(*args):
        interpreter = peek_interpreter_stack()
        if interpreter is not None and interpreter.key() == TransformType.Functionalize:
            ctx = FunctorchFunctionalizeAPI(FunctionalizeInterpreter(interpreter))  # torch.func.functionalize
        else:
            ctx = cpp  # the functional mode of aot_autograd and export
        bound = dict(zip(names, args))
        unwrapped = ctx.unwrap_tensors(bound)
        # One layer down: torch.func.functionalize's functorch layer lowered (ctx), and
        # the Functionalize key excluded (cpp), which this kernel runs under either way.
        with ctx.redispatch_to_next(), cpp.redispatch_to_next():
            results = auto_functionalized(functionalizable, **unwrapped)
        outputs, new_values = results[:-len(written)], results[-len(written):]
        for name, value in zip(written, new_values):
            if bound[name] is not None:  # an optional written tensor left out
                ctx.replace(bound[name], value)
                ctx.commit_update(bound[name])
                ctx.sync(bound[name])
        if op.n_outputs == 0:
            return None
        wrapped = ctx.wrap_tensors(tuple(outputs))
        return wrapped[0] if op.n_outputs == 1 else wrapped

    functionalize.__name__ = f"{op.opname}_functionalize"
    return functionalize


# ---- 5. autograd: autograd.py builds the kernels

# ---- 6. sharding

_sharding_lock = threading.RLock()
_strategies: set[str] = set()  # names of the ops whose DTensor strategy is registered
_waiting: list = []  # ops with a sharding rule registered before DTensor was imported


def _register_sharding(op) -> None:
    """Register the DTensor strategy of ``op`` (:func:`.sharding.strategy`) for its overloads
    below autograd, once, if the op has a sharding rule: now if DTensor is imported, else
    right after it is (importing it costs seconds no declaration should pay)."""
    if op.sharding is None or op.name in _strategies:
        return
    with _sharding_lock:
        if op.name in _strategies:
            return
        if sharding.dtensor_type() is None:
            if op not in _waiting:
                _waiting.append(op)
            call_after_import(sharding.DTENSOR, _dtensor_imported)
            return
        from torch.distributed.tensor.experimental import register_sharding

        strategy = sharding.strategy(op)
        for overload in _sharded[op.name]:
            register_sharding(overload)(strategy)
        _strategies.add(op.name)


def _dtensor_imported(module) -> None:
    with _sharding_lock:
        waiting = list(_waiting)
        _waiting.clear()
        for op in waiting:
            _register_sharding(op)
            op.resolve(sharding.dtensor_type())  # a traced call finds DTensor's resolution cached
