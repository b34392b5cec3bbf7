"""``ensml evaluate``: score raw ensembles, post-processed and spread predictions, and the oracle.

Estimators, stated in every table: raw ensembles get the empirical (standard) ensemble CRPS;
Gaussian predictions (post-processing model, oracle) the closed-form Gaussian CRPS. All means
are weighted by cell area (:func:`ensml.eval.weights.area_weights`: exact over latitude on a
regular grid, from the 2-D latitude/longitude on a projected grid, uniform with a note where
the coordinates define no cells) and averaged over the test init times.

Before anything is written, each input file is checked, a failure being one line naming it:
predictions of the kind their option scores (``ensml_task`` of ``ensml postprocess`` files,
else a spread model's files have no ``<var>_mean``), every scored variable present, and no
NaN or infinite value read for scoring, which NaN-skipping means would silently drop
(:mod:`ensml.eval.inputs`).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pandas as pd
import xarray as xr

from ensml.data.grid import grid_mapping, horizontal_dims
from ensml.data.io import (
    check_lead_times,
    check_levels,
    check_members,
    check_same_grid,
    load_dataset,
    open_analysis,
    open_dataset,
    open_forecast,
)
from ensml.data.outdir import check_output_folder, replace_folder
from ensml.errors import EnsmlError
from ensml.eval.cases import load_cases
from ensml.eval.casestudy import score_case, write_cases
from ensml.eval.crps import crps_ensemble
from ensml.eval.gaussian import crps_gaussian_xr
from ensml.eval.inputs import at_lead, check_complete, need, open_predictions
from ensml.eval.levels import at, at_levels, levels_of, table_level
from ensml.eval.tables import EVALUATE_NAMES, print_table, write_outputs
from ensml.eval.weights import area_weights
from ensml.names import INIT_TIME, LEAD_TIME, LEVEL, MEMBER, TIME, units_of
from ensml.progress import Progress, note, seconds


def _area_mean(x: xr.DataArray, weights: xr.DataArray) -> xr.DataArray:
    dims = [d for d in x.dims if d != LEVEL]
    return x.weighted(weights).mean(dims)


def _weighted_corr(a: xr.DataArray, b: xr.DataArray, weights: xr.DataArray) -> xr.DataArray:
    dims = [d for d in a.dims if d != LEVEL]
    w = weights.broadcast_like(a)
    ma, mb = a.weighted(w).mean(dims), b.weighted(w).mean(dims)
    cov = ((a - ma) * (b - mb)).weighted(w).mean(dims)
    return cov / np.sqrt(((a - ma) ** 2).weighted(w).mean(dims) * ((b - mb) ** 2).weighted(w).mean(dims))


def evaluate(
    forecast: str | list[str],
    analysis: str | list[str],
    predictions: str | list[str] | None = None,
    spread_predictions: str | list[str] | None = None,
    oracle: str | None = None,
    members: str | list[str] | None = None,
    k: int = 5,
    lead_hours: int = 48,
    variables: list[str] | None = None,
    levels: list[float] | None = None,
    out_dir: str = "runs/eval",
    cases: str | list[str] | None = None,
) -> pd.DataFrame:
    """Score forecasts on the init times of the predictions (or all forecast inits).

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
        Lead time scored (h).
    variables
        Score these variables (default: all of the forecast's). Every predictions, members and
        oracle file given must hold each one: a file without one is an error, not a table
        without its rows; pass ``variables`` to score fewer.
    levels
        Score these pressure levels in hPa (default: all of the forecast's).
    out_dir
        Where ``scores.csv``, ``scores.md``, ``spread.csv``, ``spread.md`` and the per-point
        ``scores.nc`` are written (all at the end, each to a temporary name first).
    cases
        Case-study YAML files, folders or globs (see :mod:`ensml.eval.cases`): scored per case
        and forecast into ``<out_dir>/cases/`` (``cases.csv``, ``cases.md``, one map figure per
        case), computed before anything is written.

    Raises
    ------
    EnsmlError
        Before anything is written, naming the file: predictions of the wrong kind, a missing
        variable or level, or a NaN or infinite value in any value read for scoring (see the
        module docstring).

    Returns
    -------
    pandas.DataFrame
        The CRPS table (one row per variable, level and forecast).
    """
    # cases are scored first: a bad case fails before any other work (they are small)
    check_output_folder(out_dir, "evaluate", EVALUATE_NAMES)  # before the work, not after
    studies = [score_case(c, forecast, analysis, predictions, oracle, k) for c in load_cases(cases or [])]
    lead = np.timedelta64(lead_hours, "h").astype("timedelta64[ns]")
    fc = open_forecast(forecast, variables)
    variables = list(variables) if variables else [str(v) for v in fc.data_vars]
    preds = (
        open_predictions(predictions, "predictions", lead, variables, spread=False) if predictions else None
    )
    spreads = None
    if spread_predictions:
        spreads = open_predictions(spread_predictions, "spread predictions", lead, variables, spread=True)
    calibrated = None
    if members:

        def select(ds: xr.Dataset) -> xr.Dataset:
            name = f"members file {ds.encoding.get('source') or members}"
            missing = [v for v in variables if v not in ds.data_vars or MEMBER not in ds[v].dims]
            if missing:
                raise EnsmlError(f"{name} has no {', '.join(missing)} with a member dim")
            ds = at_lead(ds[variables], lead, name).load()
            check_complete(ds, name)
            return ds

        calibrated = load_dataset(members, "members", select)
    an = open_analysis(analysis, variables)
    fc_name, an_name = f"forecast {forecast}", f"analysis {analysis}"
    check_same_grid(fc, an, fc_name, an_name)
    check_lead_times(fc, [lead_hours], fc_name)
    m = check_members(fc, k, fc_name)
    all_levels = np.atleast_1d(fc[LEVEL].values) if LEVEL in fc.coords else []
    levels = list(levels) if levels is not None else [float(x) for x in all_levels]
    check_levels(fc, levels, fc_name)
    check_levels(an, levels, an_name)

    inits = fc[INIT_TIME].values
    given = [("predictions", preds, predictions), ("spread predictions", spreads, spread_predictions)]
    for what, d, path in [*given, ("members", calibrated, members)]:
        if d is not None:
            check_same_grid(fc, d, fc_name, f"{what} {path}")
            check_levels(d, levels, f"{what} {path}")
            inits = np.intersect1d(inits, d[INIT_TIME].values)
    inits = inits[np.isin(inits + lead, an[TIME].values)]
    if inits.size == 0:
        raise EnsmlError(
            f"{fc_name}, {an_name} and the predictions have no init dates in common at {lead_hours} h"
        )

    level_sel = {LEVEL: levels} if LEVEL in fc.dims else {}  # surface variables have none
    fc = fc.sel({INIT_TIME: inits, LEAD_TIME: lead, **level_sel}).load()
    check_complete(fc, fc_name)
    obs = an.sel({TIME: inits + lead, **level_sel}).load()
    check_complete(obs, an_name)
    obs = obs.rename({TIME: INIT_TIME}).assign_coords({INIT_TIME: inits})
    if calibrated is not None:
        calibrated = calibrated.sel({INIT_TIME: inits, **level_sel})
    orc = None
    if oracle:
        orc = open_dataset(oracle, "oracle")
        needed = [need(orc, f"{v}_{s}", oracle, "oracle").name for v in variables for s in ("mean", "std")]
        orc = orc[needed].sel({INIT_TIME: inits, LEAD_TIME: lead, **level_sel}).load()
        check_complete(orc, f"oracle {oracle}")
    weights = area_weights(fc, what=fc_name)

    rows, spread_rows, fields = [], [], {}
    progress = Progress("evaluate", len(variables), "variables")
    for var in variables:
        y = obs[var]
        point_dims = [d for d in [LEVEL, *horizontal_dims(fc)] if d in fc[var].dims]
        sources: dict[str, xr.DataArray] = {
            f"raw ensemble ({m} members)": crps_ensemble(fc[var], y, preserve_dims=point_dims),
            f"raw subset ({k} members)": crps_ensemble(
                fc[var].isel({MEMBER: slice(0, k)}), y, preserve_dims=point_dims
            ),
        }
        if preds is not None:
            mu = at_levels(
                need(preds, f"{var}_mean", predictions, "predictions").sel({INIT_TIME: inits}), levels
            )
            sd = at_levels(
                need(preds, f"{var}_std", predictions, "predictions").sel({INIT_TIME: inits}), levels
            )
            sources["post-processed (Gaussian)"] = crps_gaussian_xr(mu, sd, y, preserve_dims=point_dims)
        if calibrated is not None:
            n = calibrated.sizes[MEMBER]
            sources[f"post-processed members ({n})"] = crps_ensemble(
                calibrated[var], y, preserve_dims=point_dims
            )
        if orc is not None:
            mu = need(orc, f"{var}_mean", oracle, "oracle")
            sd = need(orc, f"{var}_std", oracle, "oracle")
            sources["oracle (Gaussian)"] = crps_gaussian_xr(mu, sd, y, preserve_dims=point_dims)
        for name, field in sources.items():
            fields[f"crps_{_slug(name)}_{var}"] = field
        rows += crps_rows(sources, weights, var, levels, lead_hours, f"raw ensemble ({m} members)")
        if spreads is not None:
            target = fc[var].std(MEMBER, ddof=0)
            estimators = {
                f"{k}-member sample std (ddof 1)": fc[var].isel({MEMBER: slice(0, k)}).std(MEMBER, ddof=1),
                "spread model": at_levels(
                    need(spreads, f"{var}_std", spread_predictions, "spread predictions").sel(
                        {INIT_TIME: inits}
                    ),
                    levels,
                ),
            }
            for name, est in estimators.items():
                fields[f"spread_rmse_{_slug(name)}_{var}"] = np.sqrt(((est - target) ** 2).mean(INIT_TIME))
            spread_rows += spread_scores(estimators, target, weights, var, levels, lead_hours, m)
        progress.advance(f"{var} scored in {seconds(progress.lap)}")
    progress.close()
    note(f"evaluate: writing the tables and per-point scores to {out_dir}")
    table = pd.DataFrame(rows)
    spread_table = pd.DataFrame(spread_rows) if spread_rows else None
    with replace_folder(out_dir, "evaluate", EVALUATE_NAMES) as folder:  # one run's results, whole
        write_outputs(
            folder, table, spread_table, _on_grid(xr.Dataset(fields), fc), n_inits=inits.size,
            weighting=weights.attrs["weighting"],
        )  # fmt: skip
        if studies:
            write_cases(folder / "cases", studies)
    print_table(table, spread_table, n_inits=inits.size)
    return table


def crps_rows(
    sources: dict[str, xr.DataArray],
    weights: xr.DataArray,
    var: str,
    levels: Sequence[float],
    lead_hours: int,
    raw_key: str,
    events: xr.DataArray | None = None,
    oracle_key: str = "oracle (Gaussian)",
) -> list[dict]:
    """Table rows of area-weighted mean CRPS, one per source and level.

    Parameters
    ----------
    sources
        Per-point CRPS fields (level, latitude, longitude, optionally init_time) by forecast
        name; a name with "Gaussian" in it is labelled as scored by the closed form, others as
        empirical.
    weights
        Area weights (:func:`ensml.eval.weights.area_weights`).
    raw_key, oracle_key
        Sources that skill (``1 - crps / crps_raw``) and ``gap_closed``
        (``(crps_raw - crps) / (crps_raw - crps_oracle)``) refer to; no gap without an oracle.
    events
        Optional 0/1 mask (init_time, latitude, longitude) of extreme events (the fields must then
        keep init_time): adds the mean CRPS over event points (``crps_events``) and its skill vs
        ``raw_key`` (``events_skill_vs_raw``).
    """
    means = {name: _area_mean(field, weights) for name, field in sources.items()}
    ev = None
    if events is not None:
        w = (weights * events.astype("float64")).broadcast_like(next(iter(sources.values())))
        ev = {
            name: field.weighted(w).mean([d for d in field.dims if d != LEVEL])
            for name, field in sources.items()
        }
    rows = []
    for name, mean in means.items():
        for lev in levels_of(mean, levels):
            value = float(at(mean, lev))
            raw = float(at(means[raw_key], lev))
            row = {
                "variable": var, "level_hPa": table_level(lev), "lead_h": lead_hours,
                "forecast": name,
                "estimator": "Gaussian closed form" if "Gaussian" in name else "empirical ensemble",
                "crps": value, "units": units_of(var), "skill_vs_raw_ensemble": 1.0 - value / raw,
            }  # fmt: skip
            if oracle_key in means:
                best = float(at(means[oracle_key], lev))
                row["gap_closed"] = (raw - value) / (raw - best) if raw != best else np.nan
            if ev is not None:
                value_ev, raw_ev = (float(at(ev[key], lev)) for key in (name, raw_key))
                row["crps_events"] = value_ev
                row["events_skill_vs_raw"] = 1.0 - value_ev / raw_ev
            rows.append(row)
    return rows


def spread_scores(
    estimators: dict[str, xr.DataArray],
    target: xr.DataArray,
    weights: xr.DataArray,
    var: str,
    levels: Sequence[float],
    lead_hours: int,
    members: int,
) -> list[dict]:
    """Rows of area-weighted RMSE and correlation of spread estimates against ``target``.

    ``target`` is the ``members``-member std (ddof 0); all fields (init_time, level, lat, lon).
    """
    rows = []
    for name, est in estimators.items():
        rmse = np.sqrt(_area_mean((est - target) ** 2, weights))
        corr = _weighted_corr(est, target, weights)
        for lev in levels_of(rmse, levels):
            rows.append({
                "variable": var, "level_hPa": table_level(lev), "lead_h": lead_hours,
                "estimator": name, "target": f"{members}-member std (ddof 0)", "rmse": float(at(rmse, lev)),
                "correlation": float(at(corr, lev)), "units": units_of(var),
            })  # fmt: skip
    return rows


def _on_grid(fields: xr.Dataset, fc: xr.Dataset) -> xr.Dataset:
    """The per-point scores with the forecast's CF grid mapping (projected grids), for other tools' maps."""
    gm = grid_mapping(fc)
    if gm is None:
        return fields
    fields = fields.assign_coords({gm.name: gm.variable})
    for var in fields.data_vars.values():
        var.attrs["grid_mapping"] = str(gm.name)
    return fields


def _slug(name: str) -> str:
    return name.split(" (")[0].replace(" ", "_").replace("-", "_")


__all__: Sequence[str] = ["crps_rows", "evaluate", "spread_scores"]
