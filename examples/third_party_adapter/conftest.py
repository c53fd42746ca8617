"""How tensorplug's conformance kit makes and reads MyTensors.

Without this the kit would make them through the adapter's own output conversion and read
them through ``__dlpack__``; building them directly checks the adapter against MyTensor
itself. pytest finds this file both for ``pytest`` here and for
``pytest --pyargs tensorplug.testing.conformance --tensorplug-adapter=mytensor`` run from
this directory.
"""

import numpy as np

from tensorplug.testing import Framework, numpy_view


class MyTensorFramework(Framework):
    name = "mytensor"
    module = "mytensor"

    def from_numpy(self, array, device=None, dtype=None):
        from mytensor import MyTensor

        return MyTensor(array.copy())

    def as_strided(self, base, shape, strides, offset):
        from mytensor import MyTensor

        return MyTensor(numpy_view(np.from_dlpack(base), shape, strides, offset))

    def to_numpy(self, x):
        return np.from_dlpack(x).copy()

    def read_only_tensor(self, array):
        from mytensor import MyTensor

        array = array.copy()
        array.flags.writeable = False
        return MyTensor(array)


def pytest_tensorplug_framework(name):
    if name == "mytensor":
        return MyTensorFramework()
    return None
