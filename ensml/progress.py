"""Progress of long commands: a bar on a terminal, log lines otherwise, nothing under ``--quiet``.

Every ensml command that can run longer than about 30 s reports through :class:`Progress`:

* on a terminal, a rich bar (done / total, failures, elapsed, time left);
* otherwise (a batch job's log, a pipe), one line per unit, or one every ``every_s`` seconds
  when units are many and short, each with the elapsed time and an estimate of what remains::

      benchmark: 3/5 models, U-Net mixed trained in 272 s; 801 s elapsed, about 534 s left

* under ``ensml --quiet`` (:func:`ensml.logs.quiet`), nothing.

:func:`note` prints a one-off line (e.g. what a command is about to do) under the same rules.
"""

from __future__ import annotations

import sys
import threading
import time
from typing import TextIO

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, TextColumn, TimeElapsedColumn, TimeRemainingColumn
from rich.progress import Progress as RichProgress

from ensml.logs import quiet

#: Without a terminal, at most one line per this many seconds for many short units (``every_s``).
EVERY_S = 30.0


def note(message: str, stream: TextIO | None = None) -> None:
    """Print ``message`` on stderr (or ``stream``) unless ``--quiet``."""
    if not quiet():
        print(message, file=stream or sys.stderr, flush=True)


def seconds(s: float) -> str:
    """A duration as people read it: ``42 s``, ``7.5 min``, ``2.1 h``."""
    if s < 120:
        return f"{s:.0f} s"
    return f"{s / 60:.1f} min" if s < 7200 else f"{s / 3600:.1f} h"


class Progress:
    """``total`` units of work named ``unit`` (``"models"``, ``"files"``, ``"epochs"``), for ``what``.

    Parameters
    ----------
    what
        Who is working, the start of every line (``"benchmark"``, ``"ensml synth"``).
    total
        Units to do.
    unit
        Plural name of a unit.
    every_s
        Without a terminal: at most one line per ``every_s`` seconds (0: a line per unit; the
        last unit always gets its line).
    failures
        Count failed units separately (``advance(ok=False)``) and show the count.
    stream
        Where to write; stderr by default.
    start
        Units done before this run (a resumed training's epochs); the estimate of what remains
        uses this run's pace only.

    Use as a context manager, or call :meth:`close` at the end.
    """

    def __init__(
        self,
        what: str,
        total: int,
        unit: str = "steps",
        every_s: float = 0.0,
        failures: bool = False,
        stream: TextIO | None = None,
        start: int = 0,
    ) -> None:
        self.what, self.total, self.unit, self.every_s = what, int(total), unit, every_s
        self.stream = stream or sys.stderr
        self.done, self.failed, self._first = int(start), 0, int(start)
        self.start = self._last_line = self._last_unit = time.monotonic()
        self.silent = quiet() or not self.total
        self._failures = failures
        self._lock = threading.Lock()
        self._bar: RichProgress | None = None
        if not self.silent and self.stream.isatty():
            columns = [TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn()]
            columns += [TextColumn("[red]{task.fields[failed]} failed")] if failures else []
            columns += [TimeElapsedColumn(), TimeRemainingColumn()]
            self._bar = RichProgress(*columns, console=Console(file=self.stream), transient=False)
            self._task = self._bar.add_task(what, total=self.total, completed=self.done, failed=0)
            self._bar.start()

    def __enter__(self) -> Progress:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def describe(self, text: str) -> None:
        """Show what is running now (on the bar; lines report units when they finish)."""
        if self._bar is not None:
            self._bar.update(self._task, description=f"{self.what}: {text}")

    @property
    def lap(self) -> float:
        """Seconds since the previous unit finished (or since the start): the current unit's time."""
        return time.monotonic() - self._last_unit

    def advance(self, detail: str = "", ok: bool = True, n: int = 1) -> None:
        """``n`` units finished (``ok=False``: failed); ``detail`` says what, e.g. how long it took.

        Safe to call from several threads (dask's threaded scheduler).
        """
        with self._lock:
            self._advance(detail, ok, n)

    def _advance(self, detail: str, ok: bool, n: int) -> None:
        self.done += n if ok else 0
        self.failed += 0 if ok else n
        self._last_unit = time.monotonic()
        if self.silent:
            return
        if self._bar is not None:
            self._bar.update(self._task, advance=n, failed=self.failed)
            return
        now = time.monotonic()
        finished = self.done + self.failed
        if now - self._last_line < self.every_s and finished < self.total:
            return
        self._last_line = now
        elapsed = now - self.start
        left = elapsed / max(finished - self._first, 1) * (self.total - finished)
        parts = [f"{self.what}: {finished}/{self.total} {self.unit}"]
        parts += [f" ({self.failed} failed)"] if self._failures else []
        parts += [f", {detail}"] if detail else []
        parts += [f"; {seconds(elapsed)} elapsed"]
        parts += [f", about {seconds(left)} left"] if finished < self.total else [", finished"]
        print("".join(parts), file=self.stream, flush=True)

    def close(self) -> None:
        """Stop the bar (lines need no closing)."""
        if self._bar is not None:
            self._bar.stop()
            self._bar = None


__all__ = ["EVERY_S", "Progress", "note", "seconds"]
