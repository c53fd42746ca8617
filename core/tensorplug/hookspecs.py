"""Hook specifications of tensorplug adapter plugins.

An adapter plugin is any object or module with functions marked ``@tensorplug.hookimpl``,
registered through the ``tensorplug.adapters`` entry-point group or with
:func:`tensorplug.register_adapter`. Hooks must not import their framework: a tensor of
the framework can only exist once its module is in ``sys.modules``, so an adapter looks
its framework up there.

Precedence follows pluggy: the most recently registered plugin is asked first, and
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
def tensorplug_output_table(framework: str):
    """Return the :class:`tensorplug.ExchangeTable` used to return tensors as
    ``framework`` (the adapter's name) under ``tensorplug.output_framework(framework)``,
    or None when ``framework`` is not this adapter's. This hook may import the framework:
    the user asked for it by name."""


@hookspec(firstresult=True)
def tensorplug_stream_handle(stream: object):
    """Turn a framework stream object into ``(device, handle)`` for
    ``tensorplug.use_stream``: ``device`` a ``(device_type, device_id)`` pair or a device
    string, ``handle`` the raw stream as an int. Return None for objects of other
    frameworks."""
