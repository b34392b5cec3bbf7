"""``ensml fit --config stations.yaml``: a station DRN from a forecast archive and station observations.

The fit reads the station table (:func:`ensml.data.station_table.station_table`: the raw subset
at every station, init time and lead, the neighbourhood's statistics, the station facts) of the
training period, fits one distributional regression network per variable
(:func:`ensml.train.drn.fit_drn`, early stopping on a seeded share of the training rows) and
writes to ``out_dir``:

* ``station_model.pt``: the networks and everything needed to apply them anywhere
  (:mod:`ensml.train.station_model`); ``ensml postprocess`` reads it;
* ``scores.csv`` (with a test period): the mean CRPS of the raw subset (the K members at the
  station, height-corrected) and of the DRN on the test period, by variable and lead, over the
  station-times both cover, with the DRN's skill.

Nothing is written before the inputs are read and checked and the networks are fitted: a bad
input, a failed fit or Ctrl-C leaves ``out_dir`` as it was. The two files are committed
together.
"""

from __future__ import annotations

import io
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Literal

import numpy as np
import xarray as xr
from jsonargparse.typing import NonNegativeFloat, NonNegativeInt, PositiveFloat, PositiveInt

from ensml.data.heights import STANDARD_LAPSE_RATE, read_model_height
from ensml.data.outputs import OutputFolder
from ensml.data.splits import check_periods
from ensml.data.station_frame import StationFrame, build_station_frame
from ensml.data.station_table import Rows, read_static, station_table, table_rows
from ensml.data.subset import Subset
from ensml.errors import EnsmlError
from ensml.models.drn import NewStationMethod
from ensml.names import (
    DEFAULT_K,
    ELEVATION,
    INIT_TIME,
    LATITUDE,
    LEAD_TIME,
    LEVEL,
    LONGITUDE,
    MEMBER,
    STATION,
    family_names,
)
from ensml.progress import note
from ensml.scores import crps_ensemble_array
from ensml.scores.distributions import family_for
from ensml.seeds import Seed
from ensml.times import format_lead, hours_of
from ensml.train.drn import fit_drn
from ensml.train.station_model import StationModel

COMMAND = "fit"
MODEL_FILE, SCORES_FILE = "station_model.pt", "scores.csv"


@dataclass(frozen=True)
class StationFit:
    """What a station fit wrote: the model, and the test scores (None without a test period)."""

    model: StationModel
    out_dir: Path
    scores: list[dict] | None


def fit_stations(
    forecast: str | list[str],
    observations: str,
    variables: list[str] | None = None,
    level: float | None = None,
    k: PositiveInt = DEFAULT_K,
    leads: list[int | str] | None = None,
    extraction: Literal["nearest", "bilinear"] = "nearest",
    model_height: str | None = None,
    static: str | None = None,
    radius_km: NonNegativeFloat = 0.0,
    predictors: list[str] = [],  # noqa: B006 (jsonargparse shows the default)
    drop_features: list[str] = [],  # noqa: B006
    distribution: dict[str, str] | None = None,
    train_period: tuple[str, str] = ("2017-01-01", "2019-12-31"),
    test_period: tuple[str, str] | None = ("2020-01-01", "2020-12-31"),
    hidden: list[PositiveInt] = [64],  # noqa: B006 (jsonargparse shows the default)
    embedding_dim: NonNegativeInt = 2,
    epochs: PositiveInt = 300,
    batch_size: PositiveInt = 4096,
    lr: PositiveFloat = 5e-3,
    patience: PositiveInt = 20,
    seed: Seed = 0,
    untrained: NewStationMethod = "nearest",
    out_dir: str = "runs/stations",
) -> StationFit:
    """Fit a station model (a DRN with station embeddings) and write it to ``out_dir``.

    Parameters
    ----------
    forecast
        Forecast file(s) or globs: the ensemble archive (netCDF, GRIB, zarr).
    observations
        The stations' observations (CSV or netCDF, as ``evaluate --observations`` reads them).
    variables
        The variables to fit (default: every variable observed that the forecast holds).
    level
        The pressure level (hPa) of observed upper-air variables (one level per model).
    k
        The raw subset: the first ``k`` members.
    leads
        Lead times to fit at (hours or ``24h``, ``P1D``; default every forecast lead but 0 h).
    extraction
        How the grid is read at a station: ``nearest`` grid point or ``bilinear``.
    model_height
        The model's surface height or geopotential on the forecast's grid: 2 m temperature is
        moved to the station's elevation (lapse rate 0.0065 K/m) and the height difference is a
        feature. Kept in the model.
    static
        A file of static fields on the forecast's grid (a land fraction …), taken at the
        stations as features. Kept in the model.
    radius_km
        With a radius, the members' mean and std pooled over the grid points within it are
        features too (0: none).
    predictors
        Further forecast fields the network reads, each as its subset mean at the station and
        the eastward and northward components of its gradient there (the flow: a geopotential's
        gradient is the geostrophic wind): ``z850`` (a variable on levels and its level in
        hPa), ``msl`` (a surface variable).
    drop_features
        Features of the station table to leave out, by name (``[doy_sin, doy_cos]``: the day of
        the year, for a world without seasons such as the physics testbed); the names are
        those of :func:`ensml.data.station_table.table_features`.
    distribution
        The family of each variable (``{tp: csg0}``), default as ``ensml fit``'s: normal for
        temperature, csg0 for precipitation, truncated normal for wind speed; ``bqn`` (or
        ``bqn:<degree>``) is the distribution-free head, a Bernstein quantile function.
    train_period, test_period
        Init dates ``[start, end]`` of the training rows and of the scores (``null``: no scores).
    hidden, embedding_dim, epochs, batch_size, lr, patience, seed, untrained
        The network and its fit (:func:`ensml.train.drn.fit_drn`): hidden widths, embedding
        length, at most ``epochs`` passes in batches of ``batch_size``, Adam's learning rate,
        early stopping after ``patience`` epochs without a better validation CRPS (on 20 % of the
        training rows, drawn by ``seed``), and how stations without history get an embedding
        (``nearest`` trained station, or ``zero``).
    out_dir
        Where ``station_model.pt`` and ``scores.csv`` go: new, empty or an earlier station fit's.
    """
    names = [MODEL_FILE] + ([SCORES_FILE] if test_period is not None else [])
    OutputFolder.check(out_dir, COMMAND, names=names)  # before any reading: a bad folder fails at once
    periods = check_periods({"train": train_period, "test": test_period})
    frame = build_station_frame(
        forecast,
        observations,
        variables=variables,
        levels=None if level is None else [level],
        leads=leads,
        k=k,
        extraction=extraction,
        model_height=model_height,
        predictors=predictors,
    )
    inits = frame.forecast[INIT_TIME].values
    for option, bounds in periods.items():  # before the table is read: a period without inits fails at once
        period_inits(inits, bounds, f"{option}_period")
    families = family_names(frame.variables, distribution, "distribution")
    fields = read_static(static, frame.forecast) if static is not None else {}
    height = (
        read_model_height(model_height, frame.forecast, frame.names["forecast"]) if model_height else None
    )
    subset = Subset.first(k)
    table = station_table(frame, subset, radius_km=radius_km or None, static=fields or None)
    train = table.sel({INIT_TIME: period_inits(inits, periods["train"], "train_period")})
    model = fit_station_model(
        frame,
        train,
        families,
        level=level,
        subset=subset,
        extraction=extraction,
        radius_km=radius_km,
        drop_features=drop_features,
        model_height=height,
        static=fields,
        drn={
            "hidden": [int(w) for w in hidden],
            "embedding_dim": int(embedding_dim),
            "epochs": int(epochs),
            "batch_size": int(batch_size),
            "lr": float(lr),
            "patience": int(patience),
            "seed": int(seed),
            "untrained": untrained,
        },
        fit={"train_period": list(train_period)},
    )
    scores = None
    if test_period is not None:
        test = table.sel({INIT_TIME: period_inits(inits, periods["test"], "test_period")})
        scores = _scores(model, test, level)
    with OutputFolder.open(out_dir, COMMAND, names=names, whole=True) as folder:
        folder.write_bytes(MODEL_FILE, model.to_bytes())
        if scores is not None:
            folder.write_text(SCORES_FILE, _csv(scores))
    return StationFit(model, Path(out_dir), scores)


def fit_station_model(
    frame: StationFrame,
    train: xr.Dataset,
    families: Sequence[str],
    *,
    level: float | None,
    subset: Subset,
    extraction: str,
    radius_km: float,
    drop_features: Sequence[str] = (),
    model_height: xr.DataArray | None = None,
    static: Mapping[str, xr.DataArray] | None = None,
    drn: Mapping[str, Any] | None = None,
    fit: Mapping[str, Any] | None = None,
) -> StationModel:
    """Fit one DRN per variable of ``frame`` on the station table ``train`` (its training rows)
    and return the station model, in memory: what ``fit_stations`` writes, and what
    ``ensml benchmark`` with stations compares.

    ``families``: one per variable; ``subset``, ``extraction``, ``radius_km``, ``model_height``
    and ``static``: what ``train`` was made with (kept in the model so that it can be applied
    anywhere); ``drop_features``: features of the table left out; ``drn``: further arguments of
    :func:`ensml.train.drn.fit_drn` (``hidden``, ``epochs``, ``seed``, ``untrained`` …);
    ``fit``: further facts of the fit to keep in the model (the training period …).
    """
    drn = dict(drn or {})
    surface = tuple(v for v in frame.variables if LEVEL not in frame.forecast[v].dims)
    nets, rows_by_var, features = {}, {}, ()
    for var, fam in zip(frame.variables, families):
        rows = _without(table_rows(train, var, None if var in surface else level), drop_features)
        if rows.dropped:
            note(f"fit: {rows.dropped} station-times of {var} without an observation or a feature left out")
        nets[var] = fit_drn(
            rows.features,
            rows.station,
            rows.obs,
            family=family_for(var, fam),
            n_stations=train.sizes[STATION],
            station_lat=train[LATITUDE].values,
            station_lon=train[LONGITUDE].values,
            **drn,
        )
        features = rows.names
        rows_by_var[var] = {"rows": int(rows.obs.size), "dropped": int(rows.dropped)}
    keep = [c for c in (LATITUDE, LONGITUDE, ELEVATION) if c in train.coords]
    stations = xr.Dataset(
        coords={STATION: train[STATION].values, **{c: (STATION, train[c].values) for c in keep}}
    )
    return StationModel(
        variables=tuple(frame.variables),
        families=tuple(families),
        level=None if len(surface) == len(frame.variables) else float(frame.levels[0]),
        surface=surface,
        k=len(subset.members),
        members=tuple(subset.members),
        ensemble_size=int(frame.forecast.sizes[MEMBER]),
        leads=np.asarray(frame.leads, dtype="timedelta64[ns]"),
        features=tuple(features),
        extraction=extraction,
        radius_km=float(radius_km),
        predictors=tuple(p.key for p in frame.predictors),
        lapse_rate=STANDARD_LAPSE_RATE,
        stations=stations,
        nets=nets,
        untrained=drn.get("untrained", "nearest"),
        model_height=model_height,
        static=dict(static or {}),
        fit={
            **dict(fit or {}),
            "seed": int(drn.get("seed", 0)),
            "hidden": list(drn.get("hidden", [64])),
            "embedding_dim": int(drn.get("embedding_dim", 2)),
            "rows": rows_by_var,
        },
    )


def _without(rows: Rows, drop: Sequence[str]) -> Rows:
    """``rows`` without the features named in ``drop`` (each must be one of them)."""
    unknown = [name for name in drop if name not in rows.names]
    if unknown:
        raise EnsmlError(
            f"drop_features: {', '.join(map(repr, unknown))} is no feature of the station table "
            f"(its features: {', '.join(rows.names)})"
        )
    keep = [i for i, name in enumerate(rows.names) if name not in drop]
    names = tuple(rows.names[i] for i in keep)
    return replace(rows, features=rows.features[:, keep], names=names)


def period_inits(inits: np.ndarray, bounds: tuple, option: str) -> np.ndarray:
    """The init times of ``inits`` within ``bounds``; none is an error naming ``option``."""
    start, end = bounds
    chosen = inits[(inits >= start) & (inits <= end)]
    if chosen.size == 0:
        raise EnsmlError(
            f"{option}: the forecast has no init time from {str(start)[:10]} to {str(end)[:10]} "
            f"(its inits: {str(inits.min())[:10]} to {str(inits.max())[:10]})"
        )
    return chosen


def _scores(model: StationModel, test: xr.Dataset, level: float | None) -> list[dict]:
    """Mean CRPS of the raw subset and the DRN on ``test``, by variable and lead."""
    params = model.distribution(test, "the test period")
    out = []
    for var, fam in zip(model.variables, model.families):
        family = family_for(var, fam)
        at = {} if var in model.surface or LEVEL not in test[var].dims else {LEVEL: level}
        obs = test[f"{var}_obs"].sel(at).transpose(LEAD_TIME, INIT_TIME, STATION).values
        raw = test[var].sel(at).transpose(LEAD_TIME, INIT_TIME, STATION, MEMBER).values
        p = {k: v.transpose(LEAD_TIME, INIT_TIME, STATION).values for k, v in params[var].items()}
        for i, lead in enumerate(test[LEAD_TIME].values):
            ok = np.isfinite(obs[i]) & np.isfinite(raw[i]).all(-1)
            if not ok.any():
                continue
            y = obs[i][ok]
            raw_crps = float(np.mean(crps_ensemble_array(raw[i][ok], y, axis=-1)))
            model_crps = float(np.mean(family.crps({k: v[i][ok] for k, v in p.items()}, y)))
            out.append(
                {
                    "variable": var,
                    "lead_hours": int(hours_of(lead)),
                    "n": int(ok.sum()),
                    "crps_raw": raw_crps,
                    "crps_drn": model_crps,
                    "skill_vs_raw": 1.0 - model_crps / raw_crps if raw_crps > 0 else float("nan"),
                }
            )
            note(f"fit: {var} at {format_lead(lead)}: test CRPS raw {raw_crps:.4g}, DRN {model_crps:.4g}")
    return out


def _csv(rows: list[dict]) -> str:
    import csv

    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, fieldnames=list(rows[0]) if rows else ["variable"], lineterminator="\n")
    writer.writeheader()
    for row in rows:
        writer.writerow({k: f"{v:.6g}" if isinstance(v, float) else v for k, v in row.items()})
    return buffer.getvalue()


__all__ = ["StationFit", "fit_station_model", "fit_stations", "period_inits"]
