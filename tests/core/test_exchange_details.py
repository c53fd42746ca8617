"""DLPack details every producer may use and the core must honour: a tensor whose data
pointer is not element 0 (``byte_offset``)."""

from __future__ import annotations

import pytest

np = pytest.importorskip("numpy", reason="numpy not installed")

from fake_device import managed_of  # noqa: E402


class OffsetProducer:
    """Exports ``array`` as (data - ``shift`` bytes, byte_offset ``shift``): the same elements."""

    def __init__(self, array, shift):
        self.array, self.shift = array, shift

    def __dlpack__(self, **kwargs):
        capsule = self.array.__dlpack__(max_version=(1, 0))
        managed = managed_of(capsule)
        managed.data -= self.shift
        managed.byte_offset += self.shift
        return capsule

    def __dlpack_device__(self):
        return self.array.__dlpack_device__()


@pytest.mark.parametrize("shift", [4, 64])
def test_kernels_see_element_zero_at_the_byte_offset(tensorplug_kernels, shift):
    base = np.arange(40, dtype=np.float32)
    x = base[16:28].reshape(3, 4)
    producer = OffsetProducer(x, shift)
    assert tensorplug_kernels.data_ptr(producer) == x.__array_interface__["data"][0]
    assert tensorplug_kernels.strided_sum(producer) == float(x.sum())
    tensorplug_kernels.fill(producer, 2.5)
    assert (x == 2.5).all() and base[:16].tolist() == list(range(16)) and base[28:].tolist() == list(range(28, 40))
