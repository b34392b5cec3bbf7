"""``ensml evaluate``: score raw ensembles, predictions, calibrated members and the oracle by lead time."""

from __future__ import annotations

from ensml.cli.verb import run_function, summary


def evaluate(
    forecast: str | list[str],
    analysis: str | list[str],
    predictions: str | list[str] | None = None,
    spread_predictions: str | list[str] | None = None,
    oracle: str | None = None,
    members: str | list[str] | None = None,
    k: int = 5,
    lead_hours: int | list[int] | None = None,
    variables: list[str] | None = None,
    levels: list[float] | None = None,
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
        the Gaussian CRPS. A spread model's file here is an error.
    spread_predictions
        The same from a spread model (``<var>_std``): scored by RMSE and correlation against the
        M-member spread (std, ddof 0), beside the K-member sample std. A post-processing
        model's file here is an error.
    oracle
        The generator's true predictive distribution (``<var>_mean``/``<var>_std`` by init and
        lead, from ``ensml data synth``): the best CRPS any forecast could reach.
    members
        Calibrated members, e.g. the ECC members of ``ensml postprocess`` outputs (files or a
        glob; variables named as in the forecast, with a member dim): scored with the empirical
        ensemble CRPS.
    k
        Size of the raw subset scored beside the full ensemble (members 0 … k-1).
    lead_hours
        Lead times scored (h): one, a list, or ``None`` (default) for every lead that the given
        predictions, spread predictions and members all hold (a one-lead ``ensml predict`` file
        holds its scalar ``lead_time``), or, with none of them given, every lead of the forecast
        but 0 h. A lead that a given file, the forecast or the oracle lacks is an error. Leads
        are scored one at a time, so memory holds one lead's fields.
    variables
        Score these variables (default: all of the forecast's). Every predictions, members and
        oracle file given must hold each one: a file without one is an error, not a table
        without its rows; pass ``variables`` to score fewer.
    levels
        Score these pressure levels in hPa (default: all of the forecast's).
    out_dir
        Where ``scores.csv``, ``scores.md``, ``spread.csv``, ``spread.md`` (one block of rows per
        lead, column ``lead_h``) and the per-point ``scores.nc`` are written (all at the end,
        each to a temporary name first). ``scores.nc`` has a ``lead_time`` dim when more than
        one lead is scored; with one, its fields have none (a scalar ``lead_time``).
    cases
        Case-study YAML files, folders or globs (see :mod:`ensml.verify.cases`): scored per case
        (at each case's own ``lead_hours``) and forecast into ``<out_dir>/cases/`` (``cases.csv``,
        ``cases.md``, one map figure per case), computed before anything is written.
    """
    options = dict(locals())
    from ensml.verify.evaluate import evaluate as score

    score(**options)


#: The command this module runs, and its function (the help text is its docstring).
COMMANDS = {"evaluate": evaluate}
SUMMARIES = {words: summary(fn) for words, fn in COMMANDS.items()}


def run(args: list[str]) -> None:
    """Run ``ensml evaluate ARGS``."""
    run_function(evaluate, args)
