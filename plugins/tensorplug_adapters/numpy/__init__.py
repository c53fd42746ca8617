"""numpy adapter: the plugin's C table (exchange.cc) reads the array struct (no ``__dlpack__`` round trip).

Read-only arrays enter kernels flagged read-only; tensors allocated during a call are
ordinary ``numpy.ndarray`` objects owning their memory.
"""

from __future__ import annotations

import sys

from tensorplug import AdapterInfo, ExchangeTable, hookimpl

_table: ExchangeTable | None = None


def _numpy_table() -> ExchangeTable:
    global _table
    if _table is None:
        from . import _exchange  # the plugin's compiled table (exchange.cc); imports numpy's C API

        _table = ExchangeTable.from_capsule(_exchange.exchange_api(), "numpy", read_only=_exchange.read_only_probe())
    return _table


@hookimpl
def tensorplug_adapter_info():
    return AdapterInfo(name="numpy", framework="numpy", tensor_types=("numpy.ndarray",),
                       capabilities=("exchange", "allocator", "output"), fast_path=True)


@hookimpl
def tensorplug_exchange_table(tensor_type):
    np = sys.modules.get("numpy")
    if np is not None and issubclass(tensor_type, np.ndarray):
        return _numpy_table()
    return None


@hookimpl
def tensorplug_scalar_kind(scalar_type):
    # numpy.bool_ is a bool where a function takes one (and, as Python's bool, not an int).
    np = sys.modules.get("numpy")
    return "bool" if np is not None and scalar_type is np.bool_ else None


@hookimpl
def tensorplug_output_table(framework):
    if framework == "numpy":
        import numpy  # noqa: F401  (asked for by name)

        return _numpy_table()
    return None
