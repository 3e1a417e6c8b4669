"""The CUDA path, for ``make gpu-check`` on a machine with a GPU (skipped elsewhere).

Every sharding type trains 2 steps with the ``fused_uvm_caching`` kernel over NCCL, the
CUDA-only pipelines train, ``train.profile`` writes the CUDA memory snapshot, and bf16 trains
on the GPU. Needs a CUDA build of torch and ``fbgemm-gpu`` (``make install
FBGEMM=fbgemm-gpu==1.8.0`` with a CUDA torch). None of this was run on a GPU by the project yet.
"""

import json

import pytest
import torch

from conftest import SMALL, run_cli

pytestmark = [
    pytest.mark.cuda,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device"),
]
SHARDING = ["tablewise", "rowwise", "columnwise", "tablerowwise", "tablecolumnwise", "grid"]


def _gpu(nproc: int | None = None) -> list[str]:
    count = nproc or min(2, torch.cuda.device_count())
    return [
        "hardware.compute_device=cuda",
        "hardware.backend=nccl",
        f"hardware.nproc_per_node={count}",
    ]


def _train(tmp_path, args: list[str]) -> dict:
    result = run_cli([*SMALL, *args, f"hydra.run.dir={tmp_path}"], timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    return json.loads((tmp_path / "metrics.json").read_text())


@pytest.mark.parametrize("sharding", SHARDING)
def test_every_sharding_type_trains_two_steps_with_uvm_caching(tmp_path, sharding):
    metrics = _train(
        tmp_path,
        [*_gpu(), f"sharding={sharding}", "sharding.compute_kernel=fused_uvm_caching",
         "train.max_steps=2"],
    )  # fmt: skip
    assert metrics["steps"] == 2 and metrics["peak_memory_gib_per_rank"][0]["cuda_allocated"] > 0


@pytest.mark.parametrize("pipeline", ["semi_sync", "fused_sparse_dist", "prefetch_sparse_dist"])
def test_the_cuda_pipelines_train(tmp_path, pipeline):
    kernel = ["sharding.compute_kernel=fused_uvm_caching"] if "prefetch" in pipeline else []
    metrics = _train(
        tmp_path,
        [*_gpu(), "sharding=rowwise", *kernel, f"train.pipeline={pipeline}",
         "train.semi_sync_start_step=4", "train.max_steps=16"],
    )  # fmt: skip
    assert metrics["steps"] == 16 and metrics["val"]["auroc"] > 0.5


def test_profile_writes_the_cuda_memory_snapshot_and_bf16_trains(tmp_path):
    metrics = _train(
        tmp_path,
        [*_gpu(1), "train.profile=true", "train.max_steps=14", "train.dense_precision=bf16"],
    )
    assert "profile/cuda_memory_rank0.pickle" in metrics["profile"]
    assert (tmp_path / "profile" / "rank0.pt.trace.json").is_file()
    assert metrics["utilization"]["peak_dtype"] == "bfloat16"
