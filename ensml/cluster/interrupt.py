"""SIGINT (Ctrl-C) and SIGTERM (``kill``, ``scancel`` of the job running ensml) during a run.

Python's own Ctrl-C raises :class:`KeyboardInterrupt` wherever the main thread is, which can be
between taking a lock and the ``try`` that releases it: a post-process killed inside xarray's
netCDF writer then hangs for ever in its clean-up. So, for the duration of a run, a signal is
only noted; the run acts on it at the next safe point (:func:`poll`: between units, and about
twice a second while units run on a cluster), raising :class:`KeyboardInterrupt` there, so that
every ``finally`` runs: the jobs the run submitted are cancelled, the manifest keeps what was
completed, temporaries are removed. The run then ends with :class:`~ensml.errors.Interrupted`
(exit status 130 or 143, one line).

A second signal stops the run at once (except while it submits or cancels jobs,
:func:`critical`); a third kills the process with that signal (status 128 + signal; the next run removes what
was left half-written).

dask-jobqueue sets its own SIGINT handler when imported (``sys.exit()``: Ctrl-C would exit with
status 0 and no message), so the guard imports it first and installs its handlers after it;
the handlers found before are restored when the run ends.
"""

from __future__ import annotations

import os
import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from ensml.errors import Interrupted, interrupted_line
from ensml.logs import quiet


def import_jobqueue() -> Any:
    """``dask_jobqueue``, imported without the SIGINT handler that its ``runner`` module installs
    on import (``sys.exit()`` on Ctrl-C, process-wide: a Ctrl-C anywhere later would skip every
    ``except KeyboardInterrupt``). The handler in place before the import is put back."""
    main = threading.current_thread() is threading.main_thread()
    before = signal.getsignal(signal.SIGINT) if main else None
    import dask_jobqueue
    import dask_jobqueue.runner

    if main and before is not None:
        signal.signal(signal.SIGINT, before)
    return dask_jobqueue


SIGNALS = (signal.SIGINT, signal.SIGTERM)


class SignalGuard:
    """SIGINT/SIGTERM handlers for one run (a context manager; main thread only)."""

    def __init__(self, command: str = "postprocess") -> None:
        self.command = command
        self.signum: int | None = None
        self.count = 0  # signals received
        self._critical = 0
        self._raised = False
        self._previous: dict[int, Any] = {}

    def __enter__(self) -> SignalGuard:
        if threading.current_thread() is threading.main_thread():
            for sig in SIGNALS:
                self._previous[sig] = signal.signal(sig, self._handle)
        return self

    def __exit__(self, *exc: object) -> None:
        for sig, handler in self._previous.items():
            signal.signal(sig, signal.SIG_DFL if handler is None else handler)
        self._previous.clear()

    def _handle(self, signum: int, frame: object) -> None:
        self.count += 1
        if self.count == 1:
            self.signum = signum
            if not quiet():  # os.write: print may be busy in the code interrupted
                name = signal.Signals(signum).name
                line = f"{self.command}: {name}: stopping at the next safe point (again: now)\n"
                os.write(2, line.encode())
        elif self.count >= 3:
            # The user insists: die of the signal itself, no clean-up (the shell sees 128 + signal).
            signal.signal(signum, signal.SIG_DFL)
            os.kill(os.getpid(), signum)
        elif not self._critical and not self._raised:
            self._raised = True
            raise KeyboardInterrupt

    def poll(self) -> None:
        """Raise :class:`KeyboardInterrupt` if a signal came and has not been acted on."""
        if self.signum is not None and not self._raised:
            self._raised = True
            raise KeyboardInterrupt

    @contextmanager
    def critical(self) -> Iterator[None]:
        """A block that no second signal interrupts (jobs are submitted or cancelled in it)."""
        self._critical += 1
        try:
            yield
        finally:
            self._critical -= 1


_ACTIVE: list[SignalGuard] = []  # the guard of the run in progress (signal handlers are per process)


@contextmanager
def stopping_on_signals(command: str = "postprocess") -> Iterator[SignalGuard]:
    """A run under a :class:`SignalGuard`: a signal ends it with :class:`Interrupted`.

    A context manager rather than a decorator, so that it is not on the call stack of the
    run's own work (see docs/architecture.md: the spine counts the modules a sample crosses).
    """
    with SignalGuard(command) as guard:
        _ACTIVE.append(guard)
        try:
            yield guard
            guard.poll()  # a signal during a run that had nothing left to poll for
        except KeyboardInterrupt:
            raise interrupted("; run the same command again to finish") from None
        finally:
            _ACTIVE.remove(guard)


@contextmanager
def critical() -> Iterator[None]:
    """:meth:`SignalGuard.critical` of the active guard (nothing without one)."""
    if not _ACTIVE:
        yield
        return
    with _ACTIVE[-1].critical():
        yield


def poll() -> None:
    """:meth:`SignalGuard.poll` of the active guard."""
    if _ACTIVE:
        _ACTIVE[-1].poll()


def interrupted(detail: str) -> Interrupted:
    """The error that ends an interrupted run: ``interrupted (Ctrl-C)`` + ``detail``
    (:func:`~ensml.errors.interrupted_line`, as in every verb)."""
    signum = next((g.signum for g in reversed(_ACTIVE) if g.signum), None) or signal.SIGINT
    return Interrupted(interrupted_line(signum, detail), signum)
