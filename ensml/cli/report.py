"""``ensml report``: one self-contained verification report (Markdown and HTML with figures)."""

from __future__ import annotations

from jsonargparse.typing import NonNegativeInt, PositiveFloat, PositiveInt

from ensml.cli.evaluate import Lead, print_scores
from ensml.cli.verb import run_function, summary


def report(
    forecast: str | list[str],
    analysis: str | list[str],
    predictions: str | list[str] | None = None,
    spread_predictions: str | list[str] | None = None,
    oracle: str | None = None,
    cases: str | list[str] | None = None,
    n_storm_cases: NonNegativeInt = 0,
    n_extreme_cases: NonNegativeInt = 0,
    k: PositiveInt | None = None,
    leads: Lead | list[Lead] | None = None,
    lead: Lead | None = None,
    variables: list[str] | None = None,
    levels: list[PositiveFloat] | None = None,
    out_dir: str = "runs/report",
    title: str = "ensml verification report",
    case_variable: str | None = None,
    case_level: PositiveFloat | None = None,
) -> None:
    """Write the verification report (``report.md`` + ``figures/``, and ``report.html``).

    Parameters
    ----------
    forecast
        The raw ensemble forecast (paths or globs).
    analysis
        The verifying analysis (paths or globs).
    predictions
        Mixed-model predictions (``<var>_mean``, ``<var>_std``), as for ``ensml evaluate``.
    spread_predictions
        Spread-model predictions (``<var>_std``), as for ``ensml evaluate``.
    oracle
        The generator's true predictive distribution (``ensml data synth``'s ``oracle.nc``).
    k
        Size of the raw subset scored beside the full ensemble (members 0 … k-1), as for
        ``ensml evaluate``: the predictions' run metadata gives it.
    leads
        Lead times of the global score table, as for ``ensml evaluate`` (default: every lead the
        predictions hold; ``common`` for those all given files hold). The charts by lead cover
        every forecast lead.
    lead
        Lead time of the skill maps, rank histograms, reliability diagrams and automatic case
        studies: hours (``48``) or a duration (``48h``, ``P2D``); default: the last lead of the
        global score table.
    variables
        Variables to report (default: all of the forecast's).
    levels
        Pressure levels to report, hPa (default: all of the forecast's).
    cases
        Case-study YAML files, folders or globs (:mod:`ensml.verify.cases`).
    n_storm_cases
        Also study this many stored storms of the synthetic ``oracle`` (strongest first).
    n_extreme_cases
        Also study this many dates/boxes found automatically where the analysis exceeds its
        monthly climatological 99% quantile over the largest area.
    out_dir
        The report folder (``report.md``, ``report.html``, ``figures/``, ``tables/``), written
        together at the end: new, empty, or an earlier report's, whose files its ledger
        (``.ensml/``) records; a user's files beside them are kept, any other non-empty folder
        is refused before any work.
    title
        The report's title.
    case_variable
        Variable of the automatic cases (default ``z`` when present, else the first).
    case_level
        Level (hPa) of the automatic cases (default 500 when present, else the first).
    """
    options = dict(locals())
    from ensml.report.assemble import report as assemble

    written = assemble(**options)
    print_scores(written.scores)
    markdown, html = written.pages
    print(f"ensml report: wrote {markdown} and {html}")


#: The command this module runs, and its function (the help text is its docstring).
COMMANDS = {"report": report}
SUMMARIES = {words: summary(fn) for words, fn in COMMANDS.items()}


def run(args: list[str]) -> None:
    """Run ``ensml report ARGS``."""
    run_function(report, args)
