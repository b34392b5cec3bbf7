"""What a run shows: a progress bar on a terminal (a line every 30 s otherwise), then a summary table."""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from typing import Any

from rich.table import Table

from ensml.progress import EVERY_S, Progress


def run_progress(total: int) -> Progress:
    """Units done / failed / remaining while a run goes on."""
    return Progress("postprocess", total, "units", every_s=EVERY_S, failures=True)


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
