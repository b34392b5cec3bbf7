"""``ensml report``: one self-contained verification report (Markdown and HTML with figures)."""

from __future__ import annotations

from ensml.cli.verb import run_function, summary


def report(
    forecast: str | list[str],
    analysis: str | list[str],
    predictions: str | None = None,
    spread_predictions: str | None = None,
    oracle: str | None = None,
    cases: str | list[str] | None = None,
    n_storm_cases: int = 0,
    n_extreme_cases: int = 0,
    k: int = 5,
    lead_hours: int = 48,
    variables: list[str] | None = None,
    levels: list[float] | None = None,
    out_dir: str = "runs/report",
    title: str = "ensml verification report",
    case_variable: str | None = None,
    case_level: float | None = None,
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
        Size of the raw subset scored beside the full ensemble (members 0 … k-1).
    lead_hours
        Lead time of the skill maps, rank histograms, reliability diagrams and automatic case
        studies (h). The global score table covers every lead the predictions hold (every
        forecast lead but 0 h without predictions), and the charts by lead every forecast lead.
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
        The report folder; replaced as a whole when the new report is complete.
    title
        The report's title.
    case_variable
        Variable of the automatic cases (default ``z`` when present, else the first).
    case_level
        Level (hPa) of the automatic cases (default 500 when present, else the first).
    """
    options = dict(locals())
    from ensml.report.assemble import report as assemble

    assemble(**options)


#: The command this module runs, and its function (the help text is its docstring).
COMMANDS = {"report": report}
SUMMARIES = {words: summary(fn) for words, fn in COMMANDS.items()}


def run(args: list[str]) -> None:
    """Run ``ensml report ARGS``."""
    run_function(report, args)
