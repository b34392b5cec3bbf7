"""What a run shows: a progress bar on a terminal (a line every 30 s otherwise), then a summary table."""

from __future__ import annotations

import sys
import time
from collections import Counter
from collections.abc import Sequence
from typing import Any, TextIO

from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)
from rich.table import Table

LOG_EVERY_S = 30.0


class RunProgress:
    """Units done / failed / remaining while a run goes on."""

    def __init__(self, total: int, what: str = "postprocess", stream: TextIO | None = None) -> None:
        self.stream = stream or sys.stderr
        self.total, self.what = total, what
        self.done = self.failed = 0
        self.start = self._last_log = time.monotonic()
        self._bar: Progress | None = None
        if self.stream.isatty() and total:
            self._bar = Progress(
                TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                TextColumn("[red]{task.fields[failed]} failed"), TimeElapsedColumn(), TimeRemainingColumn(),
                console=Console(file=self.stream),
            )  # fmt: skip
            self._task = self._bar.add_task(what, total=total, failed=0)
            self._bar.start()

    def advance(self, ok: bool) -> None:
        self.done += ok
        self.failed += not ok
        if self._bar is not None:
            self._bar.update(self._task, advance=1, failed=self.failed)
            return
        now = time.monotonic()
        if now - self._last_log >= LOG_EVERY_S:
            self._last_log = now
            finished = self.done + self.failed
            elapsed = now - self.start
            left = elapsed / finished * (self.total - finished) if finished else float("nan")
            print(
                f"{self.what}: {finished}/{self.total} units ({self.failed} failed), "
                f"{elapsed:.0f} s elapsed, about {left:.0f} s left",
                file=self.stream,
                flush=True,
            )

    def close(self) -> None:
        if self._bar is not None:
            self._bar.stop()
            self._bar = None


def summary(
    records: Sequence[dict[str, Any]], up_to_date: int, elapsed: float, where: str, out: str
) -> tuple[Table, list[str]]:
    """The counts table printed at the end, and one whole line per failed input (never cut short)."""
    status = Counter(r["status"] for r in records)
    inits = sum(r.get("n_inits", 0) for r in records if r["status"] == "done")
    table = Table(title=f"ensml postprocess → {out}", title_justify="left", show_edge=False)
    table.add_column("status")
    table.add_column("units", justify="right")
    table.add_column("detail")
    if status["done"]:
        rate = status["done"] / elapsed if elapsed > 0 else float("nan")
        detail = f"{inits} init times in {elapsed:.1f} s ({rate:.2f} units/s) on {where}"
    else:
        detail = "nothing to do"
    table.add_row("done", str(status["done"]), detail)
    table.add_row("up to date", str(up_to_date), "skipped: output complete and current")
    failed = [r for r in records if r["status"] != "done"]
    table.add_row("failed", str(len(failed)), "reasons below" if failed else "—")
    lines = [f"failed: {r.get('input', r['key'])}: {r.get('reason', '')}" for r in failed]
    return table, lines
