"""Sharder, constraints, memory capacity and the insufficient-memory report (no training)."""

import re

import psutil
import pytest
import torch
from torchrec.distributed.embeddingbag import EmbeddingBagCollectionSharder
from torchrec.distributed.types import ShardingType

from conftest import compose_cfg
from dlrm_exp.config import (
    Backend,
    ComputeDevice,
    EmbeddingDataType,
    HardwareConfig,
    ShardingConfig,
    ShardingStrategy,
    SparseOptimizer,
)
from dlrm_exp.distributed.launch import DistContext
from dlrm_exp.distributed.sharder import CpuEmbeddingBagCollectionSharder
from dlrm_exp.errors import ConfigError, InsufficientMemoryError
from dlrm_exp.factories.experiment import build_module
from dlrm_exp.factories.model import build_model
from dlrm_exp.planning.constraints import build_constraints
from dlrm_exp.planning.job import plan_job
from dlrm_exp.planning.planner import insufficient_memory_message
from dlrm_exp.planning.storage import GIB, embedding_storage, largest_fitting_cap
from dlrm_exp.planning.tables import table_configs
from dlrm_exp.planning.topology import MemoryCapacity, memory_capacity

CPU_ONE_RANK = DistContext(
    rank=0, world_size=1, local_rank=0, local_world_size=1, device=torch.device("cpu")
)
ROW_TYPES = {
    ShardingType.ROW_WISE.value,
    ShardingType.TABLE_ROW_WISE.value,
    ShardingType.GRID_SHARD.value,
}


def test_cpu_sharder_offers_row_wise_types_the_stock_one_does_not():
    stock = set(EmbeddingBagCollectionSharder().sharding_types("cpu"))
    ours = set(CpuEmbeddingBagCollectionSharder().sharding_types("cpu"))
    assert not ROW_TYPES & stock
    assert ROW_TYPES <= ours and stock <= ours
    assert set(CpuEmbeddingBagCollectionSharder().sharding_types("cuda")) == set(
        EmbeddingBagCollectionSharder().sharding_types("cuda")
    )


def test_constraints_per_table():
    tables = table_configs(compose_cfg().model)
    offered = CpuEmbeddingBagCollectionSharder().sharding_types("cpu")
    rw = build_constraints(ShardingConfig(sharding_type=ShardingStrategy.row_wise), tables, offered)
    assert set(rw) == {t.name for t in tables}
    assert all(
        c.sharding_types == ["row_wise"] and c.compute_kernels == ["fused"] for c in rw.values()
    )
    auto = build_constraints(ShardingConfig(), tables, offered)
    assert "data_parallel" not in auto["t_cat_0"].sharding_types  # fused kernel cannot replicate
    assert "row_wise" in auto["t_cat_0"].sharding_types


def test_memory_capacity_measured_or_configured():
    measured = memory_capacity(HardwareConfig(), local_world_size=2)
    assert measured.ddr_bytes == psutil.virtual_memory().total // 2
    assert "measured" in measured.source
    configured = memory_capacity(HardwareConfig(ddr_cap=1.5), local_world_size=2)
    assert configured.ddr_bytes == int(1.5 * GIB)
    gpu = HardwareConfig(compute_device=ComputeDevice.cuda, backend=Backend.nccl, hbm_cap=40)
    assert memory_capacity(gpu, local_world_size=8).hbm_bytes == 40 * GIB


@pytest.mark.skipif(torch.cuda.is_available(), reason="a CUDA device gives the capacity")
def test_a_gpu_plan_without_hbm_cap_or_a_gpu_is_refused_not_planned_at_torchrecs_default():
    no_cap = HardwareConfig(compute_device=ComputeDevice.cuda, backend=Backend.nccl, hbm_cap=None)
    with pytest.raises(ConfigError, match=r"hardware.hbm_cap=null .* no CUDA device"):
        memory_capacity(no_cap, local_world_size=8)


def test_mlperf_storage_is_97_36_gib():
    sizes = compose_cfg(["model=mlperf"]).model.table_sizes
    storage = embedding_storage(sizes, 128, SparseOptimizer.rowwise_adagrad)
    assert storage.rows == 204_184_588
    assert round(storage.weight_bytes / GIB, 2) == 97.36
    assert storage.optimizer_bytes == storage.rows * 4
    assert embedding_storage(sizes, 128, SparseOptimizer.sgd).optimizer_bytes == 0


def test_fp16_tables_halve_the_weights_and_double_the_cap_that_fits():
    """``model.embedding_data_type=fp16``: 2 bytes per weight, optimizer state still fp32."""
    sizes = compose_cfg(["model=mlperf"]).model.table_sizes
    fp16 = embedding_storage(
        sizes, 128, SparseOptimizer.rowwise_adagrad, [EmbeddingDataType.fp16] * len(sizes)
    )
    assert round(fp16.weight_bytes / GIB, 2) == 48.68 and fp16.weight_precision == "fp16"
    assert fp16.optimizer_bytes == fp16.rows * 4
    mixed = embedding_storage([10, 10], 4, SparseOptimizer.sgd, list(EmbeddingDataType)[:2])
    assert mixed.weight_bytes == 10 * 4 * 4 + 10 * 4 * 2 and mixed.weight_precision == "fp32/fp16"
    budget = 300_000 * 16 * 4  # sgd: no state; fp32 16 floats per row
    args = ([1_000_000, 1_000_000], 16, SparseOptimizer.sgd, budget)
    assert largest_fitting_cap(*args) == 150_000
    assert largest_fitting_cap(*args, data_types=[EmbeddingDataType.fp16] * 2) == 300_000


def test_largest_fitting_cap_fits_and_is_rounded():
    sizes = [1_000_000, 10, 500_000]
    budget = 300_000 * 17 * 4  # rowwise adagrad: 16 + 1 floats per row
    cap = largest_fitting_cap(sizes, 16, SparseOptimizer.rowwise_adagrad, budget)
    assert cap == 140_000  # 2 * 149_995 + 10 rows fit; rounded down to two digits
    assert (2 * cap + 10) * 17 * 4 <= budget
    assert largest_fitting_cap(sizes, 16, SparseOptimizer.rowwise_adagrad, 10) is None


def _meta_model(cfg):
    return build_module(cfg, torch.device("meta"))


def test_mlperf_does_not_fit_24_gib_and_the_suggested_cap_does():
    cfg = compose_cfg(["model=mlperf", "sharding=rowwise", "hardware.ddr_cap=24"])
    module = _meta_model(cfg)
    assert all(p.is_meta for p in module.parameters())
    cpu_dense = build_model(cfg.model, dense_device=torch.device("cpu"))
    tables = dict(cpu_dense.model.sparse_arch.named_parameters())
    assert tables and all(p.is_meta for p in tables.values())
    crossnet = list(cpu_dense.model.inter_arch.parameters())
    assert crossnet and all(p.device.type == "cpu" for p in crossnet)
    with pytest.raises(InsufficientMemoryError) as info:
        plan_job(cfg, module, CPU_ONE_RANK)
    message = str(info.value)
    assert "needed:  97.36 GiB fp32 weights + 0.76 GiB rowwise_adagrad state = 98.12 GiB" in message
    assert "offered: 24.00 GiB DDR on 1 rank(s)" in message
    # two caps, each with the GiB it needs: at most 60 % of the 24 GiB, and at most 1 GiB
    caps = re.findall(r"model\.num_embeddings_cap=(\d+)(?: first)? \((\d+\.\d\d) GiB", message)
    assert len(caps) == 2, message
    (cap, cap_gib), (quick, quick_gib) = ((int(c), float(g)) for c, g in caps)
    assert 10 < cap_gib <= 0.6 * 24 and 0.5 < quick_gib <= 1.0 and quick < cap
    for suggested in (cap, quick):
        capped = compose_cfg(
            [
                "model=mlperf",
                "sharding=rowwise",
                "hardware.ddr_cap=24",
                f"model.num_embeddings_cap={suggested}",
            ]
        )
        plan = plan_job(capped, _meta_model(capped), CPU_ONE_RANK).plan
        assert len(plan.plan["model.sparse_arch.embedding_bag_collection"]) == 26


def test_tables_that_fit_beside_an_oversized_batch_are_told_to_lower_the_batch():
    """The tiny model at a batch of 30,000,000: "needed 0.00 GiB ... cap the tables with
    model.num_embeddings_cap=1000", its size already (CLI review)."""
    cfg = compose_cfg(["train.batch_size=30000000", "hardware.ddr_cap=24"])
    with pytest.raises(InsufficientMemoryError) as info:
        plan_job(cfg, _meta_model(cfg), CPU_ONE_RANK)
    message = str(info.value)
    assert "The tables alone fit (0.00 of 20.40 GiB)" in message
    assert "at train.batch_size=30000000 per rank" in message
    assert "num_embeddings_cap" not in message
    # a table too large for any one rank (column_wise, one shard) is no batch problem (review)
    sizes = ",".join(["1000000000", *["1000"] * 25])
    huge = compose_cfg(["hardware=a100_40gb_x8", "sharding=columnwise",
                        f"model.num_embeddings_per_feature=[{sizes}]"])  # fmt: skip
    with pytest.raises(InsufficientMemoryError) as info:
        plan_job(huge, _meta_model(huge))
    assert "The tables alone fit" not in str(info.value)


def test_replicated_tables_count_once_per_rank_and_the_cap_accounts_for_it():
    sizes = [100_000_000] + [1] * 25
    overrides = [
        "sharding=dataparallel",
        "hardware.ddr_cap=4",
        "hardware.nproc_per_node=2",
        f"model.num_embeddings_per_feature=[{','.join(map(str, sizes))}]",
    ]
    ctx = DistContext(
        rank=0, world_size=2, local_rank=0, local_world_size=2, device=torch.device("meta")
    )
    cfg = compose_cfg(overrides)
    with pytest.raises(InsufficientMemoryError) as info:
        plan_job(cfg, _meta_model(cfg), ctx)
    message = str(info.value)
    # 5.96 GiB of weights, 0.37 of row-wise state and 5.96 of gradient (the dense kernel's,
    # which DDP all-reduces; TorchRec's estimate left it out, so a 14 GiB replica needed 28)
    assert "5.96 GiB fp32 weights + 5.96 GiB data_parallel gradients + 0.37 GiB" in message
    assert (
        "12.29 GiB are data_parallel tables, held whole by each of the 2 ranks: 24.59 GiB"
        in message
    )
    cap = int(re.search(r"model\.num_embeddings_cap=(\d+)", message).group(1))
    capped = compose_cfg([*overrides, f"model.num_embeddings_cap={cap}"])
    plan_job(capped, _meta_model(capped), ctx)  # the suggestion fits
    assert "more ranks cannot help" in message  # every rank holds the 12.29 GiB table whole

    # Adam on CPU: FBGEMM cannot fuse it, so sharding=auto tables are planned data_parallel
    adam = [o.replace("sharding=dataparallel", "optimizer=adam") for o in overrides]
    cfg = compose_cfg(adam)
    with pytest.raises(InsufficientMemoryError) as info:
        plan_job(cfg, _meta_model(cfg), ctx)
    message = str(info.value)
    assert "are data_parallel tables, held whole by each of the 2 ranks" in message
    cap = int(re.search(r"model\.num_embeddings_cap=(\d+)", message).group(1))
    capped = compose_cfg([*adam, f"model.num_embeddings_cap={cap}"])
    plan_job(capped, _meta_model(capped), ctx)  # the suggestion fits here too

    # sharding=auto with the dense kernel: the planner can only place them data_parallel
    dense = [o.replace("sharding=dataparallel", "sharding.compute_kernel=dense") for o in overrides]
    cfg = compose_cfg(dense)
    with pytest.raises(InsufficientMemoryError) as info:
        plan_job(cfg, _meta_model(cfg), ctx)
    assert "12.29 GiB are data_parallel tables, held whole by each of the 2 ranks" in str(
        info.value
    )


def test_a_replica_whose_gradient_does_not_fit_is_refused():
    """2.53 GiB of weights and state fit a rank's 3.40 usable GiB; with the 2.38 GiB gradient
    of the dense kernel they do not: TorchRec's estimate passed it, and the first backward
    would have run out of memory."""
    sizes = [40_000_000] + [1] * 25
    cfg = compose_cfg(
        ["sharding=dataparallel", "hardware.ddr_cap=4",
         f"model.num_embeddings_per_feature=[{','.join(map(str, sizes))}]"]
    )  # fmt: skip
    with pytest.raises(InsufficientMemoryError, match=r"2\.38 GiB data_parallel gradients"):
        plan_job(cfg, _meta_model(cfg), CPU_ONE_RANK)


def test_plan_mode_and_training_choose_the_same_plan_with_local_world_size(tmp_path, monkeypatch):
    """``hardware.local_world_size`` plans another layout in ``mode=plan`` as training plans
    it: 2 ranks at 1 per host (``mode=plan`` of this host) and the pre-flight of a job of 2
    hosts of 1 rank get all of the host's measured memory each. The tables (1.2 GiB) fit 2
    ranks of 1 GiB but not 2 ranks of 0.5 GiB."""
    from dlrm_exp.modes.plan import run_plan
    from dlrm_exp.modes.setup import preflight
    from dlrm_exp.planning import topology
    from dlrm_exp.planning.plan_record import plan_record

    monkeypatch.setattr(topology, "machine_memory_bytes", lambda: GIB)
    rows = 1_200_000_000 // (26 * 17 * 4)  # embedding_dim 16 + 1 row-wise Adagrad float
    cfg = compose_cfg(
        [
            "sharding=rowwise",
            "hardware.nproc_per_node=2",
            "hardware.local_world_size=1",
            f"model.num_embeddings_per_feature=[{','.join([str(rows)] * 26)}]",
        ]
    )
    planned = run_plan(cfg, tmp_path)
    assert planned["hardware"]["ddr_cap_gib_per_rank"] == 1.0
    assert planned["local_world_size"] == 1
    two_hosts = cfg.hardware
    two_hosts.nproc_per_node, two_hosts.nnodes, two_hosts.local_world_size = 1, 2, None
    trained = plan_record(preflight(cfg), table_configs(cfg.model), 2, 1).to_json()
    assert trained["tables"] == planned["tables"]


def test_fp16_tables_are_planned_with_the_fused_optimizers_fp32_state():
    """TorchRec sizes optimizer state at the weights' width; FBGEMM keeps it in fp32. MLPerf x2
    with Adam and fp16 tables needs 54.4 GiB a rank of 40 GiB: refused, not planned at the
    32.6 GiB TorchRec alone estimates. The suggested cap plans at its real size."""
    from dlrm_exp.planning.fused_state import missing_state_bytes

    assert missing_state_bytes(10, 8, 2, SparseOptimizer.adam) == 10 * 16 * 2
    assert missing_state_bytes(10, 8, 2, SparseOptimizer.rowwise_adagrad) == 10 * 2
    assert missing_state_bytes(10, 8, 4, SparseOptimizer.adam) == 0
    assert missing_state_bytes(10, 8, 2, SparseOptimizer.sgd) == 0
    base = ["hardware=a100_40gb_x8", "model=mlperf_x2", "optimizer=adam",
            "model.embedding_data_type=fp16", "sharding=rowwise"]  # fmt: skip
    cfg = compose_cfg(base)
    with pytest.raises(InsufficientMemoryError, match="348.07 GiB adam state"):
        plan_job(cfg, _meta_model(cfg))
    capped = compose_cfg([*base, "model.num_embeddings_cap=31000000"])
    result = plan_job(capped, _meta_model(capped))
    largest = max(e.hbm_bytes for e in result.estimates)
    assert largest >= result.storage.total_bytes / 8  # the state counted in full
    # on CPU an fp16 replica is stepped by FBGEMM's fused optimizer, fp32 state too (review:
    # planned at 15.51 GiB a rank where weights, gradient and state take 20.68)
    dp = compose_cfg(["model=tiny", "sharding=dataparallel", "model.embedding_data_type=fp16",
                      "optimizer=adagrad"])  # fmt: skip
    result = plan_job(dp, _meta_model(dp))
    assert max(e.ddr_bytes for e in result.estimates) >= result.storage.total_bytes
    # and refused past the 85 % of DDR the messages promise: TorchRec reserves its share of
    # HBM only, so on CPU a plan of 20.68 GiB passed on a 23 GiB rank (review)
    big = compose_cfg(["model=mlperf", "model.num_embeddings_cap=3500000", "hardware.ddr_cap=23",
                       "sharding=dataparallel", "model.embedding_data_type=fp16",
                       "optimizer=adagrad"])  # fmt: skip
    with pytest.raises(InsufficientMemoryError, match=r"20.68 GiB\n.*85% of it \(19.55 GiB\)"):
        plan_job(big, _meta_model(big))


def test_a_whole_table_cap_leaves_room_for_the_replicas_every_rank_holds():
    """A table_wise table of 16 bytes a row beside a data_parallel one of 32 (with its
    gradient) on a 40,000-byte rank: 48 bytes a capped row, so 833 rows, not 2,500 (the
    replicas were left out)."""
    from dlrm_exp.config import SparseOptimizer

    cap = largest_fitting_cap([10_000, 10_000], 4, SparseOptimizer.sgd, 10**9, copies=[2, 1],
                              replicated=[True, False], whole=([False, True], 40_000))  # fmt: skip
    assert cap == 830


def test_a_column_wise_table_keeps_each_column_shard_within_one_rank():
    """A table in k column shards lies on ranks as k pieces of 1/k of it, each whole on one
    rank: 16 bytes a row in 2 shards on a 40,000-byte rank caps at 5,000 rows, one shard at
    2,500, split over the ranks at its 10,000; TorchRec cuts column shards of 128 columns."""
    from dlrm_exp.config import ShardingStrategy as S
    from dlrm_exp.config import SparseOptimizer
    from dlrm_exp.planning.tables import whole_pieces

    caps = [largest_fitting_cap([10_000], 4, SparseOptimizer.sgd, 10**9, whole=([k], 40_000))
            for k in (2, 1, 0)]  # fmt: skip
    assert caps == [5_000, 2_500, 10_000]
    assert [whole_pieces(S.column_wise, d) for d in (64, 128, 256, 512)] == [1, 1, 2, 4]
    assert whole_pieces(S.table_column_wise, 256) == 2 and whole_pieces(S.table_wise, 256) == 1
    assert whole_pieces(S.row_wise, 128) == whole_pieces(S.grid_shard, 256) == 0
    # a 0.95 GiB table in 2 column shards on 4 ranks of 1 GiB: the tables alone fit (it was
    # told to cap at its own 1,000,000 rows, and 2 ranks: review)
    sizes, opt = [1_000_000], SparseOptimizer.sgd
    message = insufficient_memory_message(
        embedding_storage(sizes, 256, opt), opt, sizes, 256, MemoryCapacity(GIB, GIB, "test"),
        4, whole_tables=[whole_pieces(S.column_wise, 256)], batch_size=512,
    )  # fmt: skip
    assert "The tables alone fit (0.95 of 3.40 GiB)" in message


def test_a_whole_table_that_fits_no_rank_is_a_memory_refusal():
    """The total fits (98 of 136 GiB) but a 19.2 GiB table_wise table fits no 17 GiB rank:
    TorchRec's "Couldn't find a rank for shard" came through as a PlanError with no figures
    or advice (review)."""
    cfg = compose_cfg(["hardware=a100_40gb_x8", "hardware.hbm_cap=20", "model=mlperf",
                       "sharding=tablewise"])  # fmt: skip
    with pytest.raises(InsufficientMemoryError, match="more ranks cannot help"):
        plan_job(cfg, _meta_model(cfg))


def test_table_wise_advice_packs_the_whole_tables_onto_the_ranks():
    """5 tables of about 19 GiB on 4 ranks of 28 GiB: the cap kept each within 60 % of a rank
    (27,000,000: 13 GiB each) but one rank holds two of them, and TorchRec could not place it
    (review). The cap now packs them, and plans."""
    from dlrm_exp.planning.storage import packs

    assert packs([3, 3], 0, 2, 3) and not packs([3, 3, 3], 0, 2, 5) and not packs([], 4, 1, 3)
    base = ["hardware=a100_40gb_x8", "hardware.nproc_per_node=4", "hardware.hbm_cap=28",
            "model=mlperf", "sharding=tablewise"]  # fmt: skip
    cfg = compose_cfg(base)
    with pytest.raises(InsufficientMemoryError) as info:
        plan_job(cfg, _meta_model(cfg))
    cap = re.search(r"num_embeddings_cap=(\d+) \(", str(info.value)).group(1)
    assert "at least 5 ranks" in str(info.value)
    capped = compose_cfg([*base, f"model.num_embeddings_cap={cap}"])
    plan_job(capped, _meta_model(capped))


@pytest.mark.parametrize("sharding", ["tablewise", "columnwise"])
def test_whole_table_advice_keeps_each_table_within_one_rank(sharding):
    """The cap and rank count spread the tables over all ranks as if each could be split:
    table_wise criteo_full on 8 x 40 GiB was told cap 88,000,000 (a 42 GiB table on a 34 GiB
    rank) or 13 ranks (its 141 GiB table fits none); both failed in TorchRec's planner. So
    was column_wise at embedding_dim 128, one column shard per table (review), and then told
    the same cap again."""
    base = ["hardware=a100_40gb_x8", "model=criteo_full", f"sharding={sharding}"]
    cfg = compose_cfg(base)
    with pytest.raises(InsufficientMemoryError) as info:
        plan_job(cfg, _meta_model(cfg))
    message = str(info.value)
    assert "share of its host's ranks, 140.70 GiB, exceeds a rank's 34.00 GiB" in message
    cap = int(re.search(r"model\.num_embeddings_cap=(\d+)", message).group(1))
    capped = compose_cfg([*base, f"model.num_embeddings_cap={cap}"])
    plan_job(capped, _meta_model(capped))  # the suggestion fits


@pytest.mark.parametrize("sharding", ["tablerowwise", "grid"])
def test_a_host_bound_table_is_advised_on_its_hosts_ranks(sharding):
    """TorchRec places a table_row_wise or grid table on one host and splits it over that
    host's ranks only; the advice spread it over every rank: mlperf_x2 on 4 hosts of 2 ranks
    was told cap 22,000,000 (two 10.6 GiB tables on one host of 2 x 10 GiB) and "at least 18
    ranks", and TorchRec's "can't find a host" came through as a PlanError (review). Now a
    memory refusal, whose cap plans."""
    base = ["mode=plan", "model=mlperf_x2", f"sharding={sharding}", "hardware.nproc_per_node=2",
            "hardware.nnodes=4", "hardware.ddr_cap=12"]  # fmt: skip
    cfg = compose_cfg(base)
    with pytest.raises(InsufficientMemoryError) as info:
        plan_job(cfg, _meta_model(cfg))
    message = str(info.value)
    assert "more ranks cannot help (more ranks per host can, for table_row_wise / grid)" in message
    # the old advice's cap: two 10.6 GiB tables on one host of 2 x 10.2 GiB; TorchRec's
    # "can't find a host" is a memory refusal, not a PlanError without figures
    old_cap = compose_cfg([*base, "model.num_embeddings_cap=22000000"])
    with pytest.raises(InsufficientMemoryError):
        plan_job(old_cap, _meta_model(old_cap))
    cap = int(re.search(r"model\.num_embeddings_cap=(\d+)", message).group(1))
    capped = compose_cfg([*base, f"model.num_embeddings_cap={cap}"])
    plan_job(capped, _meta_model(capped))  # the suggestion fits


def test_tables_that_fit_in_all_but_do_not_pack_get_caps_not_batch_advice():
    """mlperf table_wise on 5 ranks of 23.5 GiB: 98 of 100 GiB fit in all, but five 19.2 GiB
    tables leave no rank room for the 1.5 GiB one; "The tables alone fit ... lower
    train.batch_size" was the advice even at batch 1 (review). Now a cap and 6 ranks."""
    base = ["mode=plan", "model=mlperf", "sharding=tablewise", "hardware.nnodes=5",
            "hardware.ddr_cap=23.54"]  # fmt: skip
    cfg = compose_cfg(base)
    with pytest.raises(InsufficientMemoryError) as info:
        plan_job(cfg, _meta_model(cfg))
    message = str(info.value)
    assert "The tables alone fit" not in message and "at least 6 ranks" in message
    cap = int(re.search(r"model\.num_embeddings_cap=(\d+)", message).group(1))
    capped = compose_cfg([*base, f"model.num_embeddings_cap={cap}"])
    plan_job(capped, _meta_model(capped))


@pytest.mark.parametrize(
    "order", [["row_wise", "table_row_wise"], ["table_row_wise", "row_wise"]], ids=["rw", "twrw"]
)
def test_a_tie_goes_to_the_sharding_type_listed_first(order):
    """On one host ``row_wise`` and ``table_row_wise`` cost the same. TorchRec intersects the
    listed types as sets, so the winner followed the hash seed (``sharding=auto`` planned
    either, run to run); the planner now keeps the constraint's order in every process."""
    from torchrec.distributed.planner import ParameterConstraints

    from dlrm_exp.distributed.sharder import job_sharders
    from dlrm_exp.planning.plan_record import plan_sharding_types
    from dlrm_exp.planning.planner import build_planner
    from dlrm_exp.planning.topology import build_topology

    cfg = compose_cfg(["sharding=auto", "hardware.ddr_cap=1"])
    capacity = memory_capacity(cfg.hardware, 2)
    topology = build_topology(cfg.hardware, 2, 2, capacity)
    constraints = {
        table.name: ParameterConstraints(sharding_types=order, compute_kernels=["fused"])
        for table in table_configs(cfg.model)
    }
    planner = build_planner(topology, constraints, 128, optimizer=SparseOptimizer.rowwise_adagrad)
    sharders = job_sharders(cfg.qcomms, stochastic_rounding=True)
    assert plan_sharding_types(planner.plan(_meta_model(cfg), sharders)) == {order[0]}


@pytest.mark.parametrize(
    ("preset", "gbps"), [("a100_40gb_x8", 32), ("h100_80gb_x8", 64), ("h200_141gb_x8", 64)]
)
def test_the_gpu_presets_give_the_planner_their_host_link(preset, gbps):
    """The planner costs fused_uvm_caching's cache misses at the GPU-to-host bandwidth; it
    was TorchRec's fixed PCIe Gen4 figure (32 GB/s) for the Gen5 hosts too (GPU review)."""
    from dlrm_exp.planning.topology import build_topology, gbps_to_bytes_per_ms

    cfg = compose_cfg([f"hardware={preset}", "mode=plan"])
    capacity = memory_capacity(cfg.hardware, cfg.hardware.world_size)
    topology = build_topology(cfg.hardware, 8, 8, capacity)
    assert topology.hbm_to_ddr_mem_bw == gbps_to_bytes_per_ms(gbps)
    assert topology.hbm_mem_bw == gbps_to_bytes_per_ms(cfg.hardware.hbm_mem_bw)


@pytest.mark.parametrize(
    ("overrides", "way_out"),
    [
        (["optimizer=adam"], r"optimizer=rowwise_adagrad, adagrad or sgd"),
        (["sharding=dataparallel", "hardware=a100_40gb_x8", "mode=plan"], r"shard them"),
    ],
)
def test_fp16_replicas_that_torch_optim_would_update_are_refused(overrides, way_out):
    """fp16 data_parallel tables stepped by torch.optim (Adam on CPU; every optimizer on a GPU)
    keep fp16 optimizer state: Adam on CPU gave a NaN loss at step 2."""
    cfg = compose_cfg(["model.embedding_data_type=fp16", *overrides])
    with pytest.raises(ConfigError, match=r"data_parallel tables \(t_cat_0, .*" + way_out):
        plan_job(cfg, _meta_model(cfg))
    # FBGEMM's fused kernel steps them on CPU, in fp32 state; fp32 replicas are fine anywhere
    for accepted in (["model.embedding_data_type=fp16", "sharding=dataparallel"], overrides):
        cfg = compose_cfg(accepted)
        plan_job(cfg, _meta_model(cfg))


def test_uvm_tables_are_explained_against_the_host_memory_they_live_in():
    """The insufficient-memory message offered HBM (320 GiB on 8 A100s) when host memory had
    run out, and its advice fit the HBM: a cap of the largest table, 3 ranks of 40 GiB."""
    uvm = ["sharding.compute_kernel=fused_uvm_caching", "hardware.ddr_cap=5"]
    cfg = compose_cfg(["hardware=a100_40gb_x8", "model=mlperf", "sharding=rowwise", *uvm])
    with pytest.raises(InsufficientMemoryError) as info:
        plan_job(cfg, _meta_model(cfg))
    message = str(info.value)
    assert "offered: 40.00 GiB DDR on 8 rank(s) (5.00 GiB each, hardware.ddr_cap);" in message
    assert "the tables 85% of it (34.00 GiB)" in message
    assert "ranks of 5.00 GiB" in message and "HBM" not in message
    # the caches overflow the HBM while the host memory holds the rows: said so, with a
    # cache_load_factor that plans (it said "424.23 GiB needed / 1152 GiB DDR offered")
    caches = ["hardware=a100_40gb_x8", "model=criteo_full", "sharding=rowwise", uvm[0]]
    cfg = compose_cfg([*caches, "sharding.cache_load_factor=1.0"])
    with pytest.raises(InsufficientMemoryError) as info:
        plan_job(cfg, _meta_model(cfg))
    message = str(info.value)
    assert "needed:  424.23 GiB HBM: a cache of sharding.cache_load_factor=1 of" in message
    factor = re.search(r"lower sharding\.cache_load_factor to ([\d.]+) ", message).group(1)
    fitted = compose_cfg([*caches, f"sharding.cache_load_factor={factor}"])
    plan_job(fitted, _meta_model(fitted))
    # table_wise: a table's cache lies on its one rank, so the factor keeps the largest's
    # within a rank (0.45 over all ranks put 63 GiB on a 34 GiB rank)
    # (with room in host memory for the largest table's rows whole: 140.70 GiB, within 85 % of
    # 180 GiB; in the preset's 144 GiB it is refused for the host memory)
    # column_wise at embedding_dim 128 alike: one column shard (review: told to lower the batch)
    host = "hardware.ddr_cap=180"
    for sharding in ("sharding=tablewise", "sharding=columnwise"):
        whole = compose_cfg([*caches[:2], sharding, uvm[0], host, "sharding.cache_load_factor=1"])
        with pytest.raises(InsufficientMemoryError) as info:
            plan_job(whole, _meta_model(whole))
        assert "to 0.17 (" in str(info.value)
        assert "shard the table_wise and column_wise tables row_wise" in str(info.value)
    fitted = compose_cfg(
        [*caches[:2], "sharding=tablewise", uvm[0], host, "sharding.cache_load_factor=0.17"]
    )
    plan_job(fitted, _meta_model(fitted))
    # in the preset's 144 GiB the largest table's rows fit no rank's host memory: the factor
    # was advised anyway (0.17, which then ran out of host memory: review); the DDR first
    table_wise = [*caches[:2], "sharding=tablewise", uvm[0]]
    preset = compose_cfg([*table_wise, "sharding.cache_load_factor=1"])
    with pytest.raises(InsufficientMemoryError) as info:
        plan_job(preset, _meta_model(preset))
    message = str(info.value)
    assert "cache_load_factor to" not in message and "GiB DDR on 8 rank(s)" in message
    # a factor below 0.01 is still a factor (it said the device tables fill the HBM)
    from dlrm_exp.planning.topology import MemoryCapacity
    from dlrm_exp.planning.uvm_cache import DevicePart, cache_message

    capacity = MemoryCapacity(2000 * GIB, 4 * GIB, "test")
    tiny = cache_message(DevicePart(0, 424 * GIB, 0.2), capacity, 1)
    assert "lower sharding.cache_load_factor to 0.0056 (" in tiny
    # host memory short too: the DDR message (a factor alone cannot help)
    both = compose_cfg([*caches[:3], uvm[0], "hardware.ddr_cap=10", "hardware.hbm_cap=2"])
    with pytest.raises(InsufficientMemoryError, match=r"GiB DDR on 8 rank\(s\)"):
        plan_job(both, _meta_model(both))


def test_tables_over_the_hbm_are_told_the_ways_that_keep_every_row():
    """Only caps (rows cut) and more ranks were offered on a GPU (GPU review); the ranks are
    now also said as nodes of the job's ranks per node."""
    cfg = compose_cfg(["hardware=a100_40gb_x8", "model=criteo_full"])
    with pytest.raises(InsufficientMemoryError) as info:
        plan_job(cfg, _meta_model(cfg))
    message = str(info.value)
    # and, the batch being per rank, the one that keeps the global batch on them (the
    # preset's own overflowed the ranks suggested: planning review)
    per = cfg.train.batch_size * 8 // 13
    assert (
        f"at least 13 ranks of 40.00 GiB (hardware.nnodes=2 of 8 rank(s); train.batch_size="
        f"{per} per rank gives a global batch of {per * 13}, near this job's "
        f"{cfg.train.batch_size * 8})"
    ) in message
    even = compose_cfg(["hardware=a100_40gb_x8", "model=criteo_full", "train.batch_size=13"])
    with pytest.raises(InsufficientMemoryError) as info:
        plan_job(even, _meta_model(even))
    assert "; train.batch_size=8 per rank keeps this job's global batch of 104)" in str(info.value)
    assert message.splitlines()[-1] == (
        "Or, keeping every row: keep the rows in host memory, cached in HBM: "
        "sharding.compute_kernel=fused_uvm_caching (424.23 GiB of the 979.20 GiB of DDR the "
        "ranks give tables); or train fp16 tables: model.embedding_data_type=fp16 (213.76 GiB "
        "of 272.00)."
    )
    fp16 = compose_cfg(
        ["hardware=a100_40gb_x8", "model=criteo_full", "model.embedding_data_type=fp16"]
    )
    plan_job(fp16, _meta_model(fp16))  # the advice plans
    # a table's dtype set on its own: the default would not change it, so no fp16 way
    pinned = compose_cfg(["hardware=a100_40gb_x8", "model=criteo_full",
                          "+model.embedding_data_type_per_table.t_cat_0=fp32"])  # fmt: skip
    with pytest.raises(InsufficientMemoryError) as info:
        plan_job(pinned, _meta_model(pinned))
    assert "fused_uvm_caching (" in str(info.value) and "fp16" not in str(info.value)
    # neither fits: no such line
    small = compose_cfg(["hardware=a100_40gb_x8", "model=criteo_full", "hardware.ddr_cap=10",
                         "hardware.hbm_cap=10"])  # fmt: skip
    with pytest.raises(InsufficientMemoryError) as info:
        plan_job(small, _meta_model(small))
    assert "keeping every row" not in str(info.value)
    # table_wise: a table larger than a rank's HBM (fp16) or DDR (uvm) is no way, though the
    # totals fit (both were offered and each refused when taken: review)
    whole = ["hardware=a100_40gb_x8", "model=criteo_full", "sharding=tablewise"]
    with pytest.raises(InsufficientMemoryError) as info:
        plan_job(compose_cfg(whole), _meta_model(compose_cfg(whole)))
    assert "keeping every row" not in str(info.value)
    halved = compose_cfg([*whole, "model.embedding_data_type=fp16"])
    with pytest.raises(InsufficientMemoryError) as info:
        plan_job(halved, _meta_model(halved))
    assert str(info.value).splitlines()[-1].startswith("Or, keeping every row: keep the rows in")
    uvm = compose_cfg([*whole, "model.embedding_data_type=fp16",
                       "sharding.compute_kernel=fused_uvm_caching"])  # fmt: skip
    plan_job(uvm, _meta_model(uvm))  # the advice plans


def test_tables_split_between_uvm_and_device_kernels_are_explained_by_their_own_memory():
    """Some tables on a UVM kernel, the rest in HBM: every table was counted against host
    memory ("needed 98.12 GiB" of DDR for 4 cached tables of 76.89 GiB; review)."""
    gpu = ["hardware.compute_device=cuda", "hardware.backend=nccl", "hardware.hbm_cap=80"]
    cached = [f"+sharding.per_table_compute_kernel.t_cat_{i}=fused_uvm_caching"
              for i in (0, 9, 19, 20)]  # fmt: skip
    base = ["model=mlperf", "sharding=rowwise", *gpu, *cached]
    cfg = compose_cfg([*base, "hardware.ddr_cap=64"])
    with pytest.raises(InsufficientMemoryError) as info:
        plan_job(cfg, _meta_model(cfg))
    message = str(info.value)
    assert "the 4 table(s) on UVM kernels, whose rows live in host memory: t_cat_0, " in message
    assert "= 76.89 GiB" in message and "offered: 64.00 GiB DDR on 1 rank(s)" in message
    # the caps' GiB are those tables' (the quick cap's "1.00 GiB" was 2.00 in all: review)
    assert re.search(r"first \(\d\.\d\d GiB in those tables, quick to train\)", message)
    # the HBM short instead: the caches' message names the device tables
    cfg = compose_cfg([*base[:-1], "hardware.hbm_cap=16", "hardware.ddr_cap=512"])
    with pytest.raises(InsufficientMemoryError, match="the tables kept on the device alone"):
        plan_job(cfg, _meta_model(cfg))


def test_a_plan_files_uvm_caches_are_sized_as_the_planner_sizes_them():
    """A from_file plan's check counted a cache as the factor of the weights alone; TorchRec
    (and the memory message) cache the optimizer state too: with Adam 3x as much."""
    from dlrm_exp.planning.job import _plan_bytes_per_rank

    cfg = compose_cfg(["hardware=a100_40gb_x8", "model=mlperf", "optimizer=adam",
                       "sharding=rowwise", "sharding.compute_kernel=fused_uvm_caching",
                       "sharding.cache_load_factor=0.2", "hardware.ddr_cap=500"])  # fmt: skip
    result = plan_job(cfg, _meta_model(cfg))
    ours = max(_plan_bytes_per_rank(cfg, result.plan, result.context, True)["HBM"])
    planner = max(e.hbm_bytes for e in result.estimates)  # with its kernel buffers
    assert 0.9 < ours / planner <= 1.0


def test_a_running_job_plans_for_its_own_ranks_per_host():
    """hardware.local_world_size is for mode=plan of another layout: a running job with 8
    ranks a host planned for 1 cut its table-row-wise tables for 1 while TorchRec, at run
    time, cuts them by the launcher's LOCAL_WORLD_SIZE (multi-node review)."""
    import torch

    from dlrm_exp.distributed.launch import DistContext
    from dlrm_exp.planning.job import planning_context

    hardware = compose_cfg(["hardware.nproc_per_node=2", "hardware.local_world_size=1"]).hardware
    running = DistContext(rank=0, world_size=2, local_rank=0, local_world_size=2,
                          device=torch.device("cpu"))  # fmt: skip
    with pytest.raises(ConfigError, match=r"local_world_size=1 plans for that many ranks per "
                       r"host, but this job runs 2 per host"):  # fmt: skip
        planning_context(hardware, running)
    assert planning_context(hardware).local_world_size == 1  # mode=plan: as asked
    same = compose_cfg(["hardware.nproc_per_node=2", "hardware.local_world_size=2"]).hardware
    assert planning_context(same, running).local_world_size == 2
    # the workers the parent starts take its plan: it is refused there too, before planning
    from dlrm_exp.modes.setup import preflight

    launched = compose_cfg(["hardware.nproc_per_node=2", "hardware.local_world_size=1"])
    with pytest.raises(ConfigError, match="but this job runs 2 per host"):
        preflight(launched)
    # mode=verify's one-process reference of a job that names its own ranks per host
    from dlrm_exp.modes.verify import reference_config

    job = compose_cfg(["hardware.nproc_per_node=2", "hardware.local_world_size=2"])
    assert reference_config(job).hardware.local_world_size is None


def test_a_containers_memory_limit_caps_the_measured_memory(tmp_path, monkeypatch):
    """psutil reads the node's RAM: a pod planned against it was killed by the kernel
    instead of being told to cap its tables (multi-node review)."""
    from types import SimpleNamespace

    from dlrm_exp.planning import topology
    from dlrm_exp.util import cgroup

    root, proc = tmp_path / "cgroup", tmp_path / "proc_self_cgroup"
    (root / "memory").mkdir(parents=True)
    v2, v1 = root / "memory.max", root / "memory" / "memory.limit_in_bytes"
    monkeypatch.setattr(cgroup, "CGROUP_ROOT", root)
    monkeypatch.setattr(cgroup, "PROC_CGROUP", proc)
    monkeypatch.setattr(cgroup.psutil, "virtual_memory", lambda: SimpleNamespace(total=64 * GIB))
    assert topology.machine_memory_bytes() == 64 * GIB  # no cgroup files
    v1.write_text(str(2**63 - 4096))  # v1 without a limit
    assert topology.machine_memory_bytes() == 64 * GIB
    v2.write_text("max\n")  # v2 without a limit
    assert topology.machine_memory_bytes() == 64 * GIB
    v2.write_text(f"{16 * GIB}\n")  # inside a container (a cgroup namespace): at the root
    assert topology.machine_memory_bytes() == 16 * GIB
    # a Slurm job's limit is in its own cgroup, which /proc/self/cgroup names (review: read at
    # the root only, a job bound to 8 GiB planned against the node's RAM)
    v2.write_text("max\n")
    job = root / "system.slice" / "slurmstepd.scope" / "job_7"
    (job / "step_0").mkdir(parents=True)
    (job / "memory.max").write_text(f"{8 * GIB}\n")
    (job / "step_0" / "memory.max").write_text("max\n")
    proc.write_text("0::/system.slice/slurmstepd.scope/job_7/step_0\n")
    assert topology.machine_memory_bytes() == 8 * GIB
    v1_job = root / "memory" / "slurm" / "uid_0" / "job_9"
    v1_job.mkdir(parents=True)
    (v1_job / "memory.limit_in_bytes").write_text(str(4 * GIB))
    proc.write_text("4:memory:/slurm/uid_0/job_9\n0::/\n")
    assert topology.machine_memory_bytes() == 4 * GIB
