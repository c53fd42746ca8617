"""C exchange functions compiled into tensorplug's core, handed out as capsules.

Any adapter can pass these to :class:`tensorplug.ExchangeTable`; the first-party numpy and
jax adapters do. They live in the core because the core is the one compiled extension
tensorplug ships (docs/adapters.md, "C capsules", describes the capsule layouts, so that an
adapter's own extension can supply its own).
"""

from __future__ import annotations

from . import _core

__all__ = ["jax_importer", "numpy_exchange_api", "numpy_read_only_probe"]


def numpy_exchange_api():
    """The core's ``"dlpack_exchange_api"`` capsule for ``numpy.ndarray``: reads the array
    struct directly (no ``__dlpack__`` round trip); allocates new arrays with numpy.
    numpy must be imported already (a numpy array is in hand)."""
    return _core.numpy_exchange_api()


def numpy_read_only_probe():
    """A ``"tensorplug.read_only_probe"`` capsule reading numpy's ``WRITEABLE`` flag, for
    ``ExchangeTable.from_capsule(..., read_only=numpy_read_only_probe())``."""
    return _core.numpy_read_only_probe()


def jax_importer():
    """A ``"tensorplug.importer"`` capsule reading a ``jax.Array``'s buffer pointer, shape,
    dtype and device directly (``__dlpack__`` costs about 2 us per array), for
    ``ExchangeTable.from_python(..., importer=jax_importer())``."""
    return _core.jax_importer()
