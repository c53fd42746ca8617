"""The tensorplug adapter for MyTensor, written in pure Python.

tensorplug wraps these callables into a DLPack exchange table; this module is found
through the ``tensorplug.adapters`` entry point of this distribution. It is a module of
its own, outside the ``mytensor`` package, so that loading the plugin imports neither
mytensor nor numpy: a MyTensor can only be passed once ``mytensor`` is imported.
"""

from __future__ import annotations

import sys

import tensorplug

_table = None


def _from_dlpack(tensor):
    import numpy as np

    from mytensor import MyTensor

    return MyTensor(np.from_dlpack(tensor))


def _allocate(shape, dtype, device):
    from mytensor import empty

    if device.type != "cpu":
        raise ValueError(f"MyTensor lives on the cpu, not {device}")
    return empty(shape, dtype)


def _mytensor_table():
    global _table
    if _table is None:
        _table = tensorplug.ExchangeTable.from_python("mytensor", from_dlpack=_from_dlpack, allocate=_allocate)
    return _table


@tensorplug.hookimpl
def tensorplug_adapter_info():
    return tensorplug.AdapterInfo(name="mytensor", framework="mytensor", tensor_types=("mytensor.MyTensor",),
                                  capabilities=("exchange", "allocator", "output"), fast_path=False,
                                  framework_distribution="tensorplug-mytensor")


@tensorplug.hookimpl
def tensorplug_exchange_table(tensor_type):
    mytensor = sys.modules.get("mytensor")
    if mytensor is not None and issubclass(tensor_type, mytensor.MyTensor):
        return _mytensor_table()
    return None


@tensorplug.hookimpl
def tensorplug_output_table(framework):
    if framework == "mytensor":
        import mytensor  # noqa: F401

        return _mytensor_table()
    return None
