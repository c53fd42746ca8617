"""C exchange functions compiled into tensorplug's core, handed out as capsules.

Any adapter can pass these to :class:`tensorplug.ExchangeTable`; the first-party numpy and
jax adapters do. They live in the core because the core is the one compiled extension
tensorplug ships (docs/adapters.md, "C capsules", describes the capsule layouts, so that an
adapter's own extension can supply its own).
"""

from __future__ import annotations

from . import _core

__all__ = ["jax_importer", "numpy_exchange_api", "numpy_read_only_probe", "torch_lazy_view_probe", "torch_native_bridge_entry",
           "torch_native_bridge_kinds", "torch_native_bridge_read", "torch_native_define", "torch_native_direct", "torch_native_direct_off", "torch_native_has_autograd",
           "torch_native_has_bump_version", "torch_native_note_raised", "torch_native_shim_text", "torch_native_thread_keys",
           "torch_native_load", "torch_native_register", "torch_write_hook", "xla_ffi_define", "xla_ffi_handler"]


def numpy_exchange_api():
    """The core's ``"dlpack_exchange_api"`` capsule for ``numpy.ndarray``: reads the array
    struct directly (no ``__dlpack__`` round trip); allocates new arrays with numpy.
    numpy must be imported already (a numpy array is in hand)."""
    return _core.numpy_exchange_api()


def numpy_read_only_probe():
    """A ``"tensorplug.read_only_probe"`` capsule reading numpy's ``WRITEABLE`` flag, for
    ``ExchangeTable.from_capsule(..., read_only=numpy_read_only_probe())``."""
    return _core.numpy_read_only_probe()


def torch_lazy_view_probe(torch, libraries):
    """A ``"tensorplug.lazy_view_probe"`` capsule for ``torch.Tensor``, for
    ``ExchangeTable.from_capsule(..., lazy_views=torch_lazy_view_probe(torch, libraries))``:
    refuses conjugate views (``x.conj()``) and tensors with the negative bit
    (``x.conj().imag``), whose memory does not hold their values. It reads the bits without
    a Python call where the already-loaded ``libraries`` (libtorch paths) export torch's bit
    readers and torch's tensor layout checks out, else it calls ``x.is_conj()`` and
    ``x.is_neg()``. Made once per process."""
    return _core.torch_lazy_view_probe(torch, list(libraries))[0]


def torch_write_hook(torch, libraries):
    """A ``"tensorplug.write_hook"`` capsule for ``torch.Tensor``, for
    ``ExchangeTable.from_capsule(..., write_hook=torch_write_hook(torch, libraries))``: bumps
    the autograd version counter of each torch tensor a call writes, as torch's in-place ops
    do, so that a backward that saved the tensor raises instead of reading the new values; an
    inference tensor outside ``torch.inference_mode()`` is refused, as torch refuses. It calls
    ``torch::autograd::impl::bump_version`` directly where the already-loaded ``libraries``
    (libtorch paths) export it and a bump checks out (csrc/python/torch_versions.cc), else
    ``torch.autograd.graph.increment_version(x)``. Made once per process."""
    return _core.torch_write_hook(torch, list(libraries))[0]


def jax_importer():
    """A ``"tensorplug.importer"`` capsule reading a ``jax.Array``'s buffer pointer, shape,
    dtype and device directly (``__dlpack__`` costs about 2 us per array), for
    ``ExchangeTable.from_python(..., importer=jax_importer())``."""
    return _core.jax_importer()


def xla_ffi_handler(platform: str, slot: int):
    """The core's XLA FFI handler of plan ``slot`` (what :func:`xla_ffi_define` returned) for
    ``platform`` (``"cpu"`` or ``"cuda"``), as the capsule ``jax.ffi.register_ffi_target``
    takes. Each slot has a handler function of its own: the function XLA calls names the
    plan, so a call carries no attribute for it."""
    return _core.xla_ffi_handler(platform, slot)


def xla_ffi_define(key: str, plan, params, n_inputs: int, n_outputs: int, n_alloc: int) -> int:
    """Define the plan that the handlers of the returned slot run (a key defined again keeps
    its slot): run ``plan`` (a call plan, :func:`tensorplug.plans.make`) with one value per
    item of ``params``, each ``(name, source, index, attribute, kind)``: source 0 takes XLA
    operand ``index`` (read-only), 1 XLA result ``index`` (a written parameter), 2 the
    attribute named ``attribute`` (None when absent), 3 None; kind is the parameter's
    signature kind (view, tensor, int, float, bool, str, dtype). The call has ``n_inputs``
    operands and ``n_outputs + n_alloc`` results: the written parameters', then the
    ``n_alloc`` tensors the function allocates with ``Tensor::FromEnvAlloc``, handed out in
    order. Redefining a key replaces its plan; plans live for the process (compiled
    computations keep them). A process defines at most 2048 keys (RuntimeError past that)."""
    return _core.xla_ffi_define(key, plan, params, n_inputs, n_outputs, n_alloc)


def torch_native_load(paths) -> str | None:
    """Resolve torch's stable C shim (torch >= 2.10) in the already-loaded libraries
    ``paths`` (none is loaded here) for the core's native torch kernels: None when every
    required function is there, else their names (a str). Resolved once per process."""
    return _core.torch_native_load(list(paths))


def torch_native_define(plan) -> int:
    """Give a call plan (:func:`tensorplug.plans.make`) a native torch kernel and return
    its slot (for :func:`torch_native_register`)."""
    return _core.torch_native_define(plan)


def torch_native_register(slot: int, namespace: str, dispatch_key: str, name: str) -> None:
    """Register the native kernel of plan ``slot`` with torch's dispatcher as the
    ``dispatch_key`` kernel of ``namespace::name`` (``name`` may carry an overload:
    ``"op.overload"``). The op's schema must be defined already. For ``dispatch_key``
    ``"Autograd"`` it is the plan's Autograd kernel instead, which passes each call on to
    the overload ``name.nograd`` when no gradient is needed and nothing below autograd can
    be Python (no dispatch mode, plain tensors), else to ``name.grad`` (both defined
    already, with the same schema; csrc/python/torch_native.cc says more); once
    :func:`torch_native_direct` is on, a call that meets no dispatch key below autograd
    runs the plan's kernel itself instead of passing on to ``name.nograd``."""
    _core.torch_native_register(slot, namespace, dispatch_key, name)


def torch_native_bridge_entry() -> tuple[int, int, int, int, int]:
    """What the compiled torch bridge (``tensorplug_adapters/torch/bridge.cc``) is given at
    its ``tp_torch_bridge_init``: ``(interface version, address of the run function, address
    of its error text, address of the DLPack type of each torch dtype code, their number)``."""
    return _core.torch_native_bridge_entry()


def torch_native_bridge_read(address: int) -> None:
    """Read torch tensors through the compiled bridge's ``tp_torch_bridge_read`` at
    ``address`` (torch's inline accessors) instead of the shim's seven calls; 0 returns to
    the shim."""
    _core.torch_native_bridge_read(address)


def torch_native_bridge_kinds(slot: int) -> str:
    """One letter per parameter of plan ``slot`` (``t`` tensor, ``i`` int, ``f`` float, ``b``
    bool) as the compiled bridge passes them, or ``""`` where it cannot run the plan (an
    optional, list, string, device, dtype or owning tensor parameter)."""
    return _core.torch_native_bridge_kinds(slot)


def torch_native_has_autograd() -> bool:
    """Whether the loaded torch has what the native Autograd kernel needs
    (``torch_call_dispatcher``, ``aoti_torch_grad_mode_is_enabled``, and libc10's
    ``c10::TensorImpl::requires_grad`` and ``TorchDispatchModeTLS::any_modes_set``);
    False before :func:`torch_native_load`."""
    return _core.torch_native_has_autograd()


def torch_native_note_raised(error: BaseException) -> None:
    """Note, for the calling thread, the exception a Python Autograd kernel of a tensorplug
    op is raising: the native Autograd kernel above it reports this text where torch's shim
    keeps none (torch before 2.13, csrc/python/torch_native.cc)."""
    _core.torch_native_note_raised(f"{type(error).__name__}: {error}")


def torch_native_shim_text(on: bool) -> None:
    """Whether the native Autograd kernel reports torch's own text of an exception raised
    below its hop where torch's shim keeps one (``True``, the default), or always the text
    tensorplug noted, as on a torch before 2.13 (tests run both paths on one torch)."""
    _core.torch_native_shim_text(on)


def torch_native_thread_keys() -> int | None:
    """The calling thread's dispatch keys included by torch, as libc10 stores them (the raw
    ``included_`` word of ``c10::impl::raw_local_dispatch_key_set``, XOR-ed with torch's
    default set); None where libc10 does not export it or before :func:`torch_native_load`."""
    return _core.torch_native_thread_keys()


def torch_native_direct(tensor_type, probes, plain_keys: int, included_xor: int, included_refused: int,
                        conjugate_key: int, negative_key: int) -> bool:
    """Let the native Autograd kernel run an op's kernel itself when a call needs no
    gradient and nothing lies below autograd (csrc/python/torch_native.cc, "the Autograd
    kernel"): ``probes``, ``(tensor, raw key set)`` pairs of ``tensor_type`` with distinct
    key sets, locate each tensor's key set in memory; a call's tensors may have only the
    keys in ``plain_keys``, and the thread's included keys (its raw word XOR
    ``included_xor``) none of ``included_refused``. A written tensor with
    ``conjugate_key`` or ``negative_key`` is refused, naming the op and the argument.
    False, and every call keeps the hop through the overload ``nograd``, when no single
    location fits every probe."""
    return _core.torch_native_direct(tensor_type, list(probes), plain_keys, included_xor, included_refused,
                                     conjugate_key, negative_key)


def torch_native_direct_off() -> None:
    """Turn :func:`torch_native_direct`'s direct call off again (every call takes the hop)."""
    _core.torch_native_direct_off()


def torch_native_has_bump_version() -> bool:
    """Whether the loaded torch exports ``torch::autograd::impl::bump_version``, with which
    the native kernel bumps the version counter of each tensor it writes (an op that
    writes keeps the Python kernel without it); False before :func:`torch_native_load`."""
    return _core.torch_native_has_bump_version()
