"""``ensml benchmark`` with ``stations``: station models side by side on stations with a known truth.

A benchmark config with ``stations: N`` (``configs/benchmark/stations.yaml``) compares, on the
observations at N stations of the synthetic data (``synth``, with its station oracle) or of the
physics testbed (``physics``, whose station errors depend on the flow):

* the raw ensemble at the stations: all M members and the K-member subset at the nearest grid
  point, and the subset interpolated bilinearly (2 m temperature moved to the station's height
  where the data have a model orography, as ``evaluate --observations`` does);
* EMOS at stations, ``global`` and ``station``-wise (:mod:`ensml.train.station_emos`), in each
  variable's family;
* the station DRNs of ``models`` (:class:`~ensml.experiments.options.StationModelSpec`: each
  with its predictors and dropped features), fitted as ``ensml fit`` fits a station config
  (:func:`ensml.train.station_fit.fit_station_model`);
* the station oracle (synthetic data only): the exact predictive distribution at each station.

Every row is scored with its family's closed-form CRPS (the raw rows with the ensemble CRPS) on
the same station-times of the test period: those every row covers. Each row's skill over
station-wise EMOS (the usual benchmark of station post-processing) comes with its 95 % interval
(a moving-block bootstrap over init times of each init's CRPS summed over its stations, so that
the skill is exactly 1 - crps / crps of the reference) and the Diebold-Mariano p
(:func:`ensml.scores.significance.skill_test`); with the oracle, ``gap_closed`` is the share of
the raw subset's distance to the oracle that the row closes. ``fit_s`` is each fit's wall time
on ``threads`` torch threads.

Writes ``benchmark.csv`` (every row), ``benchmark.md`` (a table per variable, the verdicts of the
stations issue's targets, the note on the columns) and ``station_skill_<var>.png`` (the best
station model's skill over station-wise EMOS at each station) to ``out_dir``, together at the
end; nothing before every fit is done.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Literal

import numpy as np
import pandas as pd
import torch
import xarray as xr
from jsonargparse.typing import NonNegativeFloat, PositiveInt

from ensml.data.outputs import OutputFolder
from ensml.data.splits import check_periods
from ensml.data.station_frame import StationFrame, build_station_frame
from ensml.data.station_table import PREDICTOR_COLUMNS, station_table
from ensml.data.subset import Subset
from ensml.errors import EnsmlError
from ensml.experiments.benchmark_data import choose_source, ensure_data, kind_of
from ensml.experiments.benchmark_grid_to_point import fit_grid_to_point
from ensml.experiments.benchmark_station_page import REFERENCE, best_model, page
from ensml.experiments.options import (
    GridToPointSpec,
    PhysicsOptions,
    StationModelSpec,
    SynthOptions,
    check_threads,
)
from ensml.names import (
    DEFAULT_K,
    INIT_TIME,
    LATITUDE,
    LEAD_TIME,
    LEVEL,
    LONGITUDE,
    MEMBER,
    STATION,
    family_names,
)
from ensml.progress import Progress, seconds
from ensml.scores import crps_ensemble_array
from ensml.scores.distributions import family_for
from ensml.scores.significance import forecast_horizon, skill_test
from ensml.seeds import Seed
from ensml.times import hours_of
from ensml.train.station_emos import fit_station_emos
from ensml.train.station_fit import fit_station_model, period_inits
from ensml.verify.charts import station_skill_map
from ensml.verify.station_sources import StationOracle, read_station_oracle

#: The row the gap to the oracle is measured from.
RAW_SUBSET = "raw subset ({k}), nearest"
ORACLE = "station oracle"
EMOS_ROWS = {"global": "EMOS, global", "station": REFERENCE}
TABLE, PAGE = "benchmark.csv", "benchmark.md"


def map_name(var: str) -> str:
    """The skill map of ``var``'s best station model."""
    return f"station_skill_{var}.png"


@dataclass
class Row:
    """One forecast of one variable: its CRPS on every (lead, init, station) of the test table,
    the wall time of its fit (None: nothing fitted, the raw rows and the oracle)."""

    name: str
    crps: np.ndarray
    fit_s: float | None = None


def benchmark_stations(
    stations: PositiveInt,
    data_dir: str = "data/benchmark-stations",
    synth: SynthOptions | None = None,
    physics: PhysicsOptions | None = None,
    variables: list[str] = ("t2m", "si10"),  # type: ignore[assignment]
    level: float | None = None,
    k: PositiveInt = DEFAULT_K,
    leads: list[int | str] = (24, 48),  # type: ignore[assignment]
    radius_km: NonNegativeFloat = 800.0,
    train_period: tuple[str, str] = ("2017-01-01", "2019-12-31"),
    test_period: tuple[str, str] = ("2020-01-01", "2020-12-31"),
    emos: list[Literal["global", "station"]] = ("global", "station"),  # type: ignore[assignment]
    models: list[StationModelSpec] | None = None,
    grid_to_point: GridToPointSpec | None = None,
    seed: Seed = 0,
    threads: PositiveInt = 1,
    out_dir: str = "runs/benchmark-stations",
) -> pd.DataFrame:
    """Fit and score every station model; write ``benchmark.csv``, ``benchmark.md`` and the skill maps.

    Parameters
    ----------
    stations
        Observe at this many stations (the data generator's ``stations``): what makes a
        benchmark config a station benchmark.
    data_dir
        Where the data live (generated there if absent, reused while the generator's options
        and the station count match).
    synth
        The synthetic data's options (the default source; ``surface: true`` for 2 m
        temperature, ``precip_wind: true`` for 10 m wind speed at the stations). It has the
        station oracle and a model orography.
    physics
        Instead of ``synth``: the physics testbed's options (``si10`` and ``t`` on levels at
        the stations; no oracle).
    variables
        The observed variables to post-process (default ``t2m`` and ``si10``).
    level
        The pressure level (hPa) of an observed variable on levels (the physics testbed's
        soundings of ``t``).
    k
        The raw subset every model reads: the first ``k`` members.
    leads
        Lead times to fit and score (hours or durations).
    radius_km
        The members' mean and std pooled within this radius are features of the EMOS-free
        models (0: none).
    train_period, test_period
        ``[start, end]`` init dates of the fits and of the scores.
    emos
        The EMOS baselines: ``global`` and ``station``-wise (the reference of every skill:
        keep ``station``).
    models
        The station DRNs (default one, ``station DRN``, with the defaults of ``ensml fit``'s
        station config).
    grid_to_point
        Also the grid-to-point U-Net (:class:`~ensml.experiments.options.GridToPointSpec`): the
        gridded network trained on the CRPS at the stations (none by default).
    seed
        Seed of every DRN's initialisation, validation share and batches.
    threads
        torch CPU threads (keep it fixed when comparing ``fit_s``).
    out_dir
        Output folder: new, empty or an earlier benchmark's; written only at the end.

    Returns
    -------
    pandas.DataFrame
        The table of ``benchmark.csv``.
    """
    source = choose_source(synth, physics, bound=False)
    kind = kind_of(source)
    variables, emos = list(variables), list(emos)
    models = [StationModelSpec("station DRN")] if models is None else list(models)
    names = [TABLE, PAGE, *(map_name(v) for v in variables)]
    OutputFolder.check(out_dir, "benchmark", names=names)  # before the data and the fits
    _check_options(source, kind, variables, k, emos, models, threads, grid_to_point)
    torch.set_num_threads(int(threads))
    periods = check_periods({"train": train_period, "test": test_period})
    paths = ensure_data(Path(data_dir), source, int(stations))
    height = str(paths["orography"]) if "orography" in paths and "t2m" in variables else None
    frame_args = dict(
        variables=variables,
        levels=None if level is None else [level],
        leads=list(leads),
        k=int(k),
        model_height=height,
    )
    predictors = list(dict.fromkeys(p for spec in models for p in spec.predictors))
    frame = build_station_frame(
        str(paths["forecast"]), str(paths["stations"]), **frame_args, predictors=predictors
    )
    bilinear = build_station_frame(
        str(paths["forecast"]), str(paths["stations"]), **frame_args, extraction="bilinear"
    )
    inits = frame.forecast[INIT_TIME].values
    chosen = {name: period_inits(inits, bounds, f"{name}_period") for name, bounds in periods.items()}
    oracle = read_station_oracle(str(paths["stations_oracle"]), frame) if "stations_oracle" in paths else None
    families = family_names(frame.variables, None)
    subset, members = Subset.first(int(k)), int(frame.forecast.sizes[MEMBER])
    steps = 1 + len(emos) + len(models) + (grid_to_point is not None)
    with Progress("benchmark", steps, "steps") as progress:
        progress.describe("station tables")
        table = station_table(frame, subset, radius_km=radius_km or None).load()
        train, test = (table.sel({INIT_TIME: chosen[p]}) for p in ("train", "test"))
        rows = _raw_rows(frame, bilinear, test, chosen, subset, level)
        progress.advance(f"station tables read in {seconds(progress.lap)}")
        fits = Fits(frame, train, test, level, subset, radius_km, int(seed))
        for mode in emos:
            progress.describe(EMOS_ROWS[mode])
            _add(rows, fits.emos(mode, families))
            progress.advance(f"{EMOS_ROWS[mode]} fitted in {seconds(progress.lap)}")
        for spec in models:
            progress.describe(spec.name)
            _add(rows, fits.drn(spec, predictors))
            progress.advance(f"{spec.name} fitted in {seconds(progress.lap)}")
        if grid_to_point is not None:
            progress.describe(grid_to_point.name)
            used = frame if grid_to_point.extraction == "nearest" else bilinear
            _add(rows, fits.grid_to_point(grid_to_point, used, paths, chosen, families))
            progress.advance(f"{grid_to_point.name} trained in {seconds(progress.lap)}")
    if oracle is not None:
        _add(rows, _oracle_rows(oracle, test, level, frame))
    result = _score(rows, test, level, frame, k)
    pictures = {
        map_name(var): _skill_map(rows[var], test, result, var, level, frame, kind) for var in frame.variables
    }
    facts = {
        "source": kind,
        "stations": int(test.sizes[STATION]),
        "k": int(k),
        "members": members,
        "train": chosen["train"],
        "test": chosen["test"],
        "threads": int(threads),
    }
    text = page(result, facts)
    with OutputFolder.open(out_dir, "benchmark", names=names, whole=True) as folder:
        folder.write_text(TABLE, result.to_csv(index=False, float_format="%.6g"))
        folder.write_text(PAGE, text)
        for name, picture in pictures.items():
            if picture is not None:
                folder.write_bytes(name, picture)
    return result


def _add(rows: dict[str, list[Row]], new: dict[str, Row]) -> None:
    """Append each variable's new row."""
    for var, row in new.items():
        rows[var].append(row)


def _raw_rows(
    frame: StationFrame,
    bilinear: StationFrame,
    test: xr.Dataset,
    chosen: dict[str, np.ndarray],
    subset: Subset,
    level: float | None,
) -> dict[str, list[Row]]:
    """The raw rows of every variable: all members and the subset at the nearest grid point, the
    subset interpolated bilinearly; ensemble CRPS on the test table's pairs."""
    k, members = len(subset.members), int(frame.forecast.sizes[MEMBER])
    raw = {
        # the members alone: a frame without the predictors, whose fields the test table has read
        f"raw ensemble ({members}), nearest": _members(
            station_table(replace(frame, predictors=()), Subset.first(members)), chosen
        ),
        RAW_SUBSET.format(k=k): test,
        f"raw subset ({k}), bilinear": _members(station_table(bilinear, subset), chosen),
    }
    rows: dict[str, list[Row]] = {}
    for var in frame.variables:
        y = _obs(test, var, level, frame)
        rows[var] = [Row(name, _ensemble_crps(got, var, level, y, frame)) for name, got in raw.items()]
    return rows


@dataclass(frozen=True)
class Fits:
    """What every fitted row is fitted on (the training table) and scored on (the test table)."""

    frame: StationFrame
    train: xr.Dataset
    test: xr.Dataset
    level: float | None
    subset: Subset
    radius_km: float
    seed: int

    def _row(self, name: str, var: str, family: str, params: dict, took: float) -> Row:
        crps = _family_crps(var, family, params, _obs(self.test, var, self.level, self.frame))
        return Row(name, crps, took)

    def emos(self, mode: str, families: Sequence[str]) -> dict[str, Row]:
        """EMOS at stations (``global`` or ``station``), each variable fitted and timed alone."""
        out = {}
        for var, fam in zip(self.frame.variables, families):
            start = time.perf_counter()
            level = _level(self.frame, var, self.level)
            fitted = fit_station_emos(self.train, var, mode=mode, family=fam, level=level)
            took = time.perf_counter() - start
            out[var] = self._row(EMOS_ROWS[mode], var, fam, fitted.distribution(self.test), took)
        return out

    def drn(self, spec: StationModelSpec, predictors: Sequence[str]) -> dict[str, Row]:
        """A station DRN of ``spec`` (reading its own of the table's ``predictors``); its fit's
        time split evenly over the variables."""
        start = time.perf_counter()
        own = family_names(self.frame.variables, spec.distribution, f"models.{spec.name}.distribution")
        model = fit_station_model(
            self.frame,
            self.train,
            own,
            level=self.level,
            subset=self.subset,
            extraction="nearest",
            radius_km=self.radius_km,
            drop_features=[*spec.drop_features, *_others(predictors, spec.predictors)],
            drn=_drn(spec, self.seed),
        )
        took = (time.perf_counter() - start) / len(self.frame.variables)
        params = model.distribution(self.test, "the test period")
        return {
            var: self._row(spec.name, var, fam, params[var], took)
            for var, fam in zip(self.frame.variables, own)
        }

    def grid_to_point(
        self,
        spec: GridToPointSpec,
        frame: StationFrame,
        paths: dict[str, Path],
        chosen: dict[str, np.ndarray],
        families: Sequence[str],
    ) -> dict[str, Row]:
        """The grid-to-point U-Net on ``frame``'s points; its training time split evenly."""
        k = len(self.subset.members)
        params, took = fit_grid_to_point(spec, paths, frame, chosen, k, self.seed, self.test)
        took /= len(self.frame.variables)
        return {
            var: self._row(spec.name, var, fam, params[var], took)
            for var, fam in zip(self.frame.variables, families)
        }


def _oracle_rows(
    oracle: StationOracle, test: xr.Dataset, level: float | None, frame: StationFrame
) -> dict[str, Row]:
    """The station oracle's row of every variable, in its family."""
    out = {}
    for var in frame.variables:
        y = _obs(test, var, level, frame)
        family = oracle.families[var]
        per_lead = [
            family.crps(
                oracle.parameters(var, lead, y.sel({LEAD_TIME: lead})), y.sel({LEAD_TIME: lead}).values
            )
            for lead in y[LEAD_TIME].values
        ]
        out[var] = Row(f"{ORACLE} ({family.name})", np.stack(per_lead))
    return out


def _check_options(
    source: SynthOptions | PhysicsOptions,
    kind: str,
    variables: list[str],
    k: int,
    emos: list[str],
    models: list[StationModelSpec],
    threads: int,
    grid_to_point: GridToPointSpec | None,
) -> None:
    """The options' own checks, before any data is made or read."""
    check_threads(threads)
    if k > source.members:
        raise EnsmlError(f"cannot take a subset of k={k} members: {kind} makes {source.members} members")
    if not variables:
        raise EnsmlError("benchmark: variables is empty; name the observed variables to post-process")
    if kind == "synth":
        needs = {"t2m": "surface", "si10": "precip_wind", "tp": "precip_wind"}
        off = [
            f"{v} needs synth.{needs[v]}: true"
            for v in variables
            if v in needs and not getattr(source, needs[v])
        ]
        if off:
            raise EnsmlError(f"benchmark: the synthetic stations observe no {variables[0]}: {'; '.join(off)}")
    unknown = [m for m in emos if m not in EMOS_ROWS]
    if unknown or len(set(emos)) != len(emos):
        raise EnsmlError(f"benchmark: emos entries must be distinct, of 'global' and 'station', got {emos}")
    if "station" not in emos:
        raise EnsmlError(
            "benchmark: emos must include 'station': station-wise EMOS is every skill's reference"
        )
    for spec in models:  # each model's families, before any data is made
        family_names(variables, spec.distribution, f"models.{spec.name}.distribution")
    taken = [*EMOS_ROWS.values(), ORACLE, RAW_SUBSET.format(k=k)]
    names = [m.name for m in models] + ([grid_to_point.name] if grid_to_point is not None else [])
    if grid_to_point is not None and not 0 < grid_to_point.val_share < 1:
        raise EnsmlError(
            f"benchmark: grid_to_point.val_share must lie between 0 and 1, got {grid_to_point.val_share}"
        )
    if len(set(names)) != len(names) or any(n in taken or n.startswith("raw ") for n in names):
        raise EnsmlError(
            f"benchmark: station model names must be distinct and not those of the fixed rows, got {names}"
        )


def _drn(spec: StationModelSpec, seed: int) -> dict:
    """The arguments of :func:`ensml.train.drn.fit_drn` a spec gives."""
    return {
        "hidden": [int(w) for w in spec.hidden],
        "embedding_dim": int(spec.embedding_dim),
        "epochs": int(spec.epochs),
        "batch_size": int(spec.batch_size),
        "lr": float(spec.lr),
        "patience": int(spec.patience),
        "seed": int(seed),
    }


def _others(every: Sequence[str], own: Sequence[str]) -> list[str]:
    """The table's columns of the predictors in ``every`` that a model does not read (``own``)."""
    return [f"{p}_{part}" for p in every if p not in own for part in PREDICTOR_COLUMNS]


def _level(frame: StationFrame, var: str, level: float | None) -> float | None:
    """``level`` for a variable on levels, None for a surface one."""
    return level if LEVEL in frame.forecast[var].dims else None


def _at(da: xr.DataArray, frame: StationFrame, var: str, level: float | None) -> xr.DataArray:
    at = _level(frame, var, level)
    return da.sel({LEVEL: at}) if at is not None and LEVEL in da.dims else da


def _obs(test: xr.Dataset, var: str, level: float | None, frame: StationFrame) -> xr.DataArray:
    """The observations of ``var`` on the test table, (lead_time, init_time, station)."""
    return _at(test[f"{var}_obs"], frame, var, level).transpose(LEAD_TIME, INIT_TIME, STATION)


def _members(table: xr.Dataset, chosen: dict[str, np.ndarray]) -> xr.Dataset:
    """The test period of a station table, in memory."""
    return table.sel({INIT_TIME: chosen["test"]}).load()


def _ensemble_crps(
    table: xr.Dataset, var: str, level: float | None, y: xr.DataArray, frame: StationFrame
) -> np.ndarray:
    """The ensemble CRPS of ``table``'s members of ``var`` on ``y``'s pairs (NaN at a station
    the table lacks: bilinear extraction may keep fewer stations)."""
    got = _at(table[var], frame, var, level).transpose(LEAD_TIME, INIT_TIME, STATION, MEMBER)
    got = got.reindex({STATION: y[STATION].values})
    return np.asarray(crps_ensemble_array(got.values, y.values, axis=-1), dtype=np.float64)


def _family_crps(var: str, family: str, params: dict[str, xr.DataArray], y: xr.DataArray) -> np.ndarray:
    """The CRPS of ``var``'s ``family`` with ``params`` (lead_time, init_time, station) on ``y``
    (closed form; the quantile head's by its quantile levels)."""
    values = {p: v.transpose(*y.dims).values for p, v in params.items()}
    return np.asarray(family_for(var, family).crps(values, y.values), dtype=np.float64)


def _common(rows: list[Row], y: xr.DataArray) -> np.ndarray:
    """The (lead, init, station) pairs every row and the observation cover."""
    ok = np.isfinite(y.values)
    for row in rows:
        ok &= np.isfinite(row.crps)
    return ok


def _score(
    rows: dict[str, list[Row]], test: xr.Dataset, level: float | None, frame: StationFrame, k: int
) -> pd.DataFrame:
    """Every row's CRPS, skill over station-wise EMOS (interval, DM p), skill over the raw
    subset and gap closed, by variable and lead, on the pairs every row covers."""
    out = []
    raw = RAW_SUBSET.format(k=k)
    for var, got in rows.items():
        y = _obs(test, var, level, frame)
        ok = _common(got, y)
        by_name = {row.name: row for row in got}
        oracle = next((row for row in got if row.name.startswith(ORACLE)), None)
        for i, lead in enumerate(y[LEAD_TIME].values):
            h = forecast_horizon(lead, y[INIT_TIME].values)
            series = {row.name: _init_sums(row.crps[i], ok[i]) for row in got}
            means = {row.name: float(row.crps[i][ok[i]].mean()) if ok[i].any() else np.nan for row in got}
            for row in got:
                t = skill_test(series[row.name], series[REFERENCE], h)
                gap = means[raw] - means[oracle.name] if oracle is not None else np.nan
                out.append(
                    {
                        "variable": var,
                        "lead_h": int(hours_of(lead)),
                        "forecast": row.name,
                        "n": int(ok[i].sum()),
                        "crps": means[row.name],
                        "skill": t.skill,
                        "skill_low": t.low,
                        "skill_high": t.high,
                        "dm_p": t.p_value,
                        "skill_vs_raw": 1.0 - means[row.name] / means[raw],
                        "gap_closed": (means[raw] - means[row.name]) / gap if gap > 0 else np.nan,
                        "fit_s": by_name[row.name].fit_s,
                    }
                )
    table = pd.DataFrame(out)
    return (
        table
        if any(row.name.startswith(ORACLE) for got in rows.values() for row in got)
        else table.drop(columns="gap_closed")
    )


def _init_sums(crps: np.ndarray, ok: np.ndarray) -> np.ndarray:
    """Each init time's CRPS summed over its covered station-times (NaN: none), the series the
    skill is tested on: their mean's ratio is the ratio of the pooled means."""
    return np.where(ok.any(axis=1), np.where(ok, crps, 0.0).sum(axis=1), np.nan)


def _skill_map(
    rows: list[Row],
    test: xr.Dataset,
    result: pd.DataFrame,
    var: str,
    level: float | None,
    frame: StationFrame,
    kind: str,
) -> bytes | None:
    """The best station model's skill over station-wise EMOS at each station, a map per lead."""
    best = best_model(result, var)
    if best is None:
        return None
    y = _obs(test, var, level, frame)
    ok = _common(rows, y)
    per = []
    for row in rows:
        if row.name not in (best, REFERENCE):
            continue
        count = ok.sum(axis=1)
        mean = np.where(ok, row.crps, 0.0).sum(axis=1) / np.maximum(count, 1)
        for i, lead in enumerate(y[LEAD_TIME].values):
            seen = count[i] > 0
            per.append(
                pd.DataFrame(
                    {
                        "station": y[STATION].values[seen],
                        "latitude": test[LATITUDE].values[seen],
                        "longitude": test[LONGITUDE].values[seen],
                        "lead_h": int(hours_of(lead)),
                        "forecast": row.name,
                        "crps": mean[i][seen],
                    }
                )
            )
    title = f"{var}: CRPS skill of {best} over {REFERENCE} by station"
    return station_skill_map(pd.concat(per, ignore_index=True), best, REFERENCE, title, coast=kind == "synth")


__all__ = ["StationModelSpec", "benchmark_stations", "map_name"]
