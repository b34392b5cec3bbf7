"""The signal guard of a run: noted, acted on at safe points, escalated, handlers restored."""

from __future__ import annotations

import os
import signal

import pytest

from ensml.cluster.interrupt import SignalGuard, critical, poll, stopping_on_signals
from ensml.errors import SIGNAL_WORDS, Interrupted

pytestmark = pytest.mark.timeout(30)


def _kill(sig: int = signal.SIGINT) -> None:
    os.kill(os.getpid(), sig)  # the handler runs before os.kill returns (main thread)


def test_a_signal_is_noted_then_raised_at_the_next_safe_point() -> None:
    with SignalGuard() as guard:
        _kill(signal.SIGTERM)  # no exception here: inside a library call this could leave a lock held
        assert guard.signum == signal.SIGTERM
        with pytest.raises(KeyboardInterrupt):
            guard.poll()
        guard.poll()  # acted on once


def test_a_second_signal_stops_at_once_except_in_a_critical_block() -> None:
    with SignalGuard() as guard:
        _kill()
        with guard.critical():
            _kill()  # while jobs are cancelled: noted only
        guard = SignalGuard()
    with guard:
        _kill()
        with pytest.raises(KeyboardInterrupt):
            _kill()


def test_the_handlers_before_are_restored_even_after_dask_jobqueue_set_its_own() -> None:
    def mine(signum: int, frame: object) -> None:
        pass

    before = signal.signal(signal.SIGINT, mine)
    try:
        with SignalGuard():  # imports dask-jobqueue, whose import sets a SIGINT handler (sys.exit)
            assert signal.getsignal(signal.SIGINT) not in (mine, signal.default_int_handler)
        assert signal.getsignal(signal.SIGINT) is mine
    finally:
        signal.signal(signal.SIGINT, before)


@pytest.mark.parametrize(("sig", "code"), [(signal.SIGINT, 130), (signal.SIGTERM, 143)])
def test_a_guarded_run_ends_with_interrupted(sig: int, code: int) -> None:
    with pytest.raises(Interrupted) as err, stopping_on_signals():
        _kill(sig)
        with critical():
            pass
        poll()
        raise AssertionError("not stopped")
    assert err.value.exit_code == code
    assert str(err.value) == f"{SIGNAL_WORDS[sig]}; run the same command again to finish"


def test_a_signal_during_a_run_with_nothing_to_poll_still_interrupts() -> None:
    with pytest.raises(Interrupted), stopping_on_signals():
        _kill()
