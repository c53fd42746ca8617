"""mytensor: a small tensor type of its own, to show a third-party tensorplug adapter.

``MyTensor`` keeps its data in a numpy buffer but is its own type: it speaks DLPack
(``__dlpack__`` / ``__dlpack_device__``) and nothing in tensorplug knows about it.
"""

from __future__ import annotations

import numpy as np

__all__ = ["MyTensor", "tensor", "empty"]


class MyTensor:
    """A CPU tensor: ``shape``, ``dtype`` (a name), ``tolist()``, and DLPack export."""

    __slots__ = ("_data",)

    def __init__(self, data: np.ndarray):
        self._data = data

    @property
    def shape(self) -> tuple[int, ...]:
        return self._data.shape

    @property
    def dtype(self) -> str:
        return self._data.dtype.name

    def tolist(self):
        return self._data.tolist()

    def __dlpack__(self, **kwargs):
        return self._data.__dlpack__(**kwargs)

    def __dlpack_device__(self):
        return self._data.__dlpack_device__()

    def __repr__(self) -> str:
        return f"MyTensor({self._data.tolist()}, dtype={self.dtype})"


def tensor(values, dtype: str = "float32") -> MyTensor:
    return MyTensor(np.array(values, dtype=dtype))


def empty(shape, dtype: str = "float32") -> MyTensor:
    return MyTensor(np.empty(shape, dtype=dtype))
