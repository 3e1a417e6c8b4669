"""The CUDA path, for ``make gpu-check`` on a machine with a GPU (skipped elsewhere).

Every sharding type trains 2 steps with the ``fused_uvm_caching`` kernel over NCCL, the
CUDA-only pipelines train, ``train.profile`` writes the CUDA memory snapshot, bf16 trains,
fp16 tables train with stochastic rounding, resume and export (on the GPU), fused Adam resumes
its bias correction, ``mode=verify`` gathers its tables over NCCL, and the loop prefetches
pinned batches, reads each loss a step late (a NaN still names its own step) and reports its
GPU memory; ``experiment=fast`` with fp16 tables trains; the training bench compares its two
loops on the GPU. Needs a CUDA build of torch and ``fbgemm-gpu`` (``make install
FBGEMM=fbgemm-gpu==1.8.0`` with a CUDA torch). All passed at 5571416 and 1249675 on one NVIDIA
H200 (2026-11-28, 173 s and 183 s on 4 workers; torch 2.11.0+cu130, fbgemm-gpu 1.6.0,
torchrec 1.6.1), and at fc12b7e before them (docs/results.md, "On a GPU").
With one GPU every run had one rank (NCCL refuses two ranks on one GPU), so the all-to-alls
between GPUs have not run.
"""

import json
import subprocess
import sys

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
    start = ["train.semi_sync_start_step=4"] if pipeline == "semi_sync" else []  # else refused
    metrics = _train(
        tmp_path,
        [*_gpu(), "sharding=rowwise", *kernel, f"train.pipeline={pipeline}", *start,
         "train.max_steps=16"],
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


def test_fp16_tables_train_with_stochastic_rounding_resume_and_export(tmp_path):
    """fp16 tables on the GPU: stochastic rounding runs (no substitution recorded, unlike on
    CPU), a resumed run ends close to the uninterrupted one (the CUDA generator the rounding
    draws from is restored; cuBLAS and NCCL may still sum in other orders), and the export
    keeps fp16 tables."""
    fp16 = [*_gpu(), "sharding=rowwise", "model.embedding_data_type=fp16",
            "train.max_steps=16", "train.checkpoint_every_n_steps=8"]  # fmt: skip
    full = _train(tmp_path / "a", fp16)
    assert set(full["table_data_types"].values()) == {"fp16"} and full["substitutions"] == []
    (tmp_path / "b" / "checkpoints").mkdir(parents=True)
    (tmp_path / "a" / "checkpoints" / "step_8").rename(tmp_path / "b" / "checkpoints" / "step_8")
    resumed = _train(tmp_path / "b", [*fp16, "train.resume=auto"])
    assert resumed["val"]["auroc"] == pytest.approx(full["val"]["auroc"], abs=0.01)
    out = tmp_path / "export"
    result = run_cli(
        ["mode=export", f"checkpoint={tmp_path / 'a'}", "model.embedding_data_type=fp16",
         f"hydra.run.dir={out}"]
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    record = json.loads((out / "export.json").read_text())
    assert record["table_bytes"] * 2 == record["table_bytes_fp32"]


def test_the_fast_setting_with_fp16_tables_trains(tmp_path):
    """``experiment=fast`` (bf16 dense, the symmetric interaction) with fp16 tables: what the
    docs suggest on a GPU runs as asked, with nothing substituted."""
    metrics = _train(
        tmp_path,
        [*_gpu(1), "experiment=fast", "model.embedding_data_type=fp16", "train.max_steps=16"],
    )
    assert metrics["dense_precision"] == "bf16" and metrics["substitutions"] == []
    assert set(metrics["table_data_types"].values()) == {"fp16"} and metrics["val"]["auroc"] > 0.5


def test_fused_adam_resumes_its_bias_correction(tmp_path):
    """Fused Adam (FBGEMM's, on the GPU) corrects its bias by the kernel's forward counter,
    which no state dict holds: a resumed run's kernels count on from the checkpoint's."""
    adam = [*_gpu(), "sharding=rowwise", "optimizer=adam", "train.max_steps=16",
            "train.checkpoint_every_n_steps=8"]  # fmt: skip
    _train(tmp_path / "a", adam)
    (tmp_path / "b" / "checkpoints").mkdir(parents=True)
    (tmp_path / "a" / "checkpoints" / "step_8").rename(tmp_path / "b" / "checkpoints" / "step_8")
    _train(tmp_path / "b", [*adam, "train.resume=auto"])
    counts = [
        json.loads((tmp_path / run / "checkpoints" / "step_16" / "trainer_state.json").read_text())
        for run in ("a", "b")
    ]
    assert counts[0]["fused_kernel_iterations"] >= 16
    assert counts[1]["fused_kernel_iterations"] == counts[0]["fused_kernel_iterations"]


def test_verify_gathers_the_sharded_tables_over_nccl(tmp_path):
    """mode=verify on the GPU: NCCL gathers CUDA tensors only, so the gathered tables are
    staged on the GPU (a CPU output failed every verify there)."""
    result = run_cli(
        [*SMALL, *_gpu(), "sharding=rowwise", "qcomms=none", "mode=verify", "verify.steps=4",
         f"hydra.run.dir={tmp_path}"],
        timeout=600,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    assert json.loads((tmp_path / "verify.json").read_text())["passed"] is True  # judged: fp32


def test_the_gpu_loop_prefetches_reads_losses_late_and_reports_gpu_memory(tmp_path):
    """What the loop does differently on CUDA (docs/performance.md, GPU readiness): batches
    built one thread ahead and pinned (train.prefetch_batches null: 2), each loss read once
    the next step is queued, the run's peak GPU memory in the summary; the same job with
    batches built inline ends at the same quality (not bitwise: FBGEMM's backward uses
    atomics on the GPU)."""
    args = [*SMALL, *_gpu(1), "sharding=rowwise", "train.max_steps=16",
            "train.val_every_n_steps=8", "train.log_every_n_steps=1"]  # fmt: skip
    result = run_cli([*args, f"hydra.run.dir={tmp_path / 'ahead'}"], timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "peak GPU memory" in result.stdout
    ahead = json.loads((tmp_path / "ahead" / "metrics.json").read_text())
    assert ahead["peak_memory_gib_per_rank"][0]["cuda_reserved"] > 0
    assert (
        ahead["utilization"].get("peak_matmul_flops_per_sec")
        or ahead["utilization"]["measurement_errors"]
    )
    inline = _train(tmp_path / "inline", [*args[len(SMALL) :], "train.prefetch_batches=0"])
    assert (
        [h["step"] for h in ahead["val_history"]]
        == [8, 16]
        == [h["step"] for h in inline["val_history"]]
    )
    assert ahead["val"]["auroc"] == pytest.approx(inline["val"]["auroc"], abs=0.01)


def test_a_nan_on_the_gpu_stops_at_its_own_step_with_no_later_checkpoint(tmp_path):
    """The loss is read one step late on CUDA: the step it names is still its own, and the
    checkpoint of that step or any later one is never written."""
    result = run_cli(
        [*SMALL, *_gpu(1), "optimizer=sgd", "optimizer.dense_learning_rate=1e30",
         "train.checkpoint_every_n_steps=1", f"hydra.run.dir={tmp_path}"],
        timeout=600,
    )  # fmt: skip
    assert result.returncode == 1 and "Traceback" not in result.stderr
    last = result.stderr.strip().splitlines()[-1]
    assert last.startswith("Error: training loss is ") and " at step " in last
    step = int(last.split(" at step ")[1].split(":")[0])
    saved = [p.name for p in (tmp_path / "checkpoints").glob("step_*")]  # .partial too
    assert all(int(name.split("_")[1].split(".")[0]) < step for name in saved)


def test_the_training_bench_compares_its_loops_on_the_gpu():
    """``dlrm_exp.bench.training`` on CUDA: both loops run on the run's device (the header names
    it; that the plain loop's model sits there is not checked here), the ratio printed (its
    target is not asserted: timings vary)."""
    done = subprocess.run(
        [sys.executable, "-m", "dlrm_exp.bench.training", "--rounds", "1", "--steps", "30",
         "--warmup", "5", "model=quickstart", "optimizer=sgd", *_gpu(1)],
        capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert done.returncode in (0, 1), done.stderr[-3000:]  # 1: the target missed
    assert "threads, on cuda:0" in done.stdout and "ratio framework / plain:" in done.stdout
