"""The jax side of tests/tvm_ffi/test_tvm_ffi_ops.py's sharding case, in a process of its own (jax must
see 4 CPU devices, set by XLA_FLAGS before it starts).

``python tvm_ffi_sharding_worker.py LIBRARY OUT``: declares the ops of the tvm-ffi library
LIBRARY (tests/support/tvm_ffi_kernels.py), runs ``square`` and its gradient under ``jax.jit`` on an
input split over 4 devices, and records the compiled HLO's collectives, the shapes each
device's kernel call gets, the result's sharding and the values, as JSON in OUT.
"""

from __future__ import annotations

import json
import os
import re
import sys
import traceback
from pathlib import Path

os.environ["XLA_FLAGS"] = "--xla_force_host_platform_device_count=4"

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
from jax.sharding import NamedSharding, PartitionSpec as P  # noqa: E402

import tvm_ffi_kernels  # noqa: E402

SHAPE = re.compile(r"[a-z]+[0-9]*\[[0-9,]*\]")


def facts(text: str, target: str) -> dict:
    calls = [line for line in text.splitlines() if f'custom_call_target="{target}' in line]
    return {"all_gather": len(re.findall(r"= \S+ all-gather\(", text)), "all_to_all": text.count("all-to-all("),
            "call_operands": [SHAPE.findall(line.split("operand_layout_constraints=", 1)[1].split("api_version", 1)[0])
                              for line in calls]}


def main() -> None:
    library, out = sys.argv[1], sys.argv[2]
    record: dict = {}
    try:
        ops = tvm_ffi_kernels.declare(library)
        square = ops["square"]
        record["devices"] = jax.device_count()
        xs = np.arange(32, dtype=np.float32).reshape(8, 4) / 8
        mesh = jax.make_mesh((4,), ("d",))
        x = jax.device_put(xs, NamedSharding(mesh, P("d", None)))
        step = jax.jit(square)
        y = step(x)
        record["forward"] = {**facts(step.lower(x).compile().as_text(), square.name),
                             "sharded_like": bool(y.sharding.is_equivalent_to(NamedSharding(mesh, P("d", None)), 2)),
                             "shard_shapes": sorted({tuple(s.data.shape) for s in y.addressable_shards}),
                             "equal": bool(np.array_equal(np.asarray(y), xs * xs))}
        grad = jax.jit(jax.grad(lambda x: square(x).sum()))
        g = grad(x)
        record["grad"] = {**facts(grad.lower(x).compile().as_text(), "tvmffi::"),
                          "close": bool(np.allclose(np.asarray(g), 2 * xs))}
    except Exception:  # noqa: BLE001  (the test shows it)
        record["crash"] = traceback.format_exc()
    Path(out).write_text(json.dumps(record))


if __name__ == "__main__":
    main()
