"""submitit's preemption signal is held back inside :func:`save_signals_held` and handed to the
handler that was installed once the block ends."""

import os
import signal

import pytest

from dlrm_exp.distributed.preemption import preemption_signal, save_signals_held


@pytest.fixture
def recorded(monkeypatch):
    """SIGUSR1 as the preemption signal (``SUBMITIT_PREEMPT_SIGNAL=USR1``) with a handler that
    records what it got; the earlier handler is restored afterwards."""
    monkeypatch.setenv("SUBMITIT_PREEMPT_SIGNAL", "USR1")
    got: list[int] = []
    previous = signal.signal(signal.SIGUSR1, lambda signum, frame: got.append(signum))
    yield got
    signal.signal(signal.SIGUSR1, previous)


def test_the_signal_is_handled_after_the_block_not_inside_it(recorded):
    assert preemption_signal() == signal.SIGUSR1
    with save_signals_held():
        os.kill(os.getpid(), signal.SIGUSR1)
        os.kill(os.getpid(), signal.SIGUSR1)
        assert recorded == []
    assert recorded == [signal.SIGUSR1]  # once, however often it came
    os.kill(os.getpid(), signal.SIGUSR1)  # the handler is back in place
    assert recorded == [signal.SIGUSR1, signal.SIGUSR1]


def test_the_signal_is_handled_after_a_block_that_raised(recorded):
    with pytest.raises(RuntimeError), save_signals_held():
        os.kill(os.getpid(), signal.SIGUSR1)
        raise RuntimeError("the save failed")
    assert recorded == [signal.SIGUSR1]


def test_an_unknown_signal_name_holds_nothing_back(monkeypatch):
    """With no preemption signal known, the block changes no handler: submitit's default
    USR2 (or any other) reaches its handler at once, inside the block."""
    monkeypatch.setenv("SUBMITIT_PREEMPT_SIGNAL", "NOSUCH")
    assert preemption_signal() is None
    got: list[int] = []

    def recorder(signum, frame):
        got.append(signum)

    previous = signal.signal(signal.SIGUSR2, recorder)
    try:
        with save_signals_held():
            assert signal.getsignal(signal.SIGUSR2) is recorder
            os.kill(os.getpid(), signal.SIGUSR2)
            assert got == [signal.SIGUSR2]  # handled in the block, not held back
    finally:
        signal.signal(signal.SIGUSR2, previous)


def test_ctrl_c_during_a_save_comes_once_the_save_is_committed(capfd, monkeypatch):
    """Ctrl-C inside DCP's save was wrapped in a CheckpointException: a 111-line traceback,
    exit 1, a sweep without its summary (crash review). Held like the preemption signal, it
    is said at once and raised after the block; the same request again at once (a terminal's
    Ctrl-C, then torch's elastic agent's own SIGINT to its workers) is one; a second one later
    stops the block at once."""
    from dlrm_exp.distributed import preemption

    previous = signal.signal(signal.SIGINT, signal.default_int_handler)  # (xdist: ignored)
    try:
        done = []
        with pytest.raises(KeyboardInterrupt), save_signals_held():
            os.kill(os.getpid(), signal.SIGINT)
            os.kill(os.getpid(), signal.SIGINT)  # the agent's, a moment later: the same
            done.append("saved")
        assert done == ["saved"]
        assert capfd.readouterr().err.count("SIGINT: the checkpoint being saved is finished") == 1
        monkeypatch.setattr(preemption, "_SAME_REQUEST_S", -1.0)  # every repeat is "later"
        with pytest.raises(KeyboardInterrupt), save_signals_held():
            os.kill(os.getpid(), signal.SIGINT)
            os.kill(os.getpid(), signal.SIGINT)  # asked again: now
            done.append("not reached")
        assert done == ["saved"]
        assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
    finally:
        signal.signal(signal.SIGINT, previous)


def test_a_preemption_and_a_stop_in_one_save_reach_both_handlers(recorded):
    """Only the first signal held was handled: SIGINT then the preemption signal lost the
    requeue (diff review). The preemption handler goes first."""
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        with pytest.raises(KeyboardInterrupt), save_signals_held():
            os.kill(os.getpid(), signal.SIGINT)
            os.kill(os.getpid(), signal.SIGUSR1)  # the preemption signal (fixture)
        assert recorded == [signal.SIGUSR1]
    finally:
        signal.signal(signal.SIGINT, previous)


def test_a_sigterm_handler_that_does_not_stop_the_run_is_not_held():
    """submitit's SIGTERM handler logs and goes on: holding it said "SIGTERM again stops at
    once", which it does not (diff review)."""
    got = []

    def bypass(signum, frame):
        got.append(signum)

    previous = signal.signal(signal.SIGTERM, bypass)
    try:
        with save_signals_held():
            os.kill(os.getpid(), signal.SIGTERM)
            assert got == [signal.SIGTERM]  # handled in the block, as before
    finally:
        signal.signal(signal.SIGTERM, previous)


def test_a_preemption_signal_named_term_is_held_as_the_preemption(monkeypatch):
    """submitit's handler sits on its preemption signal, which may be TERM: it was not held
    (not a handler that stops the run), so its requeue exit landed inside the save (review)."""
    monkeypatch.setenv("SUBMITIT_PREEMPT_SIGNAL", "TERM")
    got = []

    def requeue(signum, frame):
        got.append(signum)

    previous = signal.signal(signal.SIGTERM, requeue)
    try:
        for _ in range(2):  # held each time
            with save_signals_held():
                os.kill(os.getpid(), signal.SIGTERM)
                assert got == []  # held: the save goes on
            assert got == [signal.SIGTERM]
            got.clear()
    finally:
        signal.signal(signal.SIGTERM, previous)


def test_a_stop_asked_again_is_handled_once_and_the_entry_points_sigterm_is_held(monkeypatch):
    """Asked again (more than a second later), the stop went to its handler at once and again
    when the block ended (review); the entry point's SIGTERM handler is one that stops the
    run, so it is held during a save."""
    from dlrm_exp import cli
    from dlrm_exp.distributed import preemption
    from dlrm_exp.errors import Terminated

    if signal.getsignal(signal.SIGTERM) is not signal.SIG_DFL:
        pytest.skip("SIGTERM has a handler here")
    monkeypatch.delenv("MASTER_ADDR", raising=False)
    with cli._stop_on_sigterm():
        assert preemption.stops_the_run(signal.getsignal(signal.SIGTERM))
        with pytest.raises(Terminated), save_signals_held():
            os.kill(os.getpid(), signal.SIGTERM)
            done = "saved"  # held: the block goes on
        assert done == "saved"
    calls = []

    def stop(signum, frame):
        calls.append(signum)
        raise Terminated(signum)

    stop.stops_the_run = True
    previous = signal.signal(signal.SIGTERM, stop)
    monkeypatch.setattr(preemption, "_SAME_REQUEST_S", -1.0)
    try:
        with pytest.raises(Terminated), save_signals_held():
            os.kill(os.getpid(), signal.SIGTERM)
            os.kill(os.getpid(), signal.SIGTERM)  # asked again: now
        assert calls == [signal.SIGTERM]  # once
    finally:
        signal.signal(signal.SIGTERM, previous)
