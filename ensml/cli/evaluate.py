"""``ensml evaluate``: score raw ensembles, predictions, calibrated members and the oracle by lead time."""

from __future__ import annotations

from typing import Any

from ensml.cli.verb import run_function

#: The command this module runs: its options and help are the library function's.
COMMANDS = {"evaluate": "ensml.verify.evaluate:evaluate"}
#: Columns of scores.csv / scores.md left out of the terminal table (it stays readable at 160).
FILE_ONLY = ("dm_stat", "block_length", "n_scored")
#: Shorter headers in the terminal (the caption says what they are).
SHORT = {"skill_vs_raw_ensemble": "skill", "level_hPa": "hPa", "gap_closed": "gap closed"}
SUMMARIES = {
    "evaluate": "Score forecasts at each lead time on the init times of the predictions "
    "(or all forecast inits)."
}


def run(args: list[str]) -> None:
    """Run ``ensml evaluate ARGS`` and print the tables."""
    scores = run_function(COMMANDS["evaluate"], args)
    if scores is not None:
        print_scores(scores)


def print_scores(scores: Any) -> None:  # ensml.verify.evaluate.Scores: not imported for --help
    """Print the CRPS and spread tables with rich (plain text when stdout is not a terminal)."""
    import sys

    from rich.console import Console
    from rich.table import Table

    from ensml.verify.tables import formatted, weighting_phrase

    console = Console(file=sys.stdout, width=160)
    n = scores.n_inits
    crps_title = f"CRPS over {n} init time{'s' if n != 1 else ''}"
    if scores.leads_note:
        crps_title += f" ({scores.leads_note.rstrip('.')})"
    caption = f"means over the grid: {weighting_phrase(scores.weighting)}"
    if "skill_low" in scores.table:
        caption += (
            "; skill: vs the raw ensemble, its 95% interval a block bootstrap over init times; "
            "dm_p: Diebold-Mariano vs the raw ensemble"
        )
    crps_title = getattr(scores, "title", crps_title)  # station scores say their own
    caption = getattr(scores, "caption", caption)
    for title, df in ((crps_title, scores.table), ("Spread estimation", scores.spread)):
        if df is None:
            continue
        table = Table(title=title, caption=caption)
        shown = formatted(df).drop(columns=list(FILE_ONLY), errors="ignore").rename(columns=SHORT)
        for col in shown.columns:
            table.add_column(str(col), justify="left" if shown[col].dtype == object else "right")
        for row in shown.itertuples(index=False):
            table.add_row(*map(str, row))
        console.print(table)
    fields = getattr(scores, "multivariate", None)
    if fields is not None:
        print_multivariate(console, fields)


def print_multivariate(console: Any, fields: Any) -> None:
    """Print the whole-field scores over the globe (every region is in multivariate.md)."""
    from rich.table import Table

    from ensml.verify.multivariate import shown_table

    shown = shown_table(fields.table())
    shown = shown[shown["region"] == "globe"].drop(columns=["region"])
    table = Table(
        title="Whole fields over the globe",
        caption="skill vs the raw ensemble [95% block-bootstrap interval]; flatness 0: flat "
        "(last column: what a calibrated ensemble shows); every region in multivariate.md",
    )
    for col in shown.columns:
        table.add_column(str(col), justify="left" if col in ("variable", "forecast") else "right")
    for row in shown.itertuples(index=False):
        table.add_row(*map(str, row))
    console.print(table)
