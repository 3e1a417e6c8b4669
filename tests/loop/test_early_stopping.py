"""Early stopping's rule (PyTorch Lightning's): improvement beyond min_delta in the monitored
metric's direction, a stop after ``patience`` validations in a row without one; and on a run
made to overfit: the stop, the best weights kept and reported, resume, evaluate."""

import json
import re
import shutil
from pathlib import Path

import pytest
import torch
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
from tensorboard.plugins.custom_scalar import layout_pb2

from conftest import compose_cfg, two_process_job
from dlrm_exp.config import EarlyStopping, Monitor
from dlrm_exp.errors import ConfigError
from dlrm_exp.loop.early_stopping import BestValidation
from dlrm_exp.loop.train_window import TrainWindow
from dlrm_exp.modes.evaluate import run_evaluate
from dlrm_exp.modes.evaluate import summary as evaluate_summary
from dlrm_exp.modes.job import Job
from dlrm_exp.modes.train import run_train


def _run(values, cfg: EarlyStopping) -> tuple[BestValidation, int | None]:
    """Feed validations at steps 10, 20, ...; returns the state and the step that stops."""
    best = BestValidation()
    for i, value in enumerate(values, start=1):
        best.update(10 * i, {cfg.monitor.value: value}, cfg)
        if best.should_stop(cfg):
            return best, 10 * i
    return best, None


def test_auroc_stops_after_patience_validations_without_improvement():
    best, stop = _run([0.70, 0.72, 0.71, 0.72, 0.715, 0.73], EarlyStopping(patience=3))
    assert (best.step, best.value, stop) == (20, 0.72, 50)  # 0.72 again is no improvement


def test_loss_like_metrics_improve_downwards_and_min_delta_counts():
    cfg = EarlyStopping(monitor=Monitor.logloss, patience=2, min_delta=0.01)
    best, stop = _run([0.50, 0.45, 0.445, 0.44, 0.43], cfg)
    assert (best.step, best.value, stop) == (20, 0.45, 40)  # 0.445 and 0.44: within 0.01


def test_patience_null_never_stops_and_an_improvement_resets_the_count():
    best, stop = _run([0.7, 0.6, 0.6, 0.6, 0.6], EarlyStopping(patience=None))
    assert stop is None and best.bad_validations == 4
    best, stop = _run([0.7, 0.6, 0.6, 0.8, 0.6, 0.6], EarlyStopping(patience=3))
    assert stop is None and (best.step, best.bad_validations) == (40, 2)


def test_a_resumed_stop_holds_only_where_this_job_asks_for_it():
    """A run stopped at its target and resumed with the target removed (or raised, or with
    more patience) said "nothing left to train"; the same job requeued still stops."""
    from dlrm_exp.config import TrainConfig
    from dlrm_exp.loop.early_stopping import EARLY_STOPPING, TARGET
    from dlrm_exp.loop.trainer import TrainerState

    def resumed(stop, total_steps=None, auroc=0.6, values=None, saved_rule=None, **train):
        """A checkpoint at step 30 whose validations (steps 10, 20, 30) gave ``values``
        (default: ``auroc``, 0.7), with the best and the count its ``saved_rule`` kept."""
        values = values or [auroc, 0.7]
        history = [{"step": 10.0 * (i + 1), "auroc": v} for i, v in enumerate(values)]
        best, _ = _run(values, saved_rule or EarlyStopping(patience=None))
        state = TrainerState(30, 0, history, target_step=20, best=best, stop_reason=stop)
        state.reconsider_stop(TrainConfig(**train), total_steps)
        return state.stop_reason, state.target_step

    assert resumed(TARGET, target_auroc=0.65) == (TARGET, 20)  # the same job: still stopped
    assert resumed(TARGET, target_auroc=0.55) == (TARGET, 10)  # reached earlier in the history
    assert resumed(TARGET) == (None, None)
    assert resumed(TARGET, target_auroc=0.8) == (None, None)
    stopped, worse = EarlyStopping(patience=2), [0.7, 0.6, 0.6]  # the best, then 2 worse
    assert resumed(EARLY_STOPPING, values=worse, early_stopping=stopped) == (EARLY_STOPPING, None)
    assert resumed(EARLY_STOPPING, values=worse, early_stopping=EarlyStopping(patience=5)) == (
        None,
        None,
    )
    # less patience than the history's validations without improvement: a fresh run of this
    # job would have stopped earlier; it trained another interval (review)
    assert resumed(None, 40, values=worse, early_stopping=stopped) == (EARLY_STOPPING, None)
    assert resumed(None, 40, values=worse, early_stopping=EarlyStopping(patience=3)) == (
        None,
        None,
    )
    assert resumed(None, 30, values=worse, early_stopping=stopped) == (None, None)  # ends there
    # the count is this job's rule over the history: 0.700, 0.703, 0.706 kept under
    # min_delta=0.01 count 2 without improvement, under min_delta=0 none (review)
    # validations of an empty split (data.val_fraction=0) count for nothing, replayed or not
    empty = [{"step": 10.0 * i, "auroc": None, "samples": 0} for i in (1, 2, 3)]
    state = TrainerState(30, 0, empty, best=BestValidation())
    state.reconsider_stop(TrainConfig(early_stopping=stopped), 40)
    assert state.stop_reason is None and state.best == BestValidation()
    rising, strict = [0.700, 0.703, 0.706], EarlyStopping(patience=5, min_delta=0.01)
    assert resumed(None, 40, values=rising, saved_rule=strict, early_stopping=stopped) == (
        None,
        None,
    )
    assert resumed(None, target_auroc=0.65) == (TARGET, 20)  # a lower target, reached earlier
    # reached at the last step, the run ended ("end") and was requeued while scoring the
    # test split: it recorded target_auroc
    assert resumed(None, 20, target_auroc=0.65) == (None, 20)
    assert resumed(TARGET, 20, target_auroc=0.65) == (None, 20)  # saved as a stop, all the same
    assert resumed(None, 40, target_auroc=0.65) == (TARGET, 20)
    # a NaN AUROC (a one-class validation) is null in the checkpoint: the resume raised
    assert resumed(None, 40, None, target_auroc=0.65) == (TARGET, 20)


def test_a_resume_with_another_monitor_rebuilds_the_best_from_the_history(tmp_path):
    """The best was kept as a bare number: resumed with monitor=logloss, an AUROC of 0.801
    was the log loss to beat, so a worse log loss "improved" and the best weights were
    another validation's. The saved best weights are those of the replayed best when it is
    the same validation (they were left aside, and the resume removed checkpoints/best)."""
    from dlrm_exp.config import TrainConfig
    from dlrm_exp.loop.checkpoint import holds_best
    from dlrm_exp.loop.trainer import TrainerState

    history = [
        {"step": 10.0, "auroc": 0.78, "logloss": 0.450},
        {"step": 20.0, "auroc": 0.801, "logloss": 0.455},
        {"step": 30.0, "auroc": 0.79, "logloss": 0.460},
    ]
    by_auroc = EarlyStopping(patience=None)
    best = BestValidation()
    for entry in history:
        best.update(int(entry["step"]), entry, by_auroc)
    assert (best.step, best.value, best.monitor) == (20, 0.801, "auroc")
    assert BestValidation.from_json(best.to_json()) == best  # the monitor is saved
    state = TrainerState(30, 0, history, best=best, best_checkpoint="run/checkpoints/best")
    by_logloss = EarlyStopping(monitor=Monitor.logloss, patience=None)
    state.reconsider_stop(TrainConfig(early_stopping=by_logloss))
    assert (state.best.step, state.best.value, state.best.bad_validations) == (10, 0.450, 2)
    assert state.best.monitor == "logloss" and state.best_checkpoint == "run/checkpoints/best"

    def saved_best(name, saved_history):  # checkpoints/best as the AUROC run saved it
        folder = tmp_path / name
        folder.mkdir()
        state = {"best": best.to_json(), "val_history": saved_history}
        (folder / "trainer_state.json").write_text(json.dumps(state))
        return folder

    assert holds_best(saved_best("a", history), by_auroc_best := best)
    assert not holds_best(saved_best("b", history), state.best)  # step 20's, not step 10's
    # the same best step under both metrics: the saved weights are the replayed best's
    alike = [{**h, "logloss": 0.5 - h["auroc"] / 10} for h in history]
    kept = TrainerState(30, 0, alike, best=by_auroc_best, best_checkpoint="run/checkpoints/best")
    kept.reconsider_stop(TrainConfig(early_stopping=by_logloss))
    assert kept.best.step == best.step == 20 and kept.best.monitor == "logloss"
    assert holds_best(saved_best("c", alike), kept.best)
    # every validation NaN under the new monitor (null): no value tells them apart
    nan_history = [{**h, "logloss": None} for h in history]
    nan_best = BestValidation(step=20, value=None, monitor="logloss")
    assert not holds_best(saved_best("d", nan_history), nan_best)
    same = TrainerState(30, 0, history, best=best, best_checkpoint="run/checkpoints/best")
    same.reconsider_stop(TrainConfig(early_stopping=by_auroc))
    assert same.best is best and same.best_checkpoint == "run/checkpoints/best"
    # an infinite log loss is null in the checkpoint's history: replayed as no improvement
    diverged = [{"step": 5.0, "auroc": None, "logloss": None}, *history]
    replayed = BestValidation.replayed(diverged, by_logloss)
    assert (replayed.step, replayed.bad_validations) == (10, 2)


def test_a_non_finite_validation_never_becomes_the_best():
    nan = float("nan")
    best, stop = _run([nan, 0.6, nan, nan, nan], EarlyStopping(patience=3))
    assert (best.step, best.value, stop) == (20, 0.6, 50)  # 0.6 improved on "nothing yet"
    best, stop = _run([nan, nan, nan], EarlyStopping(patience=3))
    assert (best.step, best.value, stop) == (None, None, 30)
    from dlrm_exp.loop.early_stopping import EARLY_STOPPING
    from dlrm_exp.modes.train import _best_lines
    from dlrm_exp.record.run_record import RunMetrics

    stopped = RunMetrics(stop_reason=EARLY_STOPPING, steps=30, monitor="auroc", best_step=None)
    assert "val auroc was never a finite number" in _best_lines(stopped)[0]


def test_best_weights_from_before_a_resume_are_said_to_be_the_earlier_runs():
    """Resumed in other settings (bf16, 1 thread), a run that never beat the best of the run
    it continued reported those weights under its own settings, val as scored then (what-ran
    review)."""
    from dlrm_exp.modes.train import _best_lines
    from dlrm_exp.record.run_record import RunMetrics

    final = {"val": {"auroc": 0.70}, "test": {"auroc": 0.71}}
    kept = {
        "weights": "best",
        "final_weights": final,
        "monitor": "auroc",
        "steps": 40,
        "best_value": 0.7057,
    }
    history = [{"step": 30, "auroc": 0.7057}, {"step": 40, "auroc": 0.70}]
    before = RunMetrics(**kept, best_step=30, resumed={"step": 30}, val_history=history)
    assert "trained before this run resumed at step 30" in _best_lines(before)[-1]
    after = RunMetrics(**kept, best_step=40, resumed={"step": 30}, val_history=history)
    uninterrupted = RunMetrics(**kept, best_step=30, val_history=history)
    for lines in (_best_lines(after), _best_lines(uninterrupted)):
        assert not any("resumed" in line for line in lines)
    # a validation rescaled to this run's steps (another world size) prints as a step, not
    # as 28.846153846153847 (review)
    rescaled = RunMetrics(**{**kept, "best_step": 28.846153846153847}, val_history=history)
    assert "(step 28.85, epoch" in _best_lines(rescaled)[-1]


def test_the_state_survives_a_checkpoint():
    best, _ = _run([0.7, 0.6], EarlyStopping())
    assert BestValidation.from_json(best.to_json()) == best
    assert BestValidation.from_json(None) == BestValidation()


@pytest.mark.parametrize(("patience", "min_delta"), [(0, 0.0), (-1, 0.0), (3, -0.1)])
def test_bad_settings_are_refused(patience, min_delta):
    with pytest.raises(ConfigError, match="train.early_stopping"):
        EarlyStopping(patience=patience, min_delta=min_delta)


#: Made to overfit (the issue's acceptance shape, smaller splits): 32 steps per epoch, a
#: validation per epoch, a checkpoint per epoch; early stopping and keep_best at their defaults.
OVERFIT = [
    "data.num_train_samples=16384",
    "data.num_val_samples=4096",
    "data.num_test_samples=4096",
    "train.epochs=10",
    "train.checkpoint_every_n_steps=32",
    "train.progress_bar=false",
]


@pytest.fixture(scope="module")
def overfit(tmp_path_factory):
    """(run folder, record) of ``OVERFIT``."""
    run_dir = tmp_path_factory.mktemp("overfit")
    return run_dir, run_train(compose_cfg(OVERFIT), run_dir, {})


def test_an_overfitting_run_stops_early_and_reports_its_best_weights(overfit):
    """It stops before epoch 10 at the first validation after 3 without improvement; val and
    test are the best validation's weights (restored from checkpoints/best), and the final
    weights' worse numbers are recorded beside them."""
    run_dir, metrics = overfit
    saved = json.loads((run_dir / "metrics.json").read_text())
    history = [(int(h["step"]), h["auroc"]) for h in metrics.val_history]
    best_step, best_auroc = max(history, key=lambda h: h[1])
    assert saved["stop_reason"] == "early_stopping" and metrics.steps < 320
    assert saved["best_step"] == best_step and metrics.steps == best_step + 3 * 32
    assert saved["best_epoch"] == best_step / 32 and saved["best_value"] == best_auroc
    assert saved["weights"] == "best" and saved["val"]["auroc"] == best_auroc
    final = saved["final_weights"]
    assert final["val"]["auroc"] == history[-1][1]
    assert saved["test"]["auroc"] > final["test"]["auroc"]  # the cost of overfitting
    assert (run_dir / "checkpoints" / "best").is_dir()
    events = EventAccumulator(str(run_dir))
    events.Reload()
    assert [s.step for s in events.Scalars("val/best_auroc")] == [best_step]
    # the validation curve is the history, ending on the final weights (it ended on the best
    # weights' value, written at the last step as an HParams metric under the same tag)
    curve = events.Scalars("val/auroc")
    assert [s.step for s in curve] == [h[0] for h in history]
    assert curve[-1].value == pytest.approx(history[-1][1], abs=1e-6)
    assert events.Scalars("summary/val_auroc")[-1].value == pytest.approx(best_auroc, abs=1e-6)
    # overfitting made visible: the training window's log loss falls while validation's rises
    assert [w["step"] for w in saved["train_windows"]] == [h[0] for h in history]
    assert metrics.generalization_gap(metrics.steps) > metrics.generalization_gap(best_step) + 0.5
    assert len(events.Scalars("train_window/logloss")) == metrics.steps // 20
    # the Custom Scalars charts name tags the run wrote, every one of them
    tensors = EventAccumulator(str(run_dir), size_guidance={"tensors": 0})
    tensors.Reload()
    (config,) = tensors.Tensors("custom_scalars__config__")
    layout = layout_pb2.Layout.FromString(config.tensor_proto.string_val[0])
    (category,) = layout.category
    regexes = [r for chart in category.chart for r in chart.multiline.tag]
    scalars = events.Tags()["scalars"]
    assert len(regexes) == 9 and all(any(re.match(r, t) for t in scalars) for r in regexes)


def test_the_training_window_scores_its_last_batches():
    window = TrainWindow(2)
    window.add(torch.tensor([9.0, -9.0]), torch.tensor([0, 1]))  # wrong, then pushed out
    assert window.metrics()["auroc"] == 0.0
    window.add(torch.tensor([2.0, -2.0]), torch.tensor([1, 0]))
    window.add(torch.tensor([1.0, -1.0]), torch.tensor([1, 0]))
    assert window.metrics()["auroc"] == 1.0
    assert window.metrics()["logloss"] == pytest.approx((0.126928 + 0.313262) / 2, abs=1e-5)
    off = TrainWindow(0)
    off.add(torch.tensor([1.0, -1.0]), torch.tensor([1, 0]))
    assert off.metrics() == {}
    one_class = TrainWindow(1)
    one_class.add(torch.tensor([1.0]), torch.tensor([1]))
    assert one_class.metrics() == {}


def test_a_run_resumed_after_the_best_checkpoint_stops_at_the_same_step_bitwise(overfit, tmp_path):
    """As if killed after the checkpoint of the validation after the best: resume=auto
    continues the patience count, stops at the same step and restores the same weights."""
    run_dir, metrics = overfit
    again = tmp_path / "run"
    shutil.copytree(run_dir, again)
    (again / "metrics.json").unlink()
    after_best = metrics.best_step + 32
    for path in (again / "checkpoints").glob("step_*"):
        if int(path.name.removeprefix("step_")) > after_best:
            shutil.rmtree(path)
    resumed = run_train(compose_cfg([*OVERFIT, "train.resume=auto"]), again, {})
    assert resumed.resumed["step"] == after_best  # (a fresh run would end the same)
    assert resumed.steps == metrics.steps and resumed.best_step == metrics.best_step
    assert resumed.val == metrics.val and resumed.test == metrics.test
    assert resumed.final_weights == metrics.final_weights


def test_a_run_resumed_from_another_runs_checkpoint_holds_the_best_weights_it_reports(
    overfit, tmp_path
):
    """Resumed into a new folder from a checkpoint after the best validation, the run's best
    weights are the other run's ``checkpoints/best``: linked into this folder, so evaluating
    this folder scores the weights its record reports (not its final ones)."""
    run_dir, metrics = overfit
    after_best = run_dir / "checkpoints" / f"step_{metrics.best_step + 32}"
    resumed_dir = tmp_path / "resumed"
    cfg = compose_cfg([*OVERFIT, f"train.resume={after_best}"])
    resumed = run_train(cfg, resumed_dir, {})
    assert resumed.weights == "best" and resumed.test == metrics.test
    best = resumed_dir / "checkpoints" / "best"
    assert (best / ".metadata").stat().st_ino == (
        run_dir / "checkpoints" / "best" / ".metadata"
    ).stat().st_ino  # linked, not written again
    state = json.loads((resumed_dir / "checkpoints" / f"step_{metrics.steps}" /
                        "trainer_state.json").read_text())  # fmt: skip
    assert state["best_checkpoint"] == str(best)
    scored = run_evaluate(
        compose_cfg([*OVERFIT, "mode=evaluate", f"checkpoint={resumed_dir}"]), Job(tmp_path)
    )
    assert scored.step == metrics.best_step and scored.test == resumed.test


def test_a_resumed_run_takes_only_the_best_its_checkpoint_recorded(tmp_path):
    """A run resumed from a checkpoint saved before another run's later best linked that
    run's checkpoints/best as it is now (weights its record never had), and a best saved
    after the checkpoint it resumes (then lost with a crash) stayed for evaluate to take."""
    from dlrm_exp.distributed.launch import process_group
    from dlrm_exp.loop.checkpoint import adopt_best

    def best_folder(folder: Path, value: float) -> Path:
        folder.mkdir(parents=True)
        (folder / ".metadata").write_bytes(b"")
        (folder / "trainer_state.json").write_text(json.dumps({"best": {"value": value}}))
        return folder

    other = best_folder(tmp_path / "a" / "checkpoints" / "best", 0.80)  # trained on since

    def at(value):
        return BestValidation(step=10, value=value)

    with process_group(compose_cfg([]).hardware):
        assert adopt_best(other, tmp_path / "b", True, at(0.70)) is None
        assert not (tmp_path / "b" / "checkpoints" / "best").exists() and other.is_dir()
        linked = adopt_best(other, tmp_path / "b", True, at(0.80))  # the same best: held here
        assert linked == tmp_path / "b" / "checkpoints" / "best" and linked.is_dir()
        own = best_folder(tmp_path / "c" / "checkpoints" / "best", 0.80)  # a lost branch's
        # a resume that trains no step leaves the folder's best with its kept record
        assert adopt_best(own, tmp_path / "c", True, at(0.70), trains=False) == own
        assert adopt_best(own, tmp_path / "c", True, at(0.70)) is None and not own.exists()
        later = best_folder(tmp_path / "d" / "checkpoints" / "best", 0.80)  # none recorded
        assert adopt_best(None, tmp_path / "d", True, BestValidation()) is None
        assert not later.exists()


def test_a_run_stopped_at_its_best_and_resumed_without_the_stop_keeps_those_weights(
    overfit, tmp_path, caplog
):
    """Stopped at the target on its best validation (then no separate best is saved: the
    final weights are the best), resumed with the target removed, it trains on to the same
    early stop and restores that validation's weights, as the uninterrupted run did."""
    _, metrics = overfit
    target = metrics.best_value
    stopped = run_train(compose_cfg([*OVERFIT, f"train.target_auroc={target!r}"]), tmp_path, {})
    assert (stopped.stop_reason, stopped.steps) == ("target_auroc", metrics.best_step)
    assert not (tmp_path / "checkpoints" / "best").exists()
    at_stop = tmp_path / "checkpoints" / f"step_{metrics.best_step}"
    cfg = compose_cfg([*OVERFIT, f"train.resume={at_stop}"])
    resumed = run_train(cfg, tmp_path / "resumed", {})
    assert "has no saved weights" not in caplog.text
    assert (resumed.steps, resumed.best_step, resumed.weights) == (
        metrics.steps,
        metrics.best_step,
        "best",
    )
    assert resumed.val == metrics.val and resumed.test == metrics.test


def test_evaluate_on_the_run_folder_uses_the_best_weights_and_says_so(overfit, tmp_path):
    """Also: the periodic checkpoint of the best validation's step holds the same files,
    hard-linked, not written twice, and evaluates to the same numbers."""
    run_dir, metrics = overfit
    cfg = compose_cfg([*OVERFIT, "mode=evaluate", f"checkpoint={run_dir}"])
    result = run_evaluate(cfg, Job(tmp_path))
    assert result.step == metrics.best_step and result.test["auroc"] == metrics.test["auroc"]
    assert "(the best validation's weights)" in evaluate_summary(result, tmp_path)
    best, step = run_dir / "checkpoints" / "best", run_dir / f"checkpoints/step_{result.step}"
    written = sorted(p.name for p in best.iterdir() if p.suffix == ".distcp")
    assert written and [p.name for p in sorted(step.glob("*.distcp"))] == written
    for name in [*written, ".metadata"]:
        assert (best / name).stat().st_ino == (step / name).stat().st_ino, name
    cfg = compose_cfg([*OVERFIT, "mode=evaluate", f"checkpoint={step}"])
    linked = run_evaluate(cfg, Job(tmp_path / "step"))
    assert (linked.step, linked.test, linked.val) == (result.step, result.test, result.val)


def test_without_keep_best_the_final_weights_are_reported(overfit, tmp_path, caplog):
    """keep_best=false: no best checkpoint, val / test are the final weights' (the same
    numbers as the kept run's final_weights), the stop is the same. Resumed with keep_best
    from one of its checkpoints, there are no best weights to restore: it says so and
    reports the final weights."""
    _, kept = overfit
    final = run_train(compose_cfg([*OVERFIT, "train.keep_best=false"]), tmp_path / "a", {})
    assert final.weights == "final" and final.final_weights == {}
    assert final.steps == kept.steps and final.best_step == kept.best_step
    assert final.val == kept.final_weights["val"] and final.test == kept.final_weights["test"]
    assert not (tmp_path / "a" / "checkpoints" / "best").exists()
    step_64 = tmp_path / "a" / "checkpoints" / "step_64"
    resumed = run_train(compose_cfg([*OVERFIT, f"train.resume={step_64}"]), tmp_path / "b", {})
    assert resumed.weights == "final" and resumed.test == final.test
    assert "has no saved weights" in caplog.text


#: Two processes, row-wise, made to overfit: 32 steps of 2 x 128 per epoch, at most 6 epochs,
#: a checkpoint per epoch (so the best validation's and a periodic one fall on one step).
TWO_DATA = [
    "data.num_train_samples=8192",
    "data.num_val_samples=2048",
    "data.num_test_samples=2048",
    "train.batch_size=128",
]
TWO_ROWWISE = two_process_job(
    "early-stopping-rowwise",
    ["sharding=rowwise", *TWO_DATA, "train.epochs=6", "train.checkpoint_every_n_steps=32"],
)


@pytest.mark.slow
def test_two_row_wise_processes_stop_early_and_keep_the_best_weights(two_process_runs, tmp_path):
    """Also: rank 0 linked both ranks' DCP files of ``best`` into ``step_<best>``, which one
    process then evaluates to the run's numbers."""
    run = two_process_runs[TWO_ROWWISE]
    metrics, history = run.metrics, run.metrics.val_history
    best = max(history, key=lambda h: h["auroc"])
    assert metrics.world_size == 2 and metrics.stop_reason == "early_stopping"
    assert metrics.best_step == best["step"] and metrics.steps == best["step"] + 3 * 32 < 192
    assert metrics.weights == "best" and metrics.val["auroc"] == best["auroc"]
    assert metrics.test["auroc"] > metrics.final_weights["test"]["auroc"]
    folder = run.run_dir / "checkpoints"
    linked = folder / f"step_{metrics.best_step}"
    for name in (".metadata", "__0_0.distcp", "__1_0.distcp"):
        assert (folder / "best" / name).stat().st_ino == (linked / name).stat().st_ino, name
    cfg = compose_cfg([*TWO_DATA, "mode=evaluate", f"checkpoint={linked}"])
    result = run_evaluate(cfg, Job(tmp_path))
    assert result.test["auroc"] == metrics.test["auroc"]


def test_when_the_last_validation_is_the_best_the_run_folder_gives_its_weights(tmp_path):
    """checkpoints/best was written at an earlier improving validation; the last one is better
    still, so ``checkpoint=<run folder>`` (evaluate, predict, export) must give the final
    weights, not that earlier best."""
    from dlrm_exp.loop.checkpoint import find_checkpoint

    rising = ["data.num_train_samples=4096", "data.num_val_samples=1024",
              "data.num_test_samples=1024", "train.batch_size=256", "train.val_every_n_steps=4",
              "train.progress_bar=false"]  # fmt: skip
    metrics = run_train(compose_cfg(rising), tmp_path, {})
    aurocs = [h["auroc"] for h in metrics.val_history]
    assert metrics.steps == 16 and aurocs[-1] == max(aurocs) and aurocs[0] < aurocs[-1]
    saved = json.loads((find_checkpoint(str(tmp_path)) / "trainer_state.json").read_text())
    assert saved["step"] == 16 and saved["best"]["step"] == 16


def test_best_weights_of_another_validation_are_not_restored(tmp_path):
    """A resume that did not continue bitwise can leave checkpoints/best holding a later
    validation's weights than the best the state names: they are not loaded as its weights."""
    from types import SimpleNamespace

    from dlrm_exp.modes.train import _BestCheckpoint

    best = tmp_path / "checkpoints" / "best"
    best.mkdir(parents=True)
    (best / ".metadata").write_bytes(b"")
    (best / "trainer_state.json").write_text(json.dumps({"step": 300, "best": {"value": 0.71}}))
    saver = SimpleNamespace(run=SimpleNamespace(job=SimpleNamespace(run_dir=tmp_path)), layout=None)
    keeper = _BestCheckpoint(saver)
    assert not keeper.restore(str(best), BestValidation(step=200, value=0.70))


def test_an_empty_validation_split_decides_nothing(tmp_path, caplog):
    """``data.val_fraction=0``: every validation is NaN over 0 rows, and those counted as
    validations that did not improve: early stopping ended a 5-epoch run after epoch 3."""
    from dlrm_exp.data.criteo_format import write_criteo_tsv
    from dlrm_exp.record.run_record import RunMetrics

    path = write_criteo_tsv(tmp_path / "day.tsv", 512)
    cfg = compose_cfg(
        ["data=criteo_tsv", f"data.path={path}", "data.val_fraction=0", "data.test_fraction=0.25",
         "train.batch_size=64", "train.epochs=5", "train.progress_bar=false"]
    )  # fmt: skip
    metrics = run_train(cfg, tmp_path / "run", {})
    assert metrics.stop_reason == "end" and metrics.steps == 5 * 384 // 64
    assert metrics.val["samples"] == 0 and metrics.generalization_gap(metrics.steps) is None
    read = RunMetrics.read(tmp_path / "run" / "metrics.json")  # NaN written as null
    assert read.val_history[-1]["logloss"] is None and read.generalization_gap(30) is None
    said = [r.getMessage() for r in caplog.records if "validation split has no rows" in r.message]
    assert said == [
        "the validation split has no rows: early stopping and train.keep_best do not apply "
        "(val metrics are n/a)"
    ]  # once, naming the defaults that are on


def test_an_empty_validation_split_is_not_warned_of_when_nothing_watches_it(caplog):
    """No early stopping, target or best weights: an empty split changes nothing to say."""
    from types import SimpleNamespace

    from dlrm_exp.config.train import EarlyStopping
    from dlrm_exp.loop.trainer import Trainer

    def warned(patience, keep_best, target):
        caplog.clear()
        cfg = SimpleNamespace(
            early_stopping=EarlyStopping(patience=patience), keep_best=keep_best,
            target_auroc=target,
        )  # fmt: skip
        Trainer._warn_empty_validation(SimpleNamespace(cfg=cfg, _empty_validation_warned=False))
        return caplog.text

    assert "no rows" not in warned(None, False, None)
    assert "train.target_auroc does not apply" in warned(None, False, 0.7)
