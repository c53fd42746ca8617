"""The native torch kernel of a :func:`tensorplug.op`: compiled code between torch's
dispatcher and the kernel function, with no Python and no GIL on the way.

torch (>= 2.10) exports a stable C shim from libtorch (``torch_library_impl`` registers a
boxed C kernel; ``aoti_torch_*`` functions read and allocate tensors). This plugin's
compiled module (``_native``, kernel.cc) resolves those symbols in the already-loaded
libtorch at run time, so it is built once, against no torch header, for every torch
version that has them, and runs each op's call plan (:mod:`tensorplug.plans`).
:func:`define_native_plan` gives an op that kernel (a slot in the module, which
:class:`NativePlan` registers per overload and dispatch key); when it
cannot (a torch without the shim functions, an output rule that is a Python shape
function), the op keeps the Python kernel and :func:`reason` says why (also logged at INFO
on the ``tensorplug`` logger). docs/compilers.md and docs/decisions.md describe the path.
"""

from __future__ import annotations

import logging
import os

from tensorplug import plans

from . import _native

from . import bridge

_log = logging.getLogger("tensorplug")

# The shim libraries, in the order their symbols are looked for (loaded by torch already).
_LIBRARIES = ("libtorch_cpu.so", "libtorch.so", "libtorch_cuda.so", "libc10.so")


_shim_missing: str | None = None
_shim_loaded = False
_reasons: dict[str, str | None] = {}  # op name -> None (native) or why it keeps the Python kernel
_bridged: set[str] = set()  # names of the ops whose kernels are the compiled bridge's


class _NoNative(Exception):
    """Why an op cannot have the native kernel (its message)."""


def _load_shim(torch) -> str | None:
    """None when the shim is resolved, else the names of the missing functions."""
    global _shim_loaded, _shim_missing
    if not _shim_loaded:
        lib_dir = os.path.join(os.path.dirname(torch.__file__), "lib")
        _shim_missing = _native.load([os.path.join(lib_dir, name) for name in _LIBRARIES])
        _shim_loaded = True
        if _shim_missing is None and bridge.wanted():
            bridge.attach(torch)
    return _shim_missing


def define_native_plan(torch, op) -> NativePlan | None:
    """The op's native plan, defined in tensorplug's extension: the one place that asks the
    extension for a plan (``_native.define``; its kernels are registered
    through the returned :class:`NativePlan`). None, with :func:`reason` set, when the op
    keeps the Python kernel.

    The op's facts reach the extension as a call plan (:func:`tensorplug.plans.make`: the
    function, its checked parameters and compiled output rule)."""
    try:
        missing = _load_shim(torch)
        if missing:
            raise _NoNative(f"torch {torch.__version__} lacks the stable C shim functions {missing} "
                            "(torch >= 2.10 has them)")
        if op.result_labels is not None:
            # A derived backward (tensorplug.gradients), called from the Python autograd
            # formula only: its results are checked naming the input each gradient is for.
            raise _NoNative("it is a derived backward, whose gradients the Python kernel checks naming their inputs")
        if op.contiguous:
            # The native kernel passes torch's tensors on as they are; a compact copy is the
            # Python kernel's (registration._compacting, docs/decisions.md has the cost).
            raise _NoNative(f"it declares contiguous={op.contiguous!r}, and the native kernel cannot make compact "
                            "copies")
        if op.written and not _native.has_bump_version():
            raise _NoNative(f"it writes {', '.join(op.written)}, and torch {torch.__version__} does not export "
                            "torch::autograd::impl::bump_version, which the native kernel needs to bump the version "
                            "of a tensor it writes")
        slot = _native.define(plans.make(op))
    except (_NoNative, plans.NotCompilable) as e:
        _reasons[op.name] = str(e)
        _log.info("tensorplug: %s keeps the Python kernel in torch: %s", op.name, e)
        return None
    _reasons[op.name] = None
    return NativePlan(torch, op, slot)


class NativePlan:
    """An op's plan in the extension (its slot), whose native kernel :meth:`register` makes
    a dispatcher kernel of an overload. ``autograd``: whether this torch lets the op's
    Autograd kernel be native too (:meth:`register_autograd`)."""

    def __init__(self, torch, op, slot: int) -> None:
        self.op, self.slot = op, slot
        self.autograd = has_autograd(torch)

    def register(self, key: str, name: str) -> None:
        """The native kernel as the ``key`` kernel of overload ``name`` (``"name"``,
        ``"name.mutable"``). Every kernel of one op comes from one side: the compiled
        bridge's where it is loaded and can pass the op's parameters, else the stable
        shim's."""
        op, slot = self.op, self.slot
        kinds = _native.bridge_kinds(slot) if bridge.attached() else ""
        if kinds:
            bridge.register(slot, kinds, op.namespace, key, name)
            _bridged.add(op.name)
        else:
            _native.register(slot, op.namespace, key, name)

    def register_autograd(self, torch) -> None:
        """The native Autograd kernel of the op's default overload: each call passes on, with
        no Python, to the overload ``nograd`` when no gradient is needed, else to ``grad``
        (whose Autograd kernel is the Python formula); both must be defined
        (registration.py). A call that needs no gradient and meets nothing else below
        autograd runs the op's kernel directly, where :func:`direct_call` says it can."""
        direct_call(torch)
        if not _native.has_autograd():
            # raises, naming what is missing
            _native.register(self.slot, self.op.namespace, "Autograd", self.op.opname)
        self.register("Autograd", self.op.opname)


def bridged(op) -> bool:
    """Whether ``op``'s native kernels are the compiled bridge's (:mod:`.bridge`)."""
    return op.name in _bridged


def has_autograd(torch) -> bool:
    """Whether this torch lets an op's Autograd kernel be native (:meth:`NativePlan.register_autograd`)."""
    return _load_shim(torch) is None and _native.has_autograd()


_direct: bool | None = None


def direct_call(torch) -> bool:
    """Whether the native Autograd kernel runs an op's kernel itself when a call needs no
    gradient and no dispatch key lies between autograd and the op's CPU or CUDA kernel
    (a plain tensor, nothing of the kind included in the thread's dispatch state), instead
    of a second trip through torch's dispatcher to the overload ``nograd``. It reads each
    tensor's key set and the thread's included keys from torch's memory, so it is on only
    where both layouts check out against what torch reports (``torch._C._dispatch_keys``,
    ``torch._C._dispatch_tls_local_include_set``). Decided once per process."""
    global _direct
    if _direct is None:
        try:
            _direct = _enable_direct(torch)
        except (AttributeError, RuntimeError, TypeError) as e:  # a torch without one of the APIs used
            _log.info("tensorplug: the native Autograd kernel keeps its hop below autograd: %s", e)
            _direct = False
    return _direct


def _enable_direct(torch) -> bool:
    # torch's own (internal in torch 2.13, no public equivalent): dispatch keys and key sets
    # as torch reports them, for the checks below.
    from torch import _neg_view
    from torch._C import DispatchKey as K
    from torch._C import DispatchKeySet as S
    from torch._C import _dispatch_keys, _dispatch_tls_local_include_set, _IncludeDispatchKeyGuard

    def raw(key) -> int:
        return S(key).raw_repr()

    # The thread's included keys: the raw word is torch's report XOR-ed with a fixed mask
    # (torch's default included set), checked with one key more included.
    word = _native.thread_keys()
    if word is None:
        return False
    included_xor = word ^ _dispatch_tls_local_include_set().raw_repr()
    with _IncludeDispatchKeyGuard(K.Python):
        word_with_python = _native.thread_keys()
        reported = _dispatch_tls_local_include_set().raw_repr()
    if word_with_python ^ included_xor != reported or not reported & raw(K.Python):
        return False
    # Functionality bits rank as the keys do: those from Dense up to autograd lie below it.
    dense, autograd = raw(K.Dense), raw(K.AutogradFunctionality)
    below = (autograd - 1) & ~(dense - 1)
    included_refused = below & ~(dense | raw(K.BackendSelect) | raw(K.ADInplaceOrView))
    for key in (K.Python, K.FuncTorchDynamicLayerBackMode, K.Functionalize, K.Conjugate, K.Negative,
                K.ZeroTensor, K.Sparse, K.Quantized, K.NestedTensor):
        if raw(key) & ~included_refused:
            return False  # the ranking is not as assumed
    plain = torch.zeros(1)
    plain_keys = _dispatch_keys(plain).raw_repr() | raw(K.CUDA) | raw(K.AutogradCUDA) | raw(K.AutocastCUDA)
    with torch.inference_mode():
        inference = torch.zeros(1)
    probes = [plain, inference, torch.zeros(1, dtype=torch.complex64).conj(), _neg_view(torch.zeros(1)),
              torch.empty(1, device="meta"), torch.zeros(1).as_subclass(_probe_subclass(torch))]
    pairs = [(t, _dispatch_keys(t).raw_repr()) for t in probes]
    if len({keys for _, keys in pairs}) != len(pairs):
        return False
    return _native.direct(torch.Tensor, pairs, plain_keys, included_xor, included_refused,
                                        raw(K.Conjugate), raw(K.Negative))


def _probe_subclass(torch):
    """A tensor subclass with ``__torch_dispatch__`` (its tensors carry the Python key)."""

    class KeySetProbe(torch.Tensor):
        @classmethod
        def __torch_dispatch__(cls, func, types, args=(), kwargs=None):
            return func(*args, **(kwargs or {}))

    return KeySetProbe


def reason(op) -> str | None:
    """Why ``op`` runs the Python kernel in torch's dispatcher (None: it runs the native
    kernel, or is not registered with torch yet)."""
    return _reasons.get(op.name)
