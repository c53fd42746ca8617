"""Generic fallback for any object with ``__dlpack__`` and ``__dlpack_device__``.

Asked last (``trylast``), so every framework-specific adapter comes first. Results come
back as ``tensorplug.Tensor``, which every framework imports through DLPack.
"""

from __future__ import annotations

from tensorplug import AdapterInfo, ExchangeTable, empty, hookimpl

_table: ExchangeTable | None = None


def _identity(tensor):
    return tensor


def _dlpack_table() -> ExchangeTable:
    global _table
    if _table is None:
        _table = ExchangeTable.from_python("dlpack", from_dlpack=_identity, allocate=empty)
    return _table


@hookimpl
def tensorplug_adapter_info():
    return AdapterInfo(name="dlpack", framework="tensorplug", tensor_types=("<any __dlpack__ object>",),
                       capabilities=("exchange", "allocator", "output"), fast_path=False)


@hookimpl(trylast=True)
def tensorplug_exchange_table(tensor_type):
    if hasattr(tensor_type, "__dlpack__") and hasattr(tensor_type, "__dlpack_device__"):
        return _dlpack_table()
    return None


@hookimpl(trylast=True)
def tensorplug_output_table(framework):
    if framework in ("dlpack", "tensorplug"):
        return _dlpack_table()
    return None
