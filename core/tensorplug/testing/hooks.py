"""The pytest hook the tensorplug plugin adds (registered through ``pytest_addhooks``)."""

from __future__ import annotations

import pytest


@pytest.hookspec(firstresult=True)
def pytest_tensorplug_framework(name: str):
    """Return the :class:`tensorplug.testing.Framework` that makes and reads the tensors
    of adapter ``name``, or None to leave it to other implementations.

    Implement it in a ``conftest.py`` (or any pytest plugin) to test an adapter whose
    tensors the kit cannot make on its own. The kit's own implementation runs last: the
    built-in frameworks, then a generic one for any other registered adapter.
    """
