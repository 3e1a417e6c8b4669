"""The run's HParams say what ran (:func:`dlrm_exp.record.tracking.run_hparams`)."""

from conftest import compose_cfg
from dlrm_exp.record.run_record import RunMetrics
from dlrm_exp.record.tracking import run_hparams


def test_hparams_name_the_kernels_and_dtypes_that_ran_not_those_asked():
    """``optimizer=adam`` runs its data_parallel tables on the dense kernel while
    ``sharding.compute_kernel`` says fused; runs that differed in the dense precision, the
    preset, the pipeline or the threads had the same HParams (what-ran review)."""
    cfg = compose_cfg(["optimizer=adam", "train.dense_precision=bf16"])
    choices = {"model": "tiny", "experiment": "fast"}
    ran = RunMetrics(
        world_size=2,
        effective_qcomms={},
        table_compute_kernels={"t0": "dense", "t1": "dense"},
        table_data_types={"t0": "fp16", "t1": "fp32"},
        table_sharding_types={"t0": "data_parallel", "t1": "data_parallel"},
        sparse_backward="serial",
    )
    hparams = run_hparams(cfg, choices, 2, 3, ran)
    assert cfg.sharding.compute_kernel.value == "fused" and hparams["compute_kernel"] == "dense"
    assert hparams["embedding_data_type"] == "fp16 x 1, fp32 x 1"
    assert hparams["qcomms_ran"] == "none"  # every table data_parallel: no embedding collective
    assert hparams["dense_precision"] == "bf16" and hparams["experiment"] == "fast"
    assert hparams["pipeline"] == "sparse_dist" and hparams["threads_per_rank"] == 3
    assert hparams["sparse_backward"] == "serial"
    # a run failed under way: what was asked, and no collective precision
    failed = run_hparams(cfg, {"model": "tiny"}, 2, 3)
    assert failed["compute_kernel"] == "fused" and failed["qcomms_ran"] == "n/a"
    assert failed["experiment"] == "none"
    # a resumed run's best weights trained before its resume, by the checkpoint's run under
    # its settings, were shown under this run's world size and sharding alone (review)
    assert hparams["weights_from"] == "this run"
    resumed = RunMetrics(weights="best", best_step=15.0, resumed={"step": 20})
    before = run_hparams(cfg, choices, 1, 3, resumed)["weights_from"]
    assert before == "before the resume at step 20 (best at step 15)"


def test_hparams_tell_single_runs_of_other_schedules_apart():
    """Single runs with another warm-up, decay or eps had the same HParams (only a sweep's
    swept keys were added: tuning review)."""
    plain = run_hparams(compose_cfg([]), {"model": "tiny"}, 1, 2)
    scheduled = compose_cfg(["optimizer.lr_warmup_steps=8", "optimizer.lr_decay_start=10",
                             "optimizer.lr_decay_steps=4", "optimizer.eps=1e-6"])  # fmt: skip
    other = run_hparams(scheduled, {"model": "tiny"}, 1, 2)
    differ = {key for key in plain if plain[key] != other[key]}
    assert differ == {"lr_warmup_steps", "lr_decay_start", "lr_decay_steps", "eps"}
    assert (other["lr_warmup_steps"], other["eps"]) == (8, 1e-6)
