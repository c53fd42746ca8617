"""Ops: one declaration that makes a kernel usable inside every framework's graph compiler.

``tensorplug.op("mylib::axpy", mod.axpy, returns=...)`` returns an :class:`tensorplug.Op`. Called, it
behaves as the function does; and each adapter, asked through the hooks
``tensorplug_op_declared`` and ``tensorplug_op_impl`` (:mod:`tensorplug.hookspecs`), makes
it an operator of its framework's compiler (a ``torch.library`` custom op, an XLA FFI
target), so that ``torch.compile`` or ``jax.jit`` trace it as one node instead of refusing
or breaking the graph. No framework is imported here.
"""

from __future__ import annotations

import re
from _thread import allocate_lock

from . import _core
from ._registry import registry
from ._signature import (LIST_KINDS, PARAM_KINDS, RESULT_KINDS, SCALAR_KINDS, TENSOR_KINDS, TENSOR_LIST_KINDS,
                         UNTRACEABLE_KINDS, WRITTEN_KINDS, Param, parse_signature)
from .gradients import Backward, BoundBackward
from .shapes import RuleError, TensorSpec, compile_returns
from .sharding import ShardingRule, compile_sharding

TYPE_CHECKING = False  # typing.TYPE_CHECKING, without importing typing (import time: docs/decisions.md)
if TYPE_CHECKING:
    from typing import Any

# Python scalar types, resolved when an op is declared (a tracer cannot run the hooks).
_SCALAR_TYPES = (int, float, bool, complex, str, type(None))
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*::[A-Za-z_][A-Za-z0-9_]*")
_LISTS = (list, tuple)


class Op(_core.OpCall):
    """A kernel function declared as an operator (made by :func:`tensorplug.op`).

    Calling it calls the function, with the same arguments, results and errors; for the
    tensors of a framework whose adapter implements ``tensorplug_op_impl`` the call goes
    through that framework's operator (``torch.ops.<namespace>.<name>`` for torch), so
    that the framework's compiler, autograd and transforms see one operator.

    Attributes an adapter reads: ``name`` (``"mylib::axpy"``), ``namespace``, ``opname``,
    ``function`` (the :class:`tensorplug.Function`), ``params`` (:class:`~tensorplug.ops.Param` tuple),
    ``result`` (the signature's result kind: ``"void"``, ``"tensor"`` or ``"tuple"``),
    ``written`` (names of the tensor parameters the kernel writes), ``n_outputs`` (the
    number of tensors returned; 0 for destination-passing kernels), ``backward`` (a
    :class:`tensorplug.gradients.BoundBackward`, or None: no gradient), ``sharding`` (the
    :class:`tensorplug.sharding.ShardingRule`, or None), and the methods
    :meth:`tensorplug.Op.bind` and :meth:`tensorplug.Op.output_specs`.
    """

    def __init__(self, name: str, function, *, returns=None, writes=(), sharding=None, contiguous=()):
        where = f"tensorplug.op({name!r})"
        if not isinstance(name, str) or not _NAME.fullmatch(name):
            raise ValueError(f"tensorplug.op() argument 'name': expected 'namespace::name' (identifiers), "
                             f"got {name!r}")
        namespace = name.partition("::")[0]
        owner = registry.reserved_op_namespaces().get(namespace)
        if owner is not None:
            raise ValueError(f"tensorplug.op() argument 'name': the namespace {namespace!r} of {name!r} belongs to "
                             f"{owner}'s own operators (which would run instead); choose a namespace of your "
                             f"library's own")
        if not isinstance(function, _core.Function):
            raise TypeError(f"{where} argument 'function': expected a tensorplug Function (a kernel library's "
                            f"function), got {type(function).__name__}")
        text = function.signature_text
        if text is None:
            raise ValueError(f"{where}: function {function.__name__!r} exports no signature; export it with "
                             "TENSORPLUG_EXPORT (or a __tensorplugsig_ symbol) so its parameters are known")
        params, result = parse_signature(text)
        params = _declare_writes(where, function.__name__, params, writes)
        for p in params:
            if not p.is_tensor and p.kind not in SCALAR_KINDS and p.kind not in LIST_KINDS:
                raise ValueError(f"{where}: parameter {p.name!r} is a {p.kind}; operators take tensors, lists of "
                                 "tensors (views), int, float, bool, str, device, dtype and int list (ints) "
                                 "arguments only")
        if result not in RESULT_KINDS:
            raise ValueError(f"{where}: {function.__name__} returns a {result}; operators return tensors "
                             "(tensor, std::tuple of tensors) or nothing (destination passing)")
        if result == "void" and returns is not None:
            raise ValueError(f"{where}: {function.__name__} returns nothing (destination passing): it needs no "
                             "'returns' rule")
        if result != "void" and returns is None:
            first = next((p.name for p in params if p.is_tensor), "x")
            raise ValueError(
                f"{where}: {function.__name__} returns tensors it allocates, whose shapes a compiler must know "
                f"before the kernel runs: declare them with returns=tensorplug.like({first!r}), "
                "returns=tensorplug.Output(shape=..., dtype=...) (a tuple of them for several) or a shape "
                "function (docs/compilers.md)")
        try:
            rule = compile_returns(returns, params)
        except RuleError as e:
            raise ValueError(f"{where}: {e}") from None
        if result == "tuple" and not isinstance(returns, tuple):
            raise ValueError(f"{where}: {function.__name__} returns a tuple of tensors: declare 'returns' as a "
                             "tuple of rules, one per tensor")
        if result == "tensor" and isinstance(returns, tuple) and len(returns) != 1:
            raise ValueError(f"{where}: {function.__name__} returns one tensor, 'returns' declares {len(returns)}")
        n_outputs = 0 if result == "void" else len(returns) if isinstance(returns, tuple) else 1
        contiguous = _declare_contiguous(where, function.__name__, params, contiguous)
        try:
            sharding_rule = compile_sharding(sharding, params, n_outputs)
        except RuleError as e:
            raise ValueError(f"{where}: {e}") from None

        self.name = name
        self.namespace, _, self.opname = name.partition("::")
        self.function = function
        self.params: tuple[Param, ...] = params
        self.result = result
        self.returns = returns
        self.written: tuple[str, ...] = tuple(p.name for p in params if p.written)
        self.n_outputs = n_outputs
        import inspect  # when an op is declared, not at ``import tensorplug``

        self.__signature__ = inspect.signature(function)
        self.__name__ = self.opname
        writes_doc = f"; it writes {', '.join(self.written)} in place" if self.written else ""
        self.__doc__ = f"Operator {name} calling kernel function {function.__name__}{self.__signature__}{writes_doc}."
        self._rule = rule
        #: The tensor parameters the kernel needs compact (row-major, contiguous): every
        #: adapter hands them over so (a compact copy where the caller's is not), or refuses.
        self.contiguous: tuple[str, ...] = contiguous
        self.contiguous_index: tuple[int, ...] = tuple(i for i, p in enumerate(params) if p.name in contiguous)
        # What each result is, for messages ("the gradient of 'x'" for a derived backward).
        self.result_labels: tuple[str, ...] | None = None
        #: The op's :class:`tensorplug.sharding.ShardingRule` (``sharding=``), or None.
        self.sharding: ShardingRule | None = sharding_rule
        self._impls: dict[type, Any] = {}
        # The same pairs as a tuple, for __call__ under a tracer (see there).
        self._traced: tuple[tuple[type, Any], ...] = ()
        # The backward (a tensorplug.gradients.BoundBackward), set by tensorplug.op.
        self.backward: BoundBackward | None = None

    # ------------------------------------------------------------------------ calls ----
    def __call__(self, *args, **kwargs):
        # What graph tracers read (torch.compile inlines it): the types resolved beforehand,
        # matched by identity in a tuple of (type, callable) pairs; only a type never seen
        # reaches resolve(). dynamo guards the match with one identity check per compiled
        # call, where a lookup in the dict keyed by types made its guard list all the keys
        # (about 2,300 instructions more per call of a compiled program, per Op). A plain
        # call runs the same loop in C, on `_impls` (_core.OpCall, csrc/python/op_call.cc;
        # op_call_install below).
        for arg in (*args, *kwargs.values()) if kwargs else args:
            if type(arg) in _LISTS:  # a views (or ints) argument: its first item decides
                if not arg:
                    continue
                arg = arg[0]
            arg_type = type(arg)
            for known, impl in self._traced:
                if known is arg_type:
                    break
            else:
                impl = self.resolve(arg_type)
            if impl is not None:
                return impl(*args, **kwargs)
        return self.function(*args, **kwargs)

    def resolve(self, arg_type: type):
        """Ask the adapters which callable runs this op for an argument of ``arg_type``
        (hook ``tensorplug_op_impl``) and cache the answer (None: the kernel function).
        An adapter whose compiler traces calls without running Python hooks (torch.compile)
        calls it ahead, when it registers the op, for every type a traced call can show."""
        impl = registry.op_impl(self, arg_type)
        if impl is not None and not callable(impl):
            raise TypeError(f"tensorplug_op_impl returned {impl!r} for {self.name} and {arg_type.__qualname__}: "
                            "expected a callable or None")
        if impl is None and self.contiguous and hasattr(arg_type, "__dlpack__"):
            # A tensor no framework's operator claims: the kernel function, its layout
            # contract checked. Not for scalars (a later argument may still be a torch tensor).
            impl = self.call_compact
        self._impls[arg_type] = impl
        self._traced = tuple(self._impls.items())
        return impl

    # ------------------------------------------------------------ for the adapters ----
    def bind(self, args, kwargs=None) -> dict[str, Any]:
        """The arguments of a call by parameter name, in signature order (TypeError
        naming the op when they do not fit its signature)."""
        try:
            return dict(self.__signature__.bind(*args, **(kwargs or {})).arguments)
        except TypeError as e:
            raise TypeError(f"{self.name}: {e}") from None

    def output_specs(self, bound: dict[str, Any]) -> tuple[TensorSpec, ...]:
        """The :class:`tensorplug.TensorSpec` of each tensor the kernel returns, from the ``returns``
        rule, for arguments ``bound`` by name with tensors given as TensorSpec (adapters
        convert their traced tensors). Empty for a destination-passing kernel."""
        if self._rule is None:
            return ()
        try:
            specs = self._rule(bound)
        except (RuleError, TypeError) as e:
            raise type(e)(f"{self.name}: output rule: {e}") from None
        for k, spec in enumerate(specs):
            # Here, not in the compiler: jax and torch would report an obscure error of their own.
            if any(isinstance(extent, int) and extent < 0 for extent in spec.shape):  # symbolic sizes: no guard
                raise RuleError(f"{self.name}: output rule: result {k} has shape {spec.shape}, with a negative "
                                f"dimension (arguments: {_describe_bound(bound)})")
        return specs

    def check_results(self, returned, declared) -> None:
        """Raise a ValueError naming the op when the tensors a call returned are not those
        its output rule declares: ``returned`` holds a :class:`tensorplug.TensorSpec` per
        returned value (None for a value that is no tensor), ``declared`` is
        :meth:`output_specs` of the call. Their number is compared, then each result's dtype
        and shape, then its device: the checks, and the words, of the XLA handler. Adapters
        whose compiler plans with the rule's tensors call it on the results of every call
        (their fast path compares first and calls it only on a difference)."""
        if len(returned) != len(declared):
            raise ValueError(f"op '{self.name}' returned {len(returned)} tensor(s), but its shape rule declares "
                             f"{len(declared)}")
        for k, (got, want) in enumerate(zip(returned, declared)):
            what = f"result {k}" if self.result_labels is None else f"result {k} ({self.result_labels[k]})"
            if got is None:
                raise ValueError(f"op '{self.name}' returned a non-tensor value where its shape rule declares "
                                 f"{what}")
            if tuple(got.shape) != tuple(want.shape) or got.dtype != want.dtype:
                raise ValueError(f"op '{self.name}' returned {_spec_text(got)} as {what}, but its shape rule "
                                 f"declares {_spec_text(want)}")
            if want.device is not None and got.device != want.device:
                raise ValueError(f"op '{self.name}' returned {what} on {got.device}, but its shape rule "
                                 f"declares {want.device}")

    def call_compact(self, *args, **kwargs):
        """The kernel function called for a framework without an operator of its own (numpy,
        cupy, paddle, concrete jax arrays): each ``contiguous`` argument is checked compact,
        a ValueError naming the op and the argument otherwise (the core has no framework
        to copy with; a framework with operators copies in its adapter)."""
        bound = self.bind(args, kwargs) if kwargs else None
        for i in self.contiguous_index:
            name = self.params[i].name
            value = bound.get(name) if bound is not None else (args[i] if i < len(args) else None)
            if value is None or not hasattr(value, "__dlpack__"):
                continue
            view = _core.from_dlpack(value)
            if not _compact(view.shape, view.strides):
                raise ValueError(f"{self.name}() argument {name!r}: expected a compact (contiguous) tensor, as the op "
                                 f"declares contiguous={self.contiguous!r}; got shape {tuple(view.shape)} with strides "
                                 f"{tuple(view.strides)}: pass a contiguous copy (numpy.ascontiguousarray(x), "
                                 "x.contiguous())")
        return self.function(*args, **kwargs)

    def __repr__(self) -> str:
        return f"<tensorplug.Op {self.name} -> {self.function.__name__}{self.__signature__}>"

    def _reresolve(self) -> None:
        # Adapters changed: ask again for every type seen, so that a traced call still
        # finds each of them resolved.
        seen = list(self._impls)
        self._impls.clear()
        self._traced = ()
        for arg_type in seen:
            self.resolve(arg_type)


# Plain calls of an Op run OpCall's loop in C; Op.__call__ above stays for tracers.
_core.op_call_install(Op)


def _spec_text(spec: TensorSpec) -> str:
    # float32[2, 3], as the XLA handler writes a buffer (ShapeText in xla_ffi.cc).
    return f"{spec.dtype}[{', '.join(str(d) for d in spec.shape)}]"


def _declare_writes(where: str, fname: str, params: tuple[Param, ...], writes) -> tuple[Param, ...]:
    """The params with ``written`` set. Written tensors come from the signature (kind mview).
    ``writes=`` is for kernels whose signature cannot say it (C kernels declaring ``view``, the
    tvm-ffi compatibility layer's TensorView): it names view parameters; given for a kernel
    that declares mview parameters, it must name exactly those."""
    writes = (writes,) if isinstance(writes, str) else tuple(writes)
    if not writes:
        return params
    declared = tuple(p.name for p in params if p.written)
    if declared:
        if sorted(writes) != sorted(declared):
            raise ValueError(f"{where} argument 'writes': {tuple(writes)!r} does not match the parameters "
                             f"{fname} declares written (kind mview): {declared!r}; leave writes= out, the "
                             "signature says it")
        return params
    by_name = {p.name: p for p in params}
    for w in writes:
        p = by_name.get(w)
        if p is None or p.kind != "view":
            raise ValueError(f"{where} argument 'writes': {w!r} is not a tensor view parameter of "
                             f"{fname}({', '.join(by_name)})")
    return tuple(p._replace(written=p.name in writes) for p in params)


def _declare_contiguous(where: str, fname: str, params: tuple[Param, ...], contiguous) -> tuple[str, ...]:
    """The names of ``contiguous=``, checked: tensor parameters the kernel reads (a compact
    copy of a written tensor would take the write away from the caller's tensor)."""
    contiguous = (contiguous,) if isinstance(contiguous, str) else tuple(contiguous)
    by_name = {p.name: p for p in params}
    for name in contiguous:
        p = by_name.get(name)
        if not isinstance(name, str) or p is None or not p.is_tensor:
            tensors = ", ".join(q.name for q in params if q.is_tensor) or "none"
            raise ValueError(f"{where} argument 'contiguous': {name!r} is not a tensor parameter of {fname} "
                             f"(its tensor parameters: {tensors})")
        if p.written:
            raise ValueError(f"{where} argument 'contiguous': {name!r} is written in place by {fname}, and a compact "
                             "copy would take the write away from the caller's tensor; the kernel must take "
                             "written tensors with any strides")
    return tuple(dict.fromkeys(contiguous))


def _compact(shape, strides) -> bool:
    """Row-major contiguous, as ``TensorView::is_contiguous`` says (extents of 1 ignored)."""
    expected = 1
    for extent, stride in zip(reversed(tuple(shape)), reversed(tuple(strides))):
        if extent != 1 and stride != expected:
            return False
        expected *= extent
    return True


# Declared ops by name. Kept for the life of the process, as frameworks keep their
# registrations (a torch.library op cannot be removed).
_ops: dict[str, Op] = {}
_ops_lock = allocate_lock()


def op(name: str, function, *, returns=None, writes=(), backward=None, sharding=None, contiguous=()) -> Op:
    """Declare the kernel ``function`` as the operator ``name`` (``"namespace::name"``) of
    every framework with a graph compiler, and return it as an :class:`tensorplug.Op`.

    ``returns``: the output rule of a kernel that returns tensors it allocates
    (``FromEnvAlloc``): ``tensorplug.like("x")``, ``tensorplug.Output(shape, dtype,
    device=None)``, a tuple of them, or a shape function (see :mod:`tensorplug.shapes`).
    A kernel that returns nothing (destination passing) takes none.

    ``writes``: not needed for kernels that declare what they write (``tensorplug::MutableView``
    parameters, kind ``mview``): the op reads it from the signature, and ``writes``, if given,
    must name exactly those. For kernels whose signature cannot say it (a C kernel declaring
    ``view``, a kernel of the tvm-ffi compatibility layer) it names the view parameters the
    kernel writes in place.

    ``backward``: the op's backward, ``tensorplug.backward(kernel_or_op, saves=...,
    differentiable=...)`` (see :mod:`tensorplug.gradients`), from which each adapter derives
    its framework's gradient; an op without one raises, naming it, when a gradient is asked
    through it. Refused for an op that writes arguments.

    ``sharding``: how the op splits over the devices of a mesh, an einsum-like rule over its
    tensors (``"b i, i j -> b j"``, ``"b [n] -> b [n]"``, ``"elementwise"``; see
    :mod:`tensorplug.sharding`), from which jax partitions it under ``jax.jit`` and torch's
    ``DTensor`` runs it on shards. None: the frameworks gather its inputs (jax) or refuse
    sharded ones (``DTensor``).

    ``contiguous``: the tensor parameters the kernel needs compact (row-major, contiguous;
    not written ones): every adapter hands them over compact (torch: a compact copy of a
    non-contiguous argument, on every path; jax: XLA's buffers always are) or refuses, naming
    the argument (numpy, cupy, paddle: no framework to copy with in the core). The op keeps
    torch's Python kernel, not the native one, which cannot copy (docs/decisions.md).

    Each adapter is told about the op (hook ``tensorplug_op_declared``): the torch adapter
    registers ``torch.ops.<namespace>.<name>`` at once when torch is imported, else when
    the op is first called with torch tensors. ValueError when the name is taken, the
    signature has kinds no compiler can trace (func, any), or a rule does not fit.
    """
    if backward is not None and not isinstance(backward, Backward):
        raise TypeError(f"tensorplug.op({name!r}) argument 'backward': expected tensorplug.backward(...), got "
                        f"{type(backward).__name__}")
    return declare(Op(name, function, returns=returns, writes=writes, sharding=sharding, contiguous=contiguous),
                   backward)


def declare(made: Op, backward: Backward | None = None) -> Op:
    """Declare the op ``made`` (see :func:`op`), for code that sets more of it before the
    adapters see it (:mod:`tensorplug.gradients` labels a derived backward's results)."""
    name = made.name
    with _ops_lock:
        if name in _ops:
            raise ValueError(f"tensorplug.op: an op named {name!r} is already declared "
                             f"(for function {_ops[name].function.__name__!r}); op names are process-wide")
        _ops[name] = made
    try:
        if backward is not None:
            made.backward = BoundBackward(made, backward, _declare_backward)
        registry.op_declared(made)
        for arg_type in _SCALAR_TYPES:
            made.resolve(arg_type)
    except BaseException:
        with _ops_lock:
            del _ops[name]
        raise
    return made


def _declare_backward(where: str, name: str, function, returns, contiguous, result_labels) -> Op:
    """Declare a backward given as a kernel function as the op ``name``, for
    :class:`tensorplug.gradients.BoundBackward`, which derives its rule (``result_labels``
    name the input each gradient is for, in result checks). A ValueError about the
    declaration is prefixed with ``where``."""
    try:
        made = Op(name, function, returns=returns, contiguous=contiguous)
    except ValueError as e:
        raise ValueError(f"{where}: {e}") from None
    made.result_labels = result_labels
    return declare(made)


def get_op(name: str) -> Op | None:
    """The op declared as ``name``, or None."""
    return _ops.get(name)


def declared_ops() -> list[Op]:
    """Every op declared in this process, in declaration order (an adapter whose framework
    is imported after ops were declared resolves them for its types)."""
    return list(_ops.values())


def _adapters_changed(plugin) -> None:
    # Every op asks the adapters again; an adapter registered later hears of every op.
    declared = getattr(plugin, "tensorplug_op_declared", None)
    for made in list(_ops.values()):
        if declared is not None:
            declared(op=made)
        made._reresolve()


registry.listeners.append(_adapters_changed)

# The kind sets (tensorplug._signature, where they are explained), public here for adapters.
__all__ = ["LIST_KINDS", "PARAM_KINDS", "RESULT_KINDS", "SCALAR_KINDS", "TENSOR_KINDS", "TENSOR_LIST_KINDS",
           "UNTRACEABLE_KINDS", "WRITTEN_KINDS", "Op", "Param", "declared_ops", "get_op", "op", "parse_signature"]


def _describe_bound(bound: dict[str, Any]) -> str:
    """``x=TensorSpec(...)`` pairs become ``x.shape=(2, 3)``: what a rule's error names."""
    return ", ".join(f"{name}.shape={value.shape}" if isinstance(value, TensorSpec) else f"{name}={value!r}"
                     for name, value in bound.items())
