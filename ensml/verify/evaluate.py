"""``ensml evaluate``: score raw ensembles, post-processed and spread predictions, and the oracle.

Estimators, stated in every table: raw ensembles get the empirical (standard) ensemble CRPS;
Gaussian predictions (post-processing model, oracle) the closed-form Gaussian CRPS. All means
are weighted by cell area (:func:`ensml.data.weights.area_weights`: exact over latitude on a
regular grid, from the 2-D latitude/longitude on a projected grid, uniform with a note where
the coordinates define no cells) and averaged over the test init times.

The forecast, analysis and every other input are opened, checked and aligned by valid time by
the one frame builder (:func:`ensml.data.frame.build_frame`): each predictions, spread
predictions and members file's run metadata is read back (the kind of model, ``k``, the
leads), the files of one option must come from one run, and every scored variable and lead
must be present. The leads are those of the runs given (every forecast lead but 0 h without
one), scored one lead at a time on one set of init times: those of every input whose valid time
the analysis holds at every scored lead. Skill and gap closed refer to the raw ensemble and the
oracle at the same lead. No NaN or infinite value read for scoring is accepted, which
NaN-skipping means would silently drop (:mod:`ensml.verify.inputs`). Nothing is written before
everything is scored.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd
import xarray as xr
from jsonargparse.typing import PositiveFloat, PositiveInt

from ensml.data.frame import EnsembleFrame, LeadFrame, build_frame
from ensml.data.grid import grid_mapping, horizontal_dims
from ensml.data.outputs import OutputFolder
from ensml.data.runfiles import leads_option
from ensml.names import (
    COORD_ATTRS,
    INIT_TIME,
    LEAD_TIME,
    LEVEL,
    MEMBER,
    VALID_TIME,
    LeadLike,
    format_lead,
    format_leads,
    lead_hours,
    units_of,
)
from ensml.progress import Progress, note, seconds
from ensml.scores.crps import crps_ensemble
from ensml.scores.gaussian import crps_gaussian_xr
from ensml.verify.cases import load_cases
from ensml.verify.casestudy import CaseResult, case_files, score_case
from ensml.verify.inputs import check_complete
from ensml.verify.levels import at, levels_of, table_level
from ensml.verify.tables import Content, score_files, write_files


@dataclass
class Scores:
    """What :func:`evaluate` scored and wrote (the tables as in ``scores.csv`` and ``spread.csv``)."""

    table: pd.DataFrame  # CRPS: a row per lead, variable, level and forecast
    spread: pd.DataFrame | None  # spread estimation, with spread predictions
    n_inits: int
    weighting: str  # how means are weighted (``weighting`` of ``area_weights``)
    leads: np.ndarray  # the leads scored, timedelta64[ns]
    dropped: np.ndarray  # leads some file lacks, left out under ``leads="common"``
    variables: list[str]
    levels: list[float]
    per_point: xr.Dataset  # the per-point scores (``scores.nc``)
    cases: list[CaseResult] = field(default_factory=list)
    out_dir: Path | None = None  # where :func:`evaluate` wrote them

    def files(self) -> dict[str, Content]:
        """The files of ``evaluate`` by name (``scores.*``, ``spread.*``, ``cases/*``)."""
        files = score_files(
            self.table, self.spread, self.per_point, self.n_inits, self.weighting, self.leads_note
        )
        if self.cases:
            files.update({f"cases/{name}": data for name, data in case_files(self.cases).items()})
        return files

    @property
    def leads_note(self) -> str:
        """What was left out of the tables, for their headers ("" when nothing)."""
        if not self.dropped.size:
            return ""
        return f"Leads every file holds: {format_leads(self.leads)}; dropped {format_leads(self.dropped)}."


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
    k: PositiveInt | None = None,
    leads: LeadLike | Sequence[LeadLike] | None = None,
    variables: list[str] | None = None,
    levels: list[PositiveFloat] | None = None,
    out_dir: str = "runs/eval",
    cases: str | list[str] | None = None,
) -> Scores:
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

    Returns
    -------
    Scores
        The CRPS table (one row per lead, variable, level and forecast; skill and gap closed
        relative to the raw ensemble and the oracle at the same lead), the spread table, and
        what they cover.

    Raises
    ------
    EnsmlError
        Before anything is written, naming the file: predictions of the wrong kind or without
        run metadata, files of two runs in one option, a ``k`` that disagrees with the runs, a
        missing variable, level or lead time, no lead time in common, or a NaN or infinite
        value in any value read for scoring; an ``out_dir`` that ensml may not write (a
        non-empty folder without its ledger, a file, the current folder, read-only), checked
        before any work. While writing: a full disk and the like, naming the path; the folder is
        then as it was. Only files that ``evaluate``'s ledger records are replaced or removed
        (:mod:`ensml.data.outputs`).
    """
    names = [
        "scores.csv",
        "scores.md",
        "scores.nc",
        *(["spread.csv", "spread.md"] if spread_predictions else []),
    ]
    names += ["cases/cases.csv", "cases/cases.md"] if cases else []
    OutputFolder.check(out_dir, "evaluate", names=names)  # before the work: fails in seconds
    scores = score(
        forecast, analysis, predictions, spread_predictions, oracle, members, k=k, leads=leads,
        variables=variables, levels=levels, cases=cases,
    )  # fmt: skip
    note(f"evaluate: writing the tables and per-point scores to {out_dir}")
    with OutputFolder.open(out_dir, "evaluate", whole=True) as folder:  # one run's results, whole
        write_files(folder, scores.files())
    scores.out_dir = Path(out_dir)
    return scores


def score(
    forecast: str | list[str],
    analysis: str | list[str],
    predictions: str | list[str] | None = None,
    spread_predictions: str | list[str] | None = None,
    oracle: str | None = None,
    members: str | list[str] | None = None,
    k: int | None = None,
    leads: LeadLike | Sequence[LeadLike] | None = None,
    variables: list[str] | None = None,
    levels: list[float] | None = None,
    cases: str | list[str] | None = None,
) -> Scores:
    """What :func:`evaluate` scores, in memory: nothing is written (see its options)."""
    leads = leads_option(leads)  # a bad lead fails before the cases
    # cases are scored first: a bad case fails before any other work (they are small)
    studies = [score_case(c, forecast, analysis, predictions, oracle, k) for c in load_cases(cases or [])]
    frame = build_frame(
        forecast, analysis, variables=variables, levels=levels, leads=leads, predictions=predictions,
        spread_predictions=spread_predictions, members=members, oracle=oracle,
    )  # fmt: skip
    k = frame.subset_size(k)
    if frame.dropped.size:
        note(f"evaluate: scoring {format_leads(frame.leads)}, the leads every file holds; dropped "
             f"{format_leads(frame.dropped)}")  # fmt: skip
    table, spread, per_point = score_frame(frame, k)
    return Scores(
        table, spread, n_inits=frame.inits.size, weighting=frame.weights.attrs["weighting"],
        leads=frame.leads, dropped=frame.dropped, variables=frame.variables, levels=frame.levels,
        per_point=per_point, cases=studies,
    )  # fmt: skip


def score_frame(frame: EnsembleFrame, k: int) -> tuple[pd.DataFrame, pd.DataFrame | None, xr.Dataset]:
    """The CRPS table, the spread table (or ``None``) and the per-point scores of ``frame``.

    Reads one lead at a time (each value checked complete); a subset of the first ``k`` members
    is scored beside the full ensemble.
    """
    for lead in frame.leads:  # a lead of no whole hours has no row in the tables: fail before the work
        lead_hours(lead)
    rows, spread_rows, per_lead = [], [], []
    progress = Progress("evaluate", len(frame.leads) * len(frame.variables), "fields")
    for lead in frame.leads:
        at_lead = frame.at(lead, check=check_complete)
        fields: dict[str, xr.DataArray] = {}
        for var in frame.variables:
            crps, spread = score_variable(frame, at_lead, var, k, fields)
            rows += crps
            spread_rows += spread
            progress.advance(f"{var} at +{format_lead(lead)} scored in {seconds(progress.lap)}")
        per_lead.append(xr.Dataset(fields))
    progress.close()
    spread_table = pd.DataFrame(spread_rows) if spread_rows else None
    return pd.DataFrame(rows), spread_table, _on_grid(_by_lead(per_lead, frame.leads), frame.forecast)


def score_variable(
    frame: EnsembleFrame, lf: LeadFrame, var: str, k: int, fields: dict[str, xr.DataArray]
) -> tuple[list[dict], list[dict]]:
    """CRPS rows and spread rows of ``var`` at one lead; its per-point fields are added to ``fields``."""
    x, y, m = lf.forecast[var], lf.analysis[var], lf.forecast.sizes[MEMBER]
    point_dims = [d for d in [LEVEL, *horizontal_dims(frame.forecast)] if d in x.dims]
    raw_key = f"raw ensemble ({m} members)"
    sources: dict[str, xr.DataArray] = {
        raw_key: crps_ensemble(x, y, preserve_dims=point_dims),
        f"raw subset ({k} members)": crps_ensemble(
            x.isel({MEMBER: slice(0, k)}), y, preserve_dims=point_dims
        ),
    }
    if "predictions" in lf.runs:
        mu, sd = (lf.runs["predictions"][f"{var}_{p}"] for p in ("mean", "std"))
        sources["post-processed (Gaussian)"] = crps_gaussian_xr(mu, sd, y, preserve_dims=point_dims)
    if "members" in lf.runs:
        calibrated = lf.runs["members"][var]
        sources[f"post-processed members ({calibrated.sizes[MEMBER]})"] = crps_ensemble(
            calibrated, y, preserve_dims=point_dims
        )
    if lf.oracle is not None:
        mu, sd = (lf.oracle[f"{var}_{p}"] for p in ("mean", "std"))
        sources["oracle (Gaussian)"] = crps_gaussian_xr(mu, sd, y, preserve_dims=point_dims)
    for name, crps in sources.items():
        fields[f"crps_{_slug(name)}_{var}"] = crps
    h = lead_hours(lf.lead)
    rows = crps_rows(sources, frame.weights, var, frame.levels, h, raw_key)
    if "spread predictions" not in lf.runs:
        return rows, []
    target, subset = x.std(MEMBER, ddof=0), x.isel({MEMBER: slice(0, k)})
    estimators = {
        f"{k}-member sample std (ddof 1)": subset.std(MEMBER, ddof=1),
        "spread model": lf.runs["spread predictions"][f"{var}_std"],
    }
    for name, est in estimators.items():
        fields[f"spread_rmse_{_slug(name)}_{var}"] = np.sqrt(((est - target) ** 2).mean(INIT_TIME))
    return rows, spread_scores(estimators, target, frame.weights, var, frame.levels, h, m)


def crps_rows(
    sources: dict[str, xr.DataArray],
    weights: xr.DataArray,
    var: str,
    levels: Sequence[float],
    lead_h: int,
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
    lead_h
        The lead time of the rows, hours (the ``lead_h`` column).
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
                "variable": var, "level_hPa": table_level(lev), "lead_h": lead_h,
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
    lead_h: int,
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
                "variable": var, "level_hPa": table_level(lev), "lead_h": lead_h,
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


__all__: Sequence[str] = [
    "Scores",
    "crps_rows",
    "evaluate",
    "score",
    "score_frame",
    "score_variable",
    "spread_scores",
]
