"""A function of a library built by apache tvm-ffi as a tensorplug op with a sharding rule, on
torch DTensors (issue 42 item 4): 2 gloo ranks (tests/support/tvm_ffi_dtensor_worker.py, started
as tests/torch/test_sharding_torch.py starts its own) call ``square`` (elementwise, its backward
a tvm-ffi function too) on split inputs; the result keeps the split, equals the unsharded call,
and no collective runs (no all-gather).
"""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch", reason="torch not installed")
pytest.importorskip("tvm_ffi", reason="apache-tvm-ffi not installed (pip install \"tensorplug[tvm-ffi]\")")
if not torch.distributed.is_available() or not torch.distributed.is_gloo_available():
    pytest.skip("torch.distributed with gloo not available", allow_module_level=True)

import tvm_ffi_kernels  # noqa: E402
from sharding_procs import free_port, run_workers  # noqa: E402


@pytest.fixture(scope="module")
def ranks(tmp_path_factory):
    library = tvm_ffi_kernels.build(tmp_path_factory.mktemp("tvm_ffi_dtensor_lib"))
    port = str(free_port())
    return run_workers("tvm_ffi_dtensor_worker.py", [[library, "0", "2", port], [library, "1", "2", port]],
                       tmp_path_factory.mktemp("tvm_ffi_dtensor_ranks"))


def test_a_split_input_stays_split_with_no_collective(ranks):
    for record in ranks:
        assert record["square_shard0"] == {"type": "DTensor", "placements": ["Shard(dim=0)"], "local_shape": [4, 6],
                                           "collectives": 0, "counts": {}, "equal": True}
        assert record["square_shard1"] == {"type": "DTensor", "placements": ["Shard(dim=1)"], "local_shape": [8, 3],
                                           "collectives": 0, "counts": {}, "equal": True}


def test_the_tvm_ffi_backward_runs_on_the_shards(ranks):
    for record in ranks:
        assert record["grad"] == {"placements": ["Shard(dim=0)"], "collectives": 0, "equal": True}
