"""Every optimizer option trains, checkpoints and resumes bitwise; the learning-rate schedule is
the reference's and reaches the fused embedding kernel."""

import shutil

import pytest
import torch
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from conftest import SMALL, compose_cfg
from dlrm_exp.errors import ConfigError
from dlrm_exp.factories.lr_schedule import scheduled_lr
from dlrm_exp.loop.checkpoint import complete_checkpoints
from dlrm_exp.modes.train import run_train


class ReferencePolicy(torch.optim.lr_scheduler.LRScheduler):
    """The LR policy of facebookresearch/dlrm torchrec_dlrm/lr_scheduler.py, restated on
    torch's scheduler so its step counting (``_step_count`` is 1 for the first training step)
    is torch's own: warm-up, hold of the last set value, polynomial decay with a 1e-7 floor."""

    def __init__(self, optimizer, warmup: int, decay_start: int, decay_steps: int) -> None:
        self.warmup, self.decay_start, self.decay_steps = warmup, decay_start, decay_steps
        self.held: list[float] | None = None
        super().__init__(optimizer)

    def get_lr(self) -> list[float]:
        n = self._step_count
        if n < self.warmup:
            self.held = [b * n / self.warmup for b in self.base_lrs]
            return self.held
        if self.decay_start <= n < self.decay_start + self.decay_steps:
            left = (self.decay_steps - (n - self.decay_start)) / self.decay_steps
            self.held = [max(1e-7, b * left * left) for b in self.base_lrs]
            return self.held
        if self.decay_steps > 0:
            return self.held if self.held is not None else list(self.base_lrs)
        return list(self.base_lrs)


@pytest.mark.parametrize(
    ("warmup", "decay_start", "decay_steps"),
    [(10, 20, 20), (10, 10, 5), (0, 0, 30), (7, 7, 0), (0, 0, 0), (4, 30, 3)],
)
def test_schedule_is_the_reference_policy_at_every_step(warmup, decay_start, decay_steps):
    param = torch.nn.Parameter(torch.zeros(1))
    optimizer = torch.optim.SGD([param], lr=0.3)
    reference = ReferencePolicy(optimizer, warmup, decay_start, decay_steps)
    for step in range(1, 60):
        expected = optimizer.param_groups[0]["lr"]  # the rate training step `step` runs with
        assert scheduled_lr(step, 0.3, warmup, decay_start, decay_steps) == pytest.approx(
            expected, rel=1e-12, abs=0
        ), step
        optimizer.step()
        reference.step()


def test_warmup_must_end_before_decay_starts():
    with pytest.raises(ConfigError, match="optimizer.lr_decay_start=10 or later"):
        compose_cfg(
            [
                "optimizer.lr_warmup_steps=10",
                "optimizer.lr_decay_start=5",
                "optimizer.lr_decay_steps=3",
            ]
        )


def test_a_schedule_past_the_runs_end_is_said():
    """A warm-up longer than the run trained at 1.6 % of the asked rate, and a decay that
    starts after its end never decayed, without a word (tuning review)."""
    warmup = compose_cfg(["optimizer.lr_warmup_steps=1000"]).optimizer
    said = warmup.schedule_past(16)
    assert said is not None and said.startswith(
        "optimizer.lr_warmup_steps=1000 is more than the 16 steps this run trains: its "
        "learning rates end at 1.6% of the asked ones"
    )
    assert warmup.schedule_past(1000) is None
    decay = compose_cfg(["optimizer.lr_decay_start=100", "optimizer.lr_decay_steps=50"])
    assert "never decay" in (decay.optimizer.schedule_past(100) or "")
    assert decay.optimizer.schedule_past(101) is None


@pytest.mark.parametrize("lag", [0, 1])
def test_logged_and_kernel_learning_rates_follow_the_schedule(tmp_path, monkeypatch, lag):
    """The acceptance run, small: ``lr`` (dense optimizer) and ``lr/embedding`` (read from
    FBGEMM's fused kernel itself) equal the policy at every one of the 50 steps; also with
    each loss read one step late, as on CUDA (the next step's rates are set by then: logged
    from the kernel at that time, they were one step ahead)."""
    from dlrm_exp.loop import trainer

    monkeypatch.setattr(trainer, "loss_read_lag", lambda device, on_nonfinite: lag)
    schedule = [
        "optimizer.lr_warmup_steps=10",
        "optimizer.lr_decay_start=20",
        "optimizer.lr_decay_steps=20",
    ]
    cfg = compose_cfg(
        [
            *SMALL,
            "data.num_train_samples=8192",
            *schedule,
            "train.max_steps=50",
            "train.log_every_n_steps=1",
            "sharding=tablewise",
        ]
    )
    run_train(cfg, tmp_path, {})
    events = EventAccumulator(str(tmp_path))
    events.Reload()
    for tag, base in (("lr", 0.01), ("lr/embedding", 0.1)):
        logged = {e.step: e.value for e in events.Scalars(tag)}
        assert sorted(logged) == list(range(1, 51)), tag
        for step, value in logged.items():
            assert value == pytest.approx(scheduled_lr(step, base, 10, 20, 20), rel=1e-6), (
                tag,
                step,
            )
    assert logged[15] == pytest.approx(0.1 * 9 / 10)  # the reference's hold after warm-up


def test_data_parallel_tables_log_their_scheduled_rate(tmp_path):
    """``lr/embedding`` read the fused kernels alone: with every table data_parallel (or
    Adam on CPU) it was missing, though the replicas' rate follows the schedule (tuning
    review); it is now their optimizer's."""
    cfg = compose_cfg([*SMALL, "sharding=dataparallel", "optimizer.lr_warmup_steps=4",
                       "train.max_steps=6", "train.log_every_n_steps=1"])  # fmt: skip
    run_train(cfg, tmp_path, {})
    events = EventAccumulator(str(tmp_path))
    events.Reload()
    logged = {e.step: e.value for e in events.Scalars("lr/embedding")}
    assert logged == {
        s: pytest.approx(scheduled_lr(s, 0.1, 4, 0, 0), rel=1e-6) for s in range(1, 7)
    }


def _resumes_bitwise(tmp_path, monkeypatch, overrides: list[str], fused: bool = True) -> None:
    """A run resumed from its step-16 checkpoint ends as the uninterrupted one, its fused
    kernels' iteration counters too (FBGEMM's Adam corrects its bias by them on a GPU; a
    resume counted them from 0). ``fused``: the run has fused kernels to count (not Adam on
    CPU, whose tables are data_parallel replicas stepped by ``torch.optim``)."""
    from dlrm_exp.factories.experiment import fused_kernels
    from dlrm_exp.loop.trainer import Trainer

    iterations, fit = [], Trainer.fit

    def counting_fit(self, *args, **kwargs):
        result = fit(self, *args, **kwargs)
        iterations.append([int(k.iter[0]) for k in fused_kernels(self.experiment.model)])
        return result

    monkeypatch.setattr(Trainer, "fit", counting_fit)
    args = [*SMALL, "train.val_every_n_steps=16", "train.checkpoint_every_n_steps=8", *overrides]
    full = run_train(compose_cfg(args), tmp_path / "a", {})
    resumed_dir = tmp_path / "b" / "checkpoints"
    resumed_dir.mkdir(parents=True)
    shutil.copytree(complete_checkpoints(tmp_path / "a")[1], resumed_dir / "step_16")
    resumed = run_train(compose_cfg([*args, "train.resume=auto"]), tmp_path / "b", {})
    assert resumed.resumed["step"] == 16  # (a fresh run would end the same: deterministic)
    for key in ("val", "test", "val_history", "final_train_loss", "steps"):
        assert getattr(resumed, key) == getattr(full, key), key
    assert bool(iterations[0]) == fused and iterations[1] == iterations[0]


def test_resume_continues_the_schedule_exactly(tmp_path, monkeypatch):
    _resumes_bitwise(
        tmp_path,
        monkeypatch,
        [
            "optimizer.lr_warmup_steps=6",
            "optimizer.lr_decay_start=12",
            "optimizer.lr_decay_steps=16",
        ],
    )


@pytest.mark.slow
@pytest.mark.parametrize("option", ["adam"])  # fused state: the schedule-resume test above
def test_optimizer_state_is_saved_and_resumed(tmp_path, monkeypatch, option):
    """Adam's state (torch.optim's on CPU, of the data_parallel tables and the dense part)
    resumes bitwise; its fused counter on a GPU: tests/gpu."""
    _resumes_bitwise(tmp_path, monkeypatch, [f"optimizer={option}"], fused=False)


@pytest.mark.parametrize("option", ["rowwise_adagrad", "adagrad", "sgd", "adam", "mlperf"])
def test_every_optimizer_option_trains(tmp_path, option):
    metrics = run_train(compose_cfg([*SMALL, f"optimizer={option}"]), tmp_path, {})
    assert metrics.steps == 32 and torch.isfinite(torch.tensor(metrics.final_train_loss))
    assert 0.5 < metrics.val["auroc"] < 1 and metrics.val["logloss"] < 0.7


def test_adam_on_cpu_replicates_auto_tables_and_refuses_sharded_ones(tmp_path):
    run_train(compose_cfg([*SMALL, "optimizer=adam", "train.max_steps=2"]), tmp_path, {})
    plan = (tmp_path / "plan.txt").read_text()
    assert plan.count("data_parallel") == 26
    with pytest.raises(ConfigError, match="cannot fuse adam into backward.*sharding=dataparallel"):
        compose_cfg(["optimizer=adam", "sharding=rowwise"])
    # the per-table override is what to change (it said "every table ... auto-sharded")
    one_table = r"cannot be sharded: t_cat_0 \(per_table_sharding_type.t_cat_0=row_wise\);"
    with pytest.raises(ConfigError, match=one_table):
        compose_cfg(["optimizer=adam", "+sharding.per_table_sharding_type.t_cat_0=row_wise"])
    # with fp16 tables, replicas would be refused in turn: the way out says so (review)
    fp16 = r"DDP, which needs fp32 tables: .*\), a sparse optimizer FBGEMM fuses on CPU"
    with pytest.raises(ConfigError, match=fp16):
        compose_cfg(["optimizer=adam", "sharding=rowwise", "model.embedding_data_type=fp16"])
    with pytest.raises(ConfigError) as fp32:
        compose_cfg(["optimizer=adam", "sharding=rowwise"])
    assert "fp32 tables" not in str(fp32.value)


def test_the_schedule_sets_the_fused_kernels_rate_before_the_step_runs():
    """TorchRec copies the rate into FBGEMM's kernel only in the fused optimizer's zero_grad /
    step, which TrainPipelineSemiSync calls after a step's backward: its tables trained one
    step late, the first step at the full base rate whatever the warm-up."""
    from dlrm_exp.distributed.launch import process_group
    from dlrm_exp.factories.experiment import build_experiment

    cfg = compose_cfg([*SMALL, "optimizer.lr_warmup_steps=10", "sharding=tablewise"])
    with process_group(cfg.hardware) as ctx:
        experiment = build_experiment(cfg, ctx)
        for step in (1, 5):
            experiment.lr_schedule.apply(step)  # no optimizer call in between
            rate = scheduled_lr(step, cfg.optimizer.learning_rate, 10, 0, 0)
            assert experiment.embedding_learning_rate() == pytest.approx(rate, rel=1e-6)
