"""``ensml evaluate``: score raw ensembles, predictions, calibrated members and the oracle by lead time."""

from __future__ import annotations

from typing import Any

from jsonargparse.typing import PositiveFloat, PositiveInt

from ensml.cli.verb import run_function, summary

#: A lead time as a user writes it: hours (``24``) or a duration (``"24h"``, ``"P1D"``).
Lead = int | float | str


def evaluate(
    forecast: str | list[str],
    analysis: str | list[str],
    predictions: str | list[str] | None = None,
    spread_predictions: str | list[str] | None = None,
    oracle: str | None = None,
    members: str | list[str] | None = None,
    k: PositiveInt | None = None,
    leads: Lead | list[Lead] | None = None,
    variables: list[str] | None = None,
    levels: list[PositiveFloat] | None = None,
    out_dir: str = "runs/eval",
    cases: str | list[str] | None = None,
) -> None:
    """Score forecasts at each lead time on the init times of the predictions (or all forecast inits).

    Parameters
    ----------
    forecast
        The raw ensemble forecast (paths or globs).
    analysis
        The verifying analysis (paths or globs).
    predictions
        netCDF written by ``ensml predict`` with a post-processing model, or ``ensml postprocess``
        outputs of a mixed model (files or a glob) (``<var>_mean``, ``<var>_std``): scored with
        the Gaussian CRPS. Every file must hold ensml's run metadata (``ensml_*`` attributes),
        all from one run (one checkpoint); a spread model's file here is an error.
    spread_predictions
        The same from a spread model (``<var>_std``): scored by RMSE and correlation against the
        M-member spread (std, ddof 0), beside the K-member sample std. A post-processing
        model's file here is an error.
    oracle
        The generator's true predictive distribution (``<var>_mean``/``<var>_std`` by init and
        lead, from ``ensml data synth``): the best CRPS any forecast could reach.
    members
        Calibrated members, e.g. the ECC members of ``ensml postprocess`` outputs (files or a
        glob, with run metadata; variables named as in the forecast, with a member dim): scored
        with the empirical ensemble CRPS.
    k
        Size of the raw subset scored beside the full ensemble (members 0 … k-1). Taken from the
        run metadata of the predictions, spread predictions and members; give it only without
        them (default 5), or it must agree with them.
    leads
        Lead times scored: hours (``24``) or durations (``24h``, ``P1D``), one or a list;
        ``common`` for the leads every given file holds (the others are dropped, and the tables
        say so); or unset (default) for the leads of the given predictions, spread predictions
        and members, each of which must then hold every one (else an error names the file and
        the lead), or, with none of them, every lead of the forecast but 0 h. Leads are scored
        one at a time, so memory holds one lead's fields.
    variables
        Score these variables (default: all of the forecast's). Every predictions, members and
        oracle file given must hold each one: a file without one is an error, not a table
        without its rows; pass ``variables`` to score fewer.
    levels
        Score these pressure levels in hPa (default: all of the forecast's).
    out_dir
        Where ``scores.csv``, ``scores.md``, ``spread.csv``, ``spread.md`` (one block of rows per
        lead, column ``lead_h``) and the per-point ``scores.nc`` are written, all together at the
        end. New, empty, or a folder whose ledger (``.ensml/``) records ensml's outputs: a rerun
        replaces only the files that ledger records as evaluate's; any other non-empty folder is
        refused before any work. ``scores.nc`` has a ``lead_time`` dim when more than one lead
        is scored; with one, its fields have none (a scalar ``lead_time``).
    cases
        Case-study YAML files, folders or globs (see :mod:`ensml.verify.cases`): scored per case
        (at each case's own ``lead``) and forecast into ``<out_dir>/cases/`` (``cases.csv``,
        ``cases.md``, one map figure per case), computed before anything is written.
    """
    options = dict(locals())
    from ensml.verify.evaluate import evaluate as score

    print_scores(score(**options))


def print_scores(scores: Any) -> None:  # ensml.verify.evaluate.Scores: not imported for --help
    """Print the CRPS and spread tables with rich (plain text when stdout is not a terminal)."""
    import sys

    from rich.console import Console
    from rich.table import Table

    from ensml.verify.tables import formatted

    console = Console(file=sys.stdout, width=160)
    crps_title = f"CRPS over {scores.n_inits} test init times"
    if scores.leads_note:
        crps_title += f" ({scores.leads_note.rstrip('.')})"
    for title, df in ((crps_title, scores.table), ("Spread estimation", scores.spread)):
        if df is None:
            continue
        table = Table(title=title)
        shown = formatted(df)
        for col in shown.columns:
            table.add_column(str(col), justify="left" if shown[col].dtype == object else "right")
        for row in shown.itertuples(index=False):
            table.add_row(*map(str, row))
        console.print(table)


#: The command this module runs, and its function (the help text is its docstring).
COMMANDS = {"evaluate": evaluate}
SUMMARIES = {words: summary(fn) for words, fn in COMMANDS.items()}


def run(args: list[str]) -> None:
    """Run ``ensml evaluate ARGS``."""
    run_function(evaluate, args)
