"""The conformance kit's Framework for the generic ``dlpack`` fallback adapter."""

from __future__ import annotations

import pytest

import tensorplug
from tensorplug.testing.framework import NumpyBackedFramework, as_dlpack


class DLPackArray:
    """An array type no adapter claims: it only speaks DLPack (for the ``dlpack`` fallback)."""

    __slots__ = ("array",)

    def __init__(self, array):
        self.array = array

    def __dlpack__(self, **kwargs):
        return self.array.__dlpack__(**kwargs)

    def __dlpack_device__(self):
        return self.array.__dlpack_device__()


class DLPackFramework(NumpyBackedFramework):
    """Any object with ``__dlpack__``; results come back as ``tensorplug.Tensor``."""

    name = "dlpack"

    def wrap(self, array):
        return DLPackArray(as_dlpack(array))

    def output_type(self):
        return tensorplug.Tensor


@pytest.hookimpl(optionalhook=True)  # the kit's hook: absent under -p no:tensorplug
def pytest_tensorplug_framework(name):
    return DLPackFramework() if name == "dlpack" else None
