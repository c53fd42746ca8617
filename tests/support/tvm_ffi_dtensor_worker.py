"""One rank of tests/tvm_ffi/test_tvm_ffi_dtensor.py: a tvm-ffi function as a tensorplug op with a
sharding rule, on torch DTensors over gloo (the machinery of tests/torch/test_sharding_torch.py:
started by sharding_procs.run_workers).

``python tvm_ffi_dtensor_worker.py LIBRARY RANK WORLD PORT OUT``: declares the ops of the tvm-ffi
library LIBRARY (tests/support/tvm_ffi_kernels.py: ``square``, elementwise, with a backward that
is itself a tvm-ffi function), calls ``square`` on DTensors split over the ranks and records
placements, local shapes, collective counts (CommDebugMode) and values against the unsharded
call, and the gradient's, as JSON in OUT.
"""

from __future__ import annotations

import json
import os
import sys
import traceback
from datetime import timedelta

import numpy as np
import torch
import torch.distributed as dist

import tvm_ffi_kernels

from torch.distributed.tensor import Shard, distribute_tensor, init_device_mesh  # noqa: E402
from torch.distributed.tensor.debug import CommDebugMode  # noqa: E402


def placements(t):
    return [repr(p) for p in t.placements]


def square_case(mesh, square, full, placement):
    x = distribute_tensor(full, mesh, [placement])
    with CommDebugMode() as comm:
        out = square(x)
    return {"type": type(out).__name__, "placements": placements(out), "local_shape": list(out.to_local().shape),
            "collectives": comm.get_total_counts(),
            "counts": {str(k): v for k, v in comm.get_comm_counts().items()},
            "equal": bool(torch.equal(out.full_tensor(), square(full)))}  # the unsharded call, plain tensors


def grad_case(mesh, square, full):
    """The gradient through the op's tvm-ffi backward, on a Shard(0) DTensor."""
    x = distribute_tensor(full, mesh, [Shard(0)]).requires_grad_()
    y = square(x)
    with CommDebugMode() as comm:  # the backward alone (the sum's all-reduce is before it)
        y.backward(torch.ones_like(y))
    return {"placements": placements(x.grad), "collectives": comm.get_total_counts(),
            "equal": bool(torch.equal(x.grad.full_tensor(), 2 * full))}


def main(library: str, rank: int, world: int, port: int, out_path: str) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=world, timeout=timedelta(seconds=60))
    record: dict = {}
    try:
        square = tvm_ffi_kernels.declare(library, namespace="tvmffi_dtensor")["square"]
        mesh = init_device_mesh("cpu", (world,))
        full = torch.from_numpy(np.random.default_rng(0).standard_normal((8, 6)).astype(np.float32))
        record["square_shard0"] = square_case(mesh, square, full, Shard(0))
        record["square_shard1"] = square_case(mesh, square, full, Shard(1))
        record["grad"] = grad_case(mesh, square, full)
    except Exception:  # noqa: BLE001  (the test shows it)
        record["crash"] = traceback.format_exc()
    finally:
        try:  # both ranks done before either tears down its gloo pairs
            dist.barrier()
        except Exception:  # noqa: BLE001  (a rank that crashed: its record says so)
            pass
        dist.destroy_process_group()
    with open(out_path, "w") as f:
        json.dump(record, f)
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)  # as sharding_torch_worker.py: no interpreter teardown of gloo's threads


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), sys.argv[5])
