"""Ops with a sharding rule under jax.jit over a device mesh (issue 25).

jax needs several CPU devices, set by XLA_FLAGS before it starts, so the cases run in
worker processes (tests/support/sharding_jax_worker.py): one with 4 local devices, and 2 joined by
jax.distributed (CPU collectives over gloo, 2 devices each). The tests assert on the
compiled HLO (no all-gather or all-to-all of a split input; the shapes each device's
kernel call gets), the results' shardings and shard shapes, values, and error messages.
"""

from __future__ import annotations

import pytest

pytest.importorskip("jax", reason="jax not installed")

import sharding_kernels  # noqa: E402
from sharding_procs import free_port, run_workers  # noqa: E402


@pytest.fixture(scope="module")
def single(tmp_path_factory, ops):
    sharding_kernels.load()  # built once here (op_kernels by `ops`), loaded by the worker from the session's cache
    return run_workers("sharding_jax_worker.py", [["single"]], tmp_path_factory.mktemp("jax_single"))[0]


@pytest.mark.parametrize("axis_type", ["Explicit", "Auto"])
def test_batch_split_input_is_never_gathered(single, axis_type):
    case = single[f"scale_{axis_type}"]
    assert single["devices"] == 4
    assert case["all_gather"] == 0 and case["all_to_all"] == 0
    assert case["call_operands"] == [["f32[2,8]"]]  # each device runs the kernel on its 2 of 8 rows
    assert case["sharded_like"] and case["shard_shapes"] == [[2, 8]]  # the result keeps the batch split
    assert case["equal"]


@pytest.mark.parametrize("axis_type", ["Explicit", "Auto"])
def test_op_without_rule_gathers_the_whole_input(single, axis_type):
    # What the rule removes (and the check above would see): every device gets all 8 rows.
    case = single[f"no_rule_{axis_type}"]
    assert case["all_gather"] == 1 and case["all_gather_dimensions"] == ["0"]
    assert case["call_operands"] == [["f32[8,8]"]]
    assert not case["sharded_like"] and case["shard_shapes"] == [[8, 8]]
    assert case["equal"]


def test_matmul_with_replicated_weights_splits_the_batch(single):
    case = single["matmul_batch"]
    assert case["all_gather"] == 0 and case["all_to_all"] == 0 and case["all_reduce"] == 0
    # each device: its 2 rows of x, all of w
    assert case["call_operands"] == [["f32[2,8]", "f32[8,4]"]] and case["call_shapes"] == [["f32[2,4]"]]
    assert case["sharded_like"] and case["shard_shapes"] == [[2, 4]]
    assert case["close"]


def test_split_inner_dimension_is_gathered_not_summed(single):
    # "i" is an input-only factor: it stays whole (a kernel is no linear map jax could all-reduce).
    case = single["matmul_inner"]
    assert sorted(case["all_gather_dimensions"]) == ["0", "1"] and case["all_reduce"] == 0
    assert case["call_operands"] == [["f32[8,8]", "f32[8,4]"]] and case["call_shapes"] == [["f32[8,4]"]]
    assert case["close"]


def test_whole_factor_gathers_only_its_dimension(single):
    # x split over a 2x2 mesh on both dimensions; "b [n] -> b [n]": only n (dimension 1) is gathered.
    case = single["cumsum_rows"]
    assert case["all_gather"] == 1 and case["all_gather_dimensions"] == ["1"] and case["all_to_all"] == 0
    assert case["call_operands"] == [["f32[4,8]"]]  # rows still split in 2, each row whole
    assert case["equal"]


def test_shard_map_runs_the_op_per_block(single):
    case = single["shard_map"]
    assert case["sharded_like"] and case["shard_shapes"] == [[2, 8]] and case["equal"]


def test_vmap_still_maps_the_kernel(single):
    assert single["vmap"] == {"eager": True, "jit": True}


def test_eager_calls(single):
    # A split concrete array runs through jax.jit and stays split; one device calls the kernel.
    assert single["eager_split"] == {"sharded_like": True, "shard_shapes": [[2, 8]], "type": "ArrayImpl",
                                     "equal": True}
    assert single["eager_one_device"] == {"type": "ArrayImpl", "equal": True}


def test_written_parameter_keeps_its_split(single):
    case = single["axpy"]
    assert case["all_gather"] == 0 and case["call_operands"] == [["f32[16]", "f32[16]"]]
    assert case["sharded_like"] and case["shard_shapes"] == [[16]] and case["equal"]


@pytest.mark.parametrize("axis_type", ["Explicit", "Auto"])
def test_written_parameter_as_a_fresh_result_is_split_as_its_term(single, axis_type):
    # axpy's `out` given as jax.ShapeDtypeStruct: no operand, each device's call gets its 2 of 8
    # rows as a fresh result (the plan's /fresh:out), nothing gathered, the result split as x.
    case = single[f"fresh_{axis_type}"]
    assert case["all_gather"] == 0 and case["all_to_all"] == 0
    assert case["call_operands"] == [["f32[2,8]", "f32[2,8]"]] and case["call_shapes"] == [["f32[2,8]"]]
    assert case["sharded_like"] and case["shard_shapes"] == [[2, 8]]
    assert case["equal"] and case["equal_aliased"]
    assert case["eager"] == {"sharded_like": True, "shard_shapes": [[2, 8]], "equal": True}
    assert case["eager_other_shape"] == {
        "type": "ValueError",
        "message": "tpshard::axpy_fresh: sharding rule 'elementwise': dimension '... (dimension 1)' is 8 in argument "
                   "'x' (8, 8) and 4 in argument 'out' (8, 4)"}


@pytest.mark.parametrize("name", ["whole", "struct_only"])
def test_fresh_result_keeps_whole_the_factors_no_split_input_gives(single, name):
    # x, y split on a 2x2 mesh on both dimensions. "b [n], ...": n is gathered (dimension 1
    # only); "b n, b n, b m ->": m is named by the struct alone, so no input gives it a split
    # and it stays whole (n, an input-only factor, is gathered). Each device: its (4, 8).
    case = single[f"fresh_{name}"]
    assert case["all_gather"] == 2 and case["all_gather_dimensions"] == ["1", "1"] and case["all_to_all"] == 0
    assert case["call_operands"] == [["f32[4,8]", "f32[4,8]"]] and case["call_shapes"] == [["f32[4,8]"]]
    assert case["sharded_like"] and case["shard_shapes"] == [[4, 8]] and case["equal"]


def test_output_rule_disagreeing_with_sharding_rule_is_refused(single):
    assert single["head_bad"] == {
        "type": "ValueError",
        "message": "tpshard::head_bad: sharding rule 'b -> b': with 'b' split in 2, the output rule makes output 0 "
                   "(8,) on one shard, the sharding rule (4,): the two rules disagree"}


def test_shapes_that_do_not_fit_the_rule_are_refused(single):
    assert single["rank_mismatch"] == {
        "type": "ValueError",
        "message": "tpshard::cumsum_rows: sharding rule 'b [n] -> b [n]': argument 'x' has 1 dimensions (8,), its "
                   "term 'b n' names 2"}
    assert single["inner_mismatch"] == {
        "type": "ValueError",
        "message": "tpshard::matmul: sharding rule 'b i, i j -> b j': dimension 'i' is 8 in argument 'a' (8, 8) and "
                   "5 in argument 'w' (5, 4)"}


def test_docs_data_parallel_step_on_four_devices(single):
    # docs/compilers.md's jax block, on 4 devices: relu and its gradient run on each device's
    # 2 of 8 rows; the one collective is the weights' gradient all-reduce.
    case = single["docs"]
    if "skipped" in case:
        pytest.skip(case["skipped"])
    assert case["devices"] == 4
    assert case["all_gather"] == 0 and case["all_to_all"] == 0 and case["all_reduce"] == 1
    assert case["call_shapes"] == [["f32[2,2]"]] and case["grad_calls"] == [["f32[2,2]"]]


def test_two_processes_with_jax_distributed(tmp_path):
    sharding_kernels.load()
    port = str(free_port())
    records = run_workers("sharding_jax_worker.py", [["multi", "0", port], ["multi", "1", port]], tmp_path)
    rows = []
    for record in records:
        assert (record["processes"], record["devices"], record["local"]) == (2, 4, 2)
        case = record["scale"]
        assert case["all_gather"] == 0 and case["all_to_all"] == 0 and case["call_operands"] == [["f32[2,6]"]]
        assert case["sharded_like"] and case["shard_shapes"] == [[2, 6]] and case["local_equal"]
        rows += case["local_rows"]
        assert record["total"] == 2 * sum(range(48))
    assert sorted(rows) == [0, 2, 4, 6]  # each process computed its own half of the batch
