"""Truth table for the arm validity rules of architecture section 3."""

import numpy as np
import pytest

from ncclbot_sweep.names import (
    ALGORITHMS,
    PROTOCOLS,
    Arm,
    FabricOffer,
    arm_invalid_reason,
    canonical_collective,
    prune_arms,
    valid_arms,
)

EVERYTHING = FabricOffer(families=frozenset({"tree", "ring", "collnet", "nvls", "pat"}), pat_multi_gpu=True)

# (collective, algorithm) pairs NCCL can run, on a fabric offering every family.
RUNS = {
    ("Broadcast", "Ring"), ("Reduce", "Ring"),
    ("AllGather", "Ring"), ("AllGather", "PAT"), ("AllGather", "NVLS"), ("AllGather", "CollNetDirect"),
    ("ReduceScatter", "Ring"), ("ReduceScatter", "PAT"), ("ReduceScatter", "NVLS"),
    ("ReduceScatter", "CollNetDirect"),
    ("AllReduce", "Tree"), ("AllReduce", "Ring"), ("AllReduce", "CollNetDirect"),
    ("AllReduce", "CollNetChain"), ("AllReduce", "NVLS"), ("AllReduce", "NVLSTree"),
}
SIMPLE_ONLY = {"NVLS", "NVLSTree", "PAT", "CollNetDirect", "CollNetChain"}


@pytest.mark.parametrize("collective", ["Broadcast", "Reduce", "AllGather", "ReduceScatter", "AllReduce"])
@pytest.mark.parametrize("algorithm", ALGORITHMS)
@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_truth_table_on_a_full_fabric(collective, algorithm, protocol):
    expected = (collective, algorithm) in RUNS and (algorithm not in SIMPLE_ONLY or protocol == "Simple")
    reason = arm_invalid_reason(collective, Arm(algorithm, protocol), nodes=4, gpus_per_node=8, offer=EVERYTHING)
    assert (reason is None) == expected, reason


def test_h100_spectrumx_arm_set_matches_the_paper():
    # Paper section 5: CollNet, pure NVLS and PAT are not applicable on the H100 fabric.
    offer = FabricOffer(families=frozenset({"tree", "ring", "nvls"}))
    allreduce = [str(a) for a in valid_arms("AllReduce", nodes=8, gpus_per_node=8, offer=offer)]
    assert allreduce == ["Tree/LL", "Tree/LL128", "Tree/Simple", "Ring/LL", "Ring/LL128", "Ring/Simple",
                         "NVLSTree/Simple"]
    allgather = [str(a) for a in valid_arms("AllGather", nodes=8, gpus_per_node=8, offer=offer)]
    assert allgather == ["Ring/LL", "Ring/LL128", "Ring/Simple"]


def test_pruned_arms_carry_reasons():
    offer = FabricOffer(families=frozenset({"tree", "ring", "nvls"}))
    _, pruned = prune_arms("AllReduce", nodes=1, gpus_per_node=8, offer=offer)
    reasons = {str(p.arm): p.reason for p in pruned}
    assert "more than one node" in reasons["NVLSTree/Simple"]
    assert "collnet" in reasons["CollNetDirect/Simple"]
    assert "Simple protocol only" in reasons["NVLS/LL"]
    _, pruned = prune_arms("AllGather", nodes=2, gpus_per_node=8, offer=offer)
    assert "CollNet" in {str(p.arm): p.reason for p in pruned}["NVLS/Simple"]


def test_pat_needs_one_gpu_per_node():
    offer = FabricOffer(families=frozenset({"ring", "pat"}))
    assert arm_invalid_reason("AllGather", Arm("PAT", "Simple"), nodes=4, gpus_per_node=1, offer=offer) is None
    assert "one GPU per node" in arm_invalid_reason("AllGather", Arm("PAT", "Simple"), nodes=4, gpus_per_node=8,
                                                    offer=offer)


def test_arm_parsing_and_order():
    assert str(Arm.parse("nvls_tree/SIMPLE")) == "NVLSTree/Simple"
    assert Arm.parse("RING LL128") == Arm("Ring", "LL128")
    assert Arm.from_indices(1, 2) == Arm("Ring", "Simple")
    assert sorted([Arm("Ring", "LL"), Arm("Tree", "Simple")])[0] == Arm("Tree", "Simple")
    with pytest.raises(ValueError, match="algorithm must be one of"):
        Arm.parse("Bogus/LL")


def test_collective_spellings():
    assert canonical_collective("all_reduce_perf") == "AllReduce"
    assert canonical_collective("reducescatter") == "ReduceScatter"
    assert canonical_collective("all_gather") == "AllGather"
    with pytest.raises(ValueError, match="collective must be one of"):
        canonical_collective("allscatter")


def test_sizes_round_trip_in_binary_units():
    from ncclbot_sweep.names import human_size, parse_size

    assert [parse_size(v) for v in ("512B", "4KB", "1M", "16GiB", 4096)] == [512, 4096, 2**20, 16 * 2**30, 4096]
    assert human_size(16 * 2**30) == "16 GiB" and human_size(1000) == "1000 B"
    # One formatter for plans, tables and figures: sizes that are not whole units stay short.
    assert [human_size(v) for v in (1536, 1048560, np.int64(4096), np.float64(2**20))] == [
        "1.5 KiB", "1023.98 KiB", "4 KiB", "1 MiB"]
    with pytest.raises(ValueError, match="like '512B', '1M', '16GiB'"):
        parse_size("12 parsecs")



@pytest.mark.parametrize("text, size", [("8", 8), ("1K", 1024), ("1k", 1024), ("2M", 2 * 2**20), ("1g", 2**30),
                                        ("1.5K", 1536), ("1 K", 1024), ("1KB", 1024), ("16GiB", 16 * 2**30),
                                        ("1e3", 1000), (" 7.9", 7), ("4", 4), (".5M", 2**19)])
def test_nccl_tests_sizes_are_read_as_its_parsesize_reads_them(text, size):
    from ncclbot_sweep.names import parse_size

    assert parse_size(text, nccl_tests=True) == size


@pytest.mark.parametrize("text", ["512B", "1T", "1X", "K", "", "-1K", "abc"])
def test_nccl_tests_refuses_what_its_parsesize_refuses(text):
    from ncclbot_sweep.names import parse_size

    with pytest.raises(ValueError, match="optional K, M or G"):
        parse_size(text, nccl_tests=True)


def test_full_buffer_rule_needs_the_rank_count_for_allgather_and_reducescatter():
    from ncclbot_sweep.names import full_buffer_bytes

    assert full_buffer_bytes("AllGather", 1024, 16) == 16384
    assert full_buffer_bytes("ReduceScatter", 1024, None) is None
    assert full_buffer_bytes("AllReduce", 1024, None) == 1024


def test_dtype_spellings_and_widths():
    from ncclbot_sweep.names import NCCL_DATATYPES, canonical_dtype, dtype_bytes, nccl_datatype, nccl_type_name

    assert nccl_datatype(7) == ("float", 4) and nccl_datatype(9) == ("bfloat16", 2) and nccl_datatype(12) is None
    assert canonical_dtype("c10::BFloat16") == "bfloat16" and canonical_dtype("fp32") == "float"
    assert dtype_bytes("f16") == 2 and dtype_bytes("short") == 2 and dtype_bytes("quaternion") is None
    for name, width in NCCL_DATATYPES:  # NCCL's enum names (profiler traces) read back
        assert canonical_dtype(nccl_type_name(name)) == name and dtype_bytes(nccl_type_name(name)) == width
    assert [canonical_dtype(v) for v in ("ncclChar", "ncclInt", "ncclHalf", "ncclFloat", "ncclDouble")] == [
        "int8", "int32", "half", "float", "double"]  # nccl.h's legacy aliases


def test_nccl_type_names_follow_the_enum_and_refuse_non_nccl_types():
    from ncclbot_sweep.names import nccl_type_name

    assert [nccl_type_name(v) for v in ("float", "fp16", "c10::BFloat16", "int8")] == [
        "ncclFloat32", "ncclFloat16", "ncclBfloat16", "ncclInt8"]
    with pytest.raises(ValueError, match="data type must be one of int8, uint8, .*f8e5m2, but got 'short'"):
        nccl_type_name("short")


def test_alltoall_splits_counts_per_rank_but_is_not_a_full_buffer_collective():
    from ncclbot_sweep.names import FULL_BUFFER_COLLECTIVES, PER_RANK_COUNT_COLLECTIVES, full_buffer_bytes

    assert PER_RANK_COUNT_COLLECTIVES == FULL_BUFFER_COLLECTIVES | {"AlltoAll"}
    assert "AlltoAll" not in FULL_BUFFER_COLLECTIVES and full_buffer_bytes("AlltoAll", 1024, None) == 1024


def test_collective_algorithms_is_the_validity_table():
    from ncclbot_sweep.names import COLLECTIVES, SIMPLE_ONLY_ALGORITHMS, collective_algorithms

    for coll in COLLECTIVES:
        assert collective_algorithms(coll) == {a for c, a in RUNS if c == coll}
    assert collective_algorithms("alltoall") == frozenset() and SIMPLE_ONLY_ALGORITHMS == SIMPLE_ONLY


def test_collective_in_text_prefers_the_longest_spelling():
    from ncclbot_sweep.names import collective_in_text

    assert collective_in_text("logs/nccl-reduce_scatter-8n.log") == "ReduceScatter"
    assert collective_in_text("ALL_GATHER.txt") == "AllGather" and collective_in_text("reduce.txt") == "Reduce"
    assert collective_in_text("notes.txt") is None


def test_torch_collective_reads_pytorch_op_names():
    from ncclbot_sweep.names import torch_collective

    ops = {"nccl:_all_gather_base": "AllGather", "reduce_scatter_tensor": "ReduceScatter",
           "all_gather_into_tensor": "AllGather", "allreduce_coalesced": "AllReduce", "all_to_all": "AlltoAll",
           "_reduce_scatter_base": "ReduceScatter", "reduce": "Reduce", "gather": "Gather", "send": "SendRecv",
           "recv": "SendRecv", "barrier": "Barrier", "Broadcast": "Broadcast", "wait": None, "": None}
    assert {op: torch_collective(op) for op in ops} == ops
