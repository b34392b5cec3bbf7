"""``ensml evaluate``: score raw ensembles, post-processed and spread predictions, and the oracle.

Estimators, stated in every table: raw ensembles get the empirical (standard) ensemble CRPS;
Gaussian predictions (post-processing model, oracle) the closed-form Gaussian CRPS. All means
are weighted by cell area (:func:`ensml.data.weights.area_weights`: exact over latitude on a
regular grid, from the 2-D latitude/longitude on a projected grid, uniform with a note where
the coordinates define no cells) and averaged over the test init times.

Every lead time the predictions hold is scored (or those asked for), one lead at a time, on one
set of init times: those of every input whose valid time the analysis holds at every scored
lead. Skill and gap closed refer to the raw ensemble and the oracle at the same lead.

Before anything is written, each input file is checked, a failure being one line naming it:
predictions of the kind their option scores (``ensml_task`` of ``ensml postprocess`` files,
else a spread model's files have no ``<var>_mean``), every scored variable and lead time
present, and no NaN or infinite value read for scoring, which NaN-skipping means would
silently drop (:mod:`ensml.verify.inputs`).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pandas as pd
import xarray as xr

from ensml.data.grid import check_same_grid, grid_mapping, horizontal_dims
from ensml.data.open import (
    check_lead_times,
    check_levels,
    check_members,
    open_analysis,
    open_dataset,
    open_forecast,
)
from ensml.data.outdir import check_output_folder, replace_folder
from ensml.data.weights import area_weights
from ensml.errors import EnsmlError
from ensml.names import COORD_ATTRS, INIT_TIME, LEAD_TIME, LEVEL, MEMBER, TIME, VALID_TIME, units_of
from ensml.progress import Progress, note, seconds
from ensml.scores.crps import crps_ensemble
from ensml.scores.gaussian import crps_gaussian_xr
from ensml.verify.cases import load_cases
from ensml.verify.casestudy import score_case, write_cases
from ensml.verify.inputs import check_complete, hours, need, read_at, scan, scored_leads
from ensml.verify.levels import at, at_levels, levels_of, table_level
from ensml.verify.tables import EVALUATE_NAMES, print_table, write_outputs


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
    lead_hours: int | list[int] | None = None,
    variables: list[str] | None = None,
    levels: list[float] | None = None,
    out_dir: str = "runs/eval",
    cases: str | list[str] | None = None,
) -> pd.DataFrame:
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

    Raises
    ------
    EnsmlError
        Before anything is written, naming the file: predictions of the wrong kind, a missing
        variable, level or lead time, no lead time in common, or a NaN or infinite value in any
        value read for scoring (see the module docstring).

    Returns
    -------
    pandas.DataFrame
        The CRPS table (one row per lead, variable, level and forecast; skill and gap closed
        relative to the raw ensemble and the oracle at the same lead).
    """
    # cases are scored first: a bad case fails before any other work (they are small)
    check_output_folder(out_dir, "evaluate", EVALUATE_NAMES)  # before the work, not after
    studies = [score_case(c, forecast, analysis, predictions, oracle, k) for c in load_cases(cases or [])]
    fc = open_forecast(forecast, variables)
    variables = list(variables) if variables else [str(v) for v in fc.data_vars]
    options = (("predictions", predictions), ("spread predictions", spread_predictions), ("members", members))
    given = {what: scan(paths, what, variables) for what, paths in options if paths}  # no data read yet
    an = open_analysis(analysis, variables)
    fc_name, an_name = f"forecast {forecast}", f"analysis {analysis}"
    check_same_grid(fc, an, fc_name, an_name)
    leads = scored_leads(lead_hours, list(given.values()), fc[LEAD_TIME].values)
    check_lead_times(fc, hours(leads), fc_name)
    m = check_members(fc, k, fc_name)
    all_levels = np.atleast_1d(fc[LEVEL].values) if LEVEL in fc.coords else []
    levels = list(levels) if levels is not None else [float(x) for x in all_levels]
    check_levels(fc, levels, fc_name)
    check_levels(an, levels, an_name)

    inits = fc[INIT_TIME].values
    for inp in given.values():
        check_same_grid(fc, inp.coords, fc_name, str(inp))
        check_levels(inp.coords, levels, str(inp))
        inits = np.intersect1d(inits, inp.coords[INIT_TIME].values)
    orc = None
    if oracle:
        orc = open_dataset(oracle, "oracle")
        needed = [need(orc, f"{v}_{s}", oracle, "oracle").name for v in variables for s in ("mean", "std")]
        if LEAD_TIME not in orc.dims:
            raise EnsmlError(
                f"oracle {oracle} has no lead_time dim (found dims: {', '.join(map(str, orc.dims))})"
            )
        check_lead_times(orc, hours(leads), f"oracle {oracle}")
        orc = orc[needed]
        inits = np.intersect1d(inits, orc[INIT_TIME].values)
    for lead in leads:  # one set of init times for every lead: the curves by lead compare alike
        inits = inits[np.isin(inits + lead, an[TIME].values)]
    if inits.size == 0:
        raise EnsmlError(
            f"{fc_name}, {an_name} and the predictions have no init dates in common at "
            f"{', '.join(map(str, hours(leads)))} h"
        )

    level_sel = {LEVEL: levels} if LEVEL in fc.dims else {}  # surface variables have none
    weights = area_weights(fc, what=fc_name)
    rows, spread_rows, per_lead = [], [], []
    progress = Progress("evaluate", len(leads) * len(variables), "fields")
    for lead in leads:
        h = int(lead / np.timedelta64(1, "h"))
        fc_l = fc.sel({INIT_TIME: inits, LEAD_TIME: lead, **level_sel}).load()
        check_complete(fc_l, fc_name)
        obs = an.sel({TIME: inits + lead, **level_sel}).load()
        check_complete(obs, an_name)
        obs = obs.rename({TIME: INIT_TIME}).assign_coords({INIT_TIME: inits})
        read = {what: read_at(inp, lead).sel({INIT_TIME: inits}) for what, inp in given.items()}
        orc_l = None
        if orc is not None:
            orc_l = orc.sel({INIT_TIME: inits, LEAD_TIME: lead, **level_sel}).load()
            check_complete(orc_l, f"oracle {oracle}")
        fields: dict[str, xr.DataArray] = {}
        for var in variables:
            y = obs[var]
            point_dims = [d for d in [LEVEL, *horizontal_dims(fc)] if d in fc_l[var].dims]
            sources: dict[str, xr.DataArray] = {
                f"raw ensemble ({m} members)": crps_ensemble(fc_l[var], y, preserve_dims=point_dims),
                f"raw subset ({k} members)": crps_ensemble(
                    fc_l[var].isel({MEMBER: slice(0, k)}), y, preserve_dims=point_dims
                ),
            }
            if "predictions" in read:
                mu, sd = (at_levels(read["predictions"][f"{var}_{p}"], levels) for p in ("mean", "std"))
                sources["post-processed (Gaussian)"] = crps_gaussian_xr(mu, sd, y, preserve_dims=point_dims)
            if "members" in read:
                calibrated = at_levels(read["members"][var], levels)
                sources[f"post-processed members ({calibrated.sizes[MEMBER]})"] = crps_ensemble(
                    calibrated, y, preserve_dims=point_dims
                )
            if orc_l is not None:
                sources["oracle (Gaussian)"] = crps_gaussian_xr(
                    orc_l[f"{var}_mean"], orc_l[f"{var}_std"], y, preserve_dims=point_dims
                )
            for name, field in sources.items():
                fields[f"crps_{_slug(name)}_{var}"] = field
            rows += crps_rows(sources, weights, var, levels, h, f"raw ensemble ({m} members)")
            if "spread predictions" in read:
                target, subset = fc_l[var].std(MEMBER, ddof=0), fc_l[var].isel({MEMBER: slice(0, k)})
                estimators = {
                    f"{k}-member sample std (ddof 1)": subset.std(MEMBER, ddof=1),
                    "spread model": at_levels(read["spread predictions"][f"{var}_std"], levels),
                }
                for name, est in estimators.items():
                    rmse = np.sqrt(((est - target) ** 2).mean(INIT_TIME))
                    fields[f"spread_rmse_{_slug(name)}_{var}"] = rmse
                spread_rows += spread_scores(estimators, target, weights, var, levels, h, m)
            progress.advance(f"{var} at +{h} h scored in {seconds(progress.lap)}")
        per_lead.append(xr.Dataset(fields))
    progress.close()
    note(f"evaluate: writing the tables and per-point scores to {out_dir}")
    table = pd.DataFrame(rows)
    spread_table = pd.DataFrame(spread_rows) if spread_rows else None
    per_point = _on_grid(_by_lead(per_lead, leads), fc)
    with replace_folder(out_dir, "evaluate", EVALUATE_NAMES) as folder:  # one run's results, whole
        write_outputs(
            folder, table, spread_table, per_point, n_inits=inits.size, weighting=weights.attrs["weighting"]
        )
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
        Area weights (:func:`ensml.data.weights.area_weights`).
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


def _by_lead(per_lead: list[xr.Dataset], leads: np.ndarray) -> xr.Dataset:
    """The per-point fields of each lead: as they are for one lead (a scalar ``lead_time``, the
    layout of a one-lead run), else stacked along a ``lead_time`` dim (timedelta64, CF attrs)."""
    if len(per_lead) == 1:
        return per_lead[0]
    drop = [LEAD_TIME, VALID_TIME]
    stacked = xr.concat(
        [ds.drop_vars(drop, errors="ignore") for ds in per_lead],
        dim=pd.Index(leads.astype("timedelta64[ns]"), name=LEAD_TIME),
        join="exact",
    )
    stacked[LEAD_TIME].attrs.update(COORD_ATTRS[LEAD_TIME])
    return stacked


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
