"""``train.profile``'s step profiler: which steps it records (left out of samples/s and step
times) and when it takes part in a step at all."""

from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import torch

from dlrm_exp.config import ProfileSteps
from dlrm_exp.loop.metrics import Throughput
from dlrm_exp.perf.profile import StepProfiler, profile_files


def test_recorded_steps_are_known_before_they_end_and_the_profiler_stops_taking_part(tmp_path):
    steps = ProfileSteps(wait=1, warmup=1, active=2)
    profiler = StepProfiler(tmp_path, 0, steps, torch.device("cpu"), enabled=True)
    profiler.start()
    recording, took_part = [], []
    helper = ThreadPoolExecutor(1)  # as train.sparse_backward=overlap's: its ops are traced too
    for _ in range(6):
        recording.append(profiler.recording)
        torch.ones(8).sum()
        helper.submit(torch.cumsum, torch.ones(8), 0).result()
        took_part.append(profiler.step())
    # written when the recorded steps end, not at the end of training (on CUDA the allocator
    # history, a stack trace per allocation, ran on through every later step)
    assert (tmp_path / "profile" / "rss_rank0.csv").is_file()
    profiler.stop()  # the end of training calls it too: nothing left to do
    assert recording == [False, True, True, True, False, False]  # warm-up 1 + active 2
    assert took_part == [True, True, True, True, False, False]
    trace = (tmp_path / "profile" / "rank0.pt.trace.json").read_text()
    assert '"aten::sum"' in trace and '"aten::cumsum"' in trace
    off = StepProfiler(tmp_path, 0, steps, torch.device("cpu"), enabled=False)
    assert not off.recording and not off.step()


def test_on_cuda_the_allocator_history_covers_the_recorded_steps_only(tmp_path, monkeypatch):
    """It started before the ``wait`` steps, which count as training, and slowed them with a
    stack trace per allocation (review); a run that ended in the ``wait`` steps dumped an
    empty snapshot. Checked with a stand-in for CUDA's history calls."""
    calls, dumped, current = [], [], []
    monkeypatch.setattr(
        torch.cuda.memory, "_record_memory_history",
        lambda **kw: calls.append((current[-1]._steps, kw)),
    )  # fmt: skip

    def dump(path):
        dumped.append(path)
        Path(path).write_bytes(b"snapshot")

    monkeypatch.setattr(torch.cuda.memory, "_dump_snapshot", dump)

    def profiled(steps_run):
        calls.clear(), dumped.clear()
        profiler = StepProfiler(tmp_path, 0, ProfileSteps(wait=2, warmup=1, active=1),
                                torch.device("cpu"), enabled=True)  # fmt: skip
        profiler.device = torch.device("cuda")  # (its torch profiler records CPU activity only)
        current.append(profiler)
        profiler.start()
        for _ in range(steps_run):
            profiler.step()
        profiler.stop()  # the end of training

    profiled(5)
    assert [steps for steps, _ in calls] == [2, 4]  # on after the 2 wait steps, off at the end
    assert calls[0][1] == {"max_entries": 100_000} and calls[1][1] == {"enabled": None}
    assert len(dumped) == 1  # written aside, then put in place
    assert (tmp_path / "profile" / "cuda_memory_rank0.pickle").read_bytes() == b"snapshot"
    assert profile_files(tmp_path) == [  # no temporary file listed
        "profile/cuda_memory_rank0.pickle",
        "profile/rank0.pt.trace.json",
        "profile/rss_rank0.csv",
    ]
    profiled(1)  # training ended in the wait steps: no history started, no empty snapshot
    assert calls == [] and dumped == []
    # this run's files only: not another rank count's, nor, untraced, an earlier trace (re-read)
    (tmp_path / "profile" / "rss_rank1.csv").write_text("step,seconds,rss_bytes\n")
    assert profile_files(tmp_path, ranks=1, traced=False, cuda=False) == ["profile/rss_rank0.csv"]
    # a CUDA run that ended in the warm-up steps wrote its history and no trace (diff review)
    assert profile_files(tmp_path, ranks=1, traced=False) == [
        "profile/cuda_memory_rank0.pickle",
        "profile/rss_rank0.csv",
    ]
    assert len(profile_files(tmp_path, ranks=2)) == 4 and len(profile_files(tmp_path)) == 4


def test_throughput_leaves_out_steps_not_counted():
    t = Throughput(warmup_steps=0)
    t.resume()
    assert t.step(100, counted=False) is None
    assert t.samples_per_sec is None and t.steps == 1
    seconds = t.step(100)
    assert t.samples == 100 and seconds is not None and seconds == t.seconds > 0


def test_a_run_shorter_than_the_profile_schedule_is_said_and_its_summary_names_no_trace(tmp_path):
    """``train.profile=true train.max_steps=5`` wrote no trace without a word and its summary
    said "(1 files; traces open in ...)" (presets review)."""
    from conftest import compose_cfg
    from dlrm_exp.modes.train import profile_line

    train = compose_cfg(["train.profile=true"]).train
    assert train.profile_past(12) is None
    said = "train.profile records steps 8..12 (train.profile_steps wait 5, warmup 2, active 5"
    assert train.profile_past(5) == f"{said}, from step 1); this run trains to step 5: no " + (
        "trace (lower train.profile_steps.wait / warmup / active)"
    )
    assert "trains to step 10: a partial trace" in (train.profile_past(10) or "")
    # a resume from step 4 numbers the run's steps, as its summary does (diff review)
    assert "records steps 12..16 (" in (train.profile_past(2, 4) or "")
    assert "from step 5); this run trains to step 6: no trace" in (train.profile_past(2, 4) or "")
    assert compose_cfg([]).train.profile_past(1) is None  # not profiled
    without = profile_line(["profile/rss_rank0.csv"], tmp_path)
    assert "(no trace: the run ended before the profiler's recorded steps" in without
    traced = profile_line(["profile/rank0.pt.trace.json", "profile/x.csv"], tmp_path)
    assert "(1 trace(s) of 2 files; traces open in" in traced


def test_a_resumed_profiled_run_counts_its_own_steps_and_lists_its_own_trace(tmp_path, caplog):
    """The short-run warning took the run's last step, not the steps after the resume (the
    profiler's schedule counts from this process's start), and a resume that wrote no trace
    listed, and its summary counted, the earlier attempt's (diff review)."""
    import logging

    from conftest import SMALL, compose_cfg
    from dlrm_exp.modes.train import run_train

    base = [*SMALL, "train.checkpoint_every_n_steps=4", "train.resume=auto"]
    run_train(compose_cfg([*base, "train.max_steps=4"]), tmp_path, {})
    profiled = [*base, "train.profile=true"]
    with caplog.at_level(logging.WARNING, logger="dlrm_exp.loop.trainer"):
        traced = run_train(compose_cfg([*profiled, "train.max_steps=14"]), tmp_path, {})
    assert "trains to step 14: a partial trace" in caplog.text  # steps 5..14 of the run
    assert "profile/rank0.pt.trace.json" in traced.profile
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="dlrm_exp.loop.trainer"):
        again = run_train(compose_cfg([*profiled, "train.max_steps=16"]), tmp_path, {})
    assert "trains to step 16: no trace" in caplog.text
    assert (tmp_path / "profile" / "rank0.pt.trace.json").is_file()  # the earlier attempt's
    assert again.profile and not any(f.endswith(".pt.trace.json") for f in again.profile)
