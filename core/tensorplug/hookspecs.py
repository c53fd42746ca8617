"""Hook specifications of tensorplug adapter plugins.

An adapter plugin is any object or module with functions marked ``@tensorplug.hookimpl``,
registered through the ``tensorplug.adapters`` entry-point group or with
:func:`tensorplug.register_adapter`. Hooks must not import their framework: a tensor of
the framework can only exist once its module is in ``sys.modules``, so an adapter looks
its framework up there.

Precedence follows pluggy (the same for every hook): the most recently registered plugin is asked first, and
``tryfirst=True`` / ``trylast=True`` on a hookimpl move it ahead or behind. Every
first-party adapter is registered before third-party ones, so a third party can override
a built-in adapter for a type by claiming it.
"""

from __future__ import annotations

import pluggy

hookspec = pluggy.HookspecMarker("tensorplug")
hookimpl = pluggy.HookimplMarker("tensorplug")


@hookspec
def tensorplug_adapter_info():
    """Describe the adapter: return a :class:`tensorplug.AdapterInfo`.

    Called for ``tensorplug.adapters()`` and the ``tensorplug adapters`` command only.
    """


@hookspec(firstresult=True)
def tensorplug_exchange_table(tensor_type: type):
    """Return the :class:`tensorplug.ExchangeTable` for ``tensor_type``, or None.

    Asked once per exact Python type; the answer is cached in the compiled core until an
    adapter is registered or unregistered. Build the table once (not per call):
    ``ExchangeTable.from_capsule`` for a framework's own ``__dlpack_c_exchange_api__``,
    ``ExchangeTable.from_python`` for an adapter written with Python callables.
    """


@hookspec(firstresult=True)
def tensorplug_scalar_kind(scalar_type: type):
    """Return ``"bool"`` when instances of ``scalar_type`` (a framework's scalar type that is
    neither a Python bool, int or float nor a ``numbers.Number``, such as numpy's ``bool_``)
    are bools where a function takes a bool, else None.

    Asked once per type, when a value of it is passed for a scalar parameter; the answer is
    cached in the compiled core. A bool type so declared is refused where an int or a float
    is expected, as Python's bool is.
    """


@hookspec(firstresult=True)
def tensorplug_output_table(framework: str):
    """Return the :class:`tensorplug.ExchangeTable` used to return tensors as
    ``framework`` (the adapter's name) under ``tensorplug.output_framework(framework)``,
    or None when ``framework`` is not this adapter's. This hook may import the framework:
    the user asked for it by name."""


@hookspec(firstresult=True)
def tensorplug_stream_handle(stream: object):
    """Turn a framework stream object into ``(device, handle)`` for
    ``tensorplug.use_stream``: ``device`` a ``(device_type, device_id)`` pair (the type
    a DLPack code or a name such as ``"cuda"``) or a device string, ``handle`` the raw stream as an int. Return None for objects of other
    frameworks."""


@hookspec
def tensorplug_op_declared(op):
    """Make the :class:`tensorplug.Op` ``op`` (made by :func:`tensorplug.op`) an operator
    of the adapter's framework, so that its graph compiler can trace it; every adapter is
    asked, the result is ignored, and an adapter without a compiler does not implement it.

    The op's declared facts are its attributes (signature ``params``, output rule through
    ``output_specs``, written tensors ``written``, sharding rule ``sharding``): the adapter
    derives its framework's forms from them, and checks them where they are used.

    Called once per op when it is declared, and for every op already declared when an
    adapter is registered later. Do not import the framework here: register at once when
    it is in ``sys.modules``, else remember the op and register it when
    ``tensorplug_op_impl`` is first asked for one of the framework's types. Raise only for
    an op the framework cannot express (the error reaches the caller of
    :func:`tensorplug.op`).

    An adapter whose framework differentiates also derives the op's gradient here (or in
    the callable of ``tensorplug_op_impl``) from ``op.backward``, the declared backward
    (:class:`tensorplug.gradients.BoundBackward`, or None: a gradient through the op is an
    error naming it, :func:`tensorplug.gradients.no_backward_message`).
    """


@hookspec(firstresult=True)
def tensorplug_op_impl(op, arg_type: type):
    """Return the callable that runs ``op`` when an argument of ``arg_type`` is the first
    one an adapter claims, or None (not this adapter's type, or its framework has no
    compiler: the op then calls its kernel function directly).

    The callable takes the op's arguments and returns its results, as the kernel function
    does; it is typically the framework's operator (``torch.ops.<namespace>.<name>``) or a
    function that the framework's tracer records as one operation. Asked once per op and
    exact type (scalars included); the answer is cached by the op until an adapter is
    registered or unregistered. The callable must be traceable by the framework's compiler:
    it is what a compiled function calls.
    """
