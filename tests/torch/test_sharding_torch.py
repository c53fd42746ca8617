"""Ops with a sharding rule on torch DTensors (issue 25): 2 processes joined by gloo on
127.0.0.1 (tests/support/sharding_torch_worker.py), each recording placements, local shapes,
collective counts (CommDebugMode), values against the unsharded call, and errors; the
tests assert on the records of both ranks."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch", reason="torch not installed")
if not torch.distributed.is_available() or not torch.distributed.is_gloo_available():
    pytest.skip("torch.distributed with gloo not available", allow_module_level=True)

import sharding_kernels  # noqa: E402
from sharding_procs import free_port, run_workers  # noqa: E402


@pytest.fixture(scope="module")
def ranks(tmp_path_factory):
    sharding_kernels.load()  # built once here, loaded by the workers from the session's cache
    port = str(free_port())
    return run_workers("sharding_torch_worker.py", [["0", "2", port], ["1", "2", port]],
                       tmp_path_factory.mktemp("torch_ranks"))


def cases(ranks, name):
    return [record[name] for record in ranks]


def test_shard0_in_shard0_out_without_collectives(ranks):
    assert not ranks[0]["dtensor_imported_at_declaration"]  # strategies registered when DTensor came
    for case in cases(ranks, "scale_shard0"):
        assert case == {"type": "DTensor", "placements": ["Shard(dim=0)"], "local_shape": [4, 6],
                        "collectives": 0, "counts": {}, "equal": True}
    for case in cases(ranks, "scale_shard1"):  # elementwise: any dimension
        assert case["placements"] == ["Shard(dim=1)"] and case["collectives"] == 0 and case["equal"]


def test_replicate_in_replicate_out(ranks):
    for case in cases(ranks, "scale_replicate"):
        assert case == {"type": "DTensor", "placements": ["Replicate()"], "local_shape": [8, 6],
                        "collectives": 0, "counts": {}, "equal": True}


def test_matmul_batch_and_column_splits(ranks):
    for case in cases(ranks, "matmul_batch"):  # x Shard(0), w Replicate (a weight)
        assert case == {"type": "DTensor", "placements": ["Shard(dim=0)"], "local_shape": [4, 4],
                        "collectives": 0, "counts": {}, "equal": True}
    for case in cases(ranks, "matmul_columns"):  # x Replicate, w Shard(1)
        assert case == {"type": "DTensor", "placements": ["Shard(dim=1)"], "local_shape": [8, 2],
                        "collectives": 0, "counts": {}, "equal": True}


def test_inner_dimension_split_is_gathered_not_summed(ranks):
    for case in cases(ranks, "matmul_inner"):
        assert case["placements"] == ["Replicate()"] and case["equal"]
        assert case["counts"] == {"c10d_functional.all_gather_into_tensor": 2}


def test_whole_factor_split_is_gathered(ranks):
    for case in cases(ranks, "cumsum_rows_shard0"):
        assert case["placements"] == ["Shard(dim=0)"] and case["collectives"] == 0 and case["equal"]
    for case in cases(ranks, "cumsum_rows_shard1"):  # "b [n] -> b [n]": n split is gathered first
        assert case["placements"] == ["Replicate()"] and case["equal"]
        assert case["counts"] == {"c10d_functional.all_gather_into_tensor": 1}


def test_torch_compile_over_dtensor(ranks):
    # The first DTensor call of the op is inside torch.compile (fullgraph): the graph aot_autograd
    # compiles holds the op on the local shard and no collective.
    for case in cases(ranks, "compiled"):
        assert case["placements"] == ["Shard(dim=0)"] and case["equal"]
        assert "torch.ops.tpshard.scale.nograd(" in case["graph"]  # the op below its native Autograd kernel
        assert "c10d" not in case["graph"] and "all_gather" not in case["graph"]
        gathered = case["gathered"]  # Shard(1) into "b [n] -> b [n]": one all-gather in the graph, then the op
        assert gathered["placements"] == ["Replicate()"] and gathered["equal"]
        assert gathered["graph"].count("all_gather_into_tensor.default(") == 1
        assert gathered["graph"].index("all_gather_into_tensor") < gathered["graph"].index("tpshard.cumsum_rows")


def test_op_without_rule_is_refused_by_dtensor(ranks):
    # DTensor's NotImplementedError crosses the op's native Autograd kernel. The compiled
    # bridge (the default) passes the call on on torch's own stack, so the caller gets the
    # exception as raised; the stable kernel's hop keeps its text and its type's name
    # (the torch plugin's kernel.cc; docs/decisions.md).
    text = "Operator tpshard.scale_no_rule.nograd does not have a sharding strategy registered."
    for case in cases(ranks, "no_rule"):
        if case["bridged"]:
            assert case == {"type": "NotImplementedError", "message": text, "bridged": True}
        else:
            assert case == {"type": "RuntimeError", "message": f"NotImplementedError: {text}", "bridged": False}


def test_declarations_are_checked_on_torch_path(ranks):
    for record in ranks:
        assert record["head_bad"]["type"] == "RuntimeError"
        assert record["head_bad"]["message"].startswith(
            "tpshard::head_bad: sharding rule 'b -> b': with 'b' split in 2, the output rule makes output 0 (8,) on "
            "one shard, the sharding rule (4,): the two rules disagree")
        assert record["rank_mismatch"]["message"].startswith(
            "tpshard::cumsum_rows: sharding rule 'b [n] -> b [n]': argument 'x' has 1 dimensions (6,), its term "
            "'b n' names 2")


def test_op_writing_an_argument_is_refused(ranks):
    for case in cases(ranks, "axpy"):
        assert case["type"] == "RuntimeError"
        assert case["message"].startswith(
            "tpshard::axpy: an op that writes arguments (out) cannot run on DTensors: DTensor may hand the kernel a "
            "redistributed copy, and the write would be lost; call it on the local tensors (to_local()) instead")


def test_docs_data_parallel_step_on_two_processes(ranks):
    # docs/compilers.md's torch block ran on both ranks (it asserts loss and gradient values itself);
    # the weights' gradient is a pending sum over the ranks, reduced when read.
    for case in cases(ranks, "docs"):
        assert case == {"activation": ["Shard(dim=0)"], "collectives": 0, "grad": ["Partial(sum)"],
                        "grad_local_shape": [3, 2]}
