"""The pytest hook the tensorplug plugin adds (registered through ``pytest_addhooks``)."""

from __future__ import annotations

import pytest


@pytest.hookspec(firstresult=True)
def pytest_tensorplug_framework(name: str):
    """Return the :class:`tensorplug.testing.Framework` that makes and reads the tensors
    of adapter ``name``, or None to leave it to other implementations.

    Implement it in a pytest plugin (a ``pytest11`` entry point, as each first-party
    adapter does in ``tensorplug_adapters.testing``) or a ``conftest.py`` to test an
    adapter whose tensors the kit cannot make on its own. The kit's own implementation
    runs last: ``tensorplug.Tensor``, then the generic
    :class:`tensorplug.testing.AdapterFramework` for any other loaded adapter.
    """
