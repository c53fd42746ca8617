"""One rank of tests/torch/test_sharding_torch.py: tensorplug ops on DTensors over gloo.

Run as ``python sharding_torch_worker.py RANK WORLD PORT OUT``: joins the process group on
127.0.0.1:PORT, records what each case gives (placements, local shapes, collective counts,
values, error messages) and writes them as JSON to OUT. The test asserts on the records.
"""

from __future__ import annotations

import json
import os
import re
import sys
import traceback
from datetime import timedelta
from pathlib import Path

import numpy as np
import torch
import torch.distributed as dist

import sharding_kernels

MOD = sharding_kernels.load()
# Declared while torch.distributed.tensor is not imported: the strategies come at the first DTensor call.
OPS = sharding_kernels.declare(MOD)
DTENSOR_IMPORTED_AT_DECLARATION = "torch.distributed.tensor" in sys.modules

from torch.distributed.tensor import DTensor, Replicate, Shard, distribute_tensor, init_device_mesh  # noqa: E402
from torch.distributed.tensor.debug import CommDebugMode  # noqa: E402


DOCS = Path(__file__).resolve().parents[2] / "docs" / "compilers.md"


def doc_block(marker: str) -> str:
    """The python block of docs/compilers.md whose first line is ``# sharding example: <marker>``."""
    for block in re.findall(r"```python\n(.*?)```", DOCS.read_text(), re.S):
        if block.startswith(f"# sharding example: {marker}\n"):
            return block
    raise LookupError(f"docs/compilers.md has no python block '# sharding example: {marker}'")


def docs_case():
    """docs/compilers.md's torch data-parallel step (it asserts its own values)."""
    namespace: dict = {}
    exec(compile(doc_block("kernels"), "docs/compilers.md (kernels)", "exec"), namespace)
    exec(compile(doc_block("torch"), "docs/compilers.md (torch)", "exec"), namespace)
    w = namespace["w"]
    return {"activation": placements(namespace["a"]), "collectives": namespace["comm"].get_total_counts(),
            "grad": placements(w.grad), "grad_local_shape": list(w.grad.to_local().shape)}


def placements(t):
    return [repr(p) for p in t.placements]


def run_case(mesh, op, inputs, args=()):
    """Call ``op`` on DTensors made from (tensor, placement) ``inputs``: what it gives."""
    dtensors = [distribute_tensor(t, mesh, [p]) for t, p in inputs]
    with CommDebugMode() as comm:
        out = op(*dtensors, *args)
    expected = op(*[t for t, _ in inputs], *args)  # the unsharded result, on plain tensors
    counts = {str(k): v for k, v in comm.get_comm_counts().items()}
    return {"type": type(out).__name__, "placements": placements(out), "local_shape": list(out.to_local().shape),
            "collectives": comm.get_total_counts(), "counts": counts,
            "equal": bool(torch.equal(out.full_tensor(), expected))}


def error_of(fn):
    try:
        fn()
    except Exception as e:  # noqa: BLE001  (recorded for the test)
        return {"type": type(e).__name__, "message": str(e)}
    return None


def compiled_case(mesh, full):
    """torch.compile over a Shard(0) DTensor: the forward graph aot_autograd hands its compiler."""
    from torch._dynamo.backends.common import aot_autograd

    graphs = []

    def capture(gm, example_inputs):
        graphs.append(gm.code)
        return gm.forward

    scale = OPS["scale"]

    def step(x):
        return scale(x, 3.0) + 1

    x = distribute_tensor(full, mesh, [Shard(0)])
    compiled = torch.compile(step, backend=aot_autograd(fw_compiler=capture), fullgraph=True)
    out = compiled(x)
    record = {"placements": placements(out), "equal": bool(torch.equal(out.full_tensor(), full * 3 + 1)),
              "graph": "\n".join(graphs)}
    # A whole factor split (n of "b [n] -> b [n]"): the compiled graph gathers it.
    graphs.clear()
    cumsum = torch.compile(lambda t: OPS["cumsum_rows"](t), backend=aot_autograd(fw_compiler=capture), fullgraph=True)
    out = cumsum(distribute_tensor(full, mesh, [Shard(1)]))
    record["gathered"] = {"placements": placements(out), "graph": "\n".join(graphs),
                          "equal": bool(torch.equal(out.full_tensor(), OPS["cumsum_rows"](full)))}
    return record


def main(rank: int, world: int, port: int, out_path: str) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=world, timeout=timedelta(seconds=60))
    record: dict = {"dtensor_imported_at_declaration": DTENSOR_IMPORTED_AT_DECLARATION}
    try:
        mesh = init_device_mesh("cpu", (world,))
        rng = np.random.default_rng(0)
        full = torch.from_numpy(rng.standard_normal((8, 6)).astype(np.float32))
        w = torch.from_numpy(rng.standard_normal((6, 4)).astype(np.float32))
        ops = OPS
        # The first call inside torch.compile, before any eager DTensor call of the op.
        record["compiled"] = compiled_case(mesh, full)
        record["scale_shard0"] = run_case(mesh, ops["scale"], [(full, Shard(0))], (2.0,))
        record["scale_shard1"] = run_case(mesh, ops["scale"], [(full, Shard(1))], (2.0,))
        record["scale_replicate"] = run_case(mesh, ops["scale"], [(full, Replicate())], (2.0,))
        record["matmul_batch"] = run_case(mesh, ops["matmul"], [(full, Shard(0)), (w, Replicate())])
        record["matmul_columns"] = run_case(mesh, ops["matmul"], [(full, Replicate()), (w, Shard(1))])
        record["matmul_inner"] = run_case(mesh, ops["matmul"], [(full, Shard(1)), (w, Shard(0))])
        record["cumsum_rows_shard0"] = run_case(mesh, ops["cumsum_rows"], [(full, Shard(0))])
        record["cumsum_rows_shard1"] = run_case(mesh, ops["cumsum_rows"], [(full, Shard(1))])
        x = distribute_tensor(full, mesh, [Shard(0)])
        from tensorplug_adapters.torch import native as torch_native
        record["no_rule"] = {**(error_of(lambda: ops["scale_no_rule"](x, 2.0)) or {}),
                             "bridged": torch_native.bridged(ops["scale_no_rule"])}
        record["head_bad"] = error_of(lambda: ops["head_bad"](distribute_tensor(full[:, 0].contiguous(), mesh,
                                                                                [Shard(0)]), 8))
        record["rank_mismatch"] = error_of(lambda: ops["cumsum_rows"](distribute_tensor(full[0].contiguous(), mesh,
                                                                                         [Shard(0)])))
        record["docs"] = docs_case()
        record["axpy"] = error_of(lambda: ops["axpy"](x, distribute_tensor(torch.zeros(8, 6), mesh, [Shard(0)]), 1.0))
    except Exception:  # noqa: BLE001  (the test shows it)
        record["crash"] = traceback.format_exc()
    finally:
        # Both ranks done before either tears down its gloo pairs (rank 0 also serves the
        # store): neither is left talking to a peer that is exiting.
        try:
            dist.barrier()
        except Exception:  # noqa: BLE001  (a rank that crashed: its record says so)
            pass
        dist.destroy_process_group()
    with open(out_path, "w") as f:
        json.dump(record, f)
    # The record is the worker's whole product; end here, without interpreter finalization
    # and C++ static destructors. torch.compile's guard caches keep the DeviceMesh (and
    # through it the gloo process group, its worker and transport threads) alive until then,
    # and their teardown order at exit is where a gloo worker once aborted ("terminate called
    # without an active exception", 1 run in 3; docs/reliability.md).
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


if __name__ == "__main__":
    main(int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), sys.argv[4])
