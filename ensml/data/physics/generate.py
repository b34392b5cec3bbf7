"""``ensml data physics``: an ensemble from a primitive-equation core, verified by a truth run.

Where ``ensml data synth`` draws from a known distribution, this testbed runs a real dynamical
core (:mod:`ensml.data.physics.core`): a Held–Suarez world whose "analysis" is one long truth
run and whose ensemble comes from perturbed initial states run by an imperfect model
(:mod:`ensml.data.physics.runs` states the experiment). The model error is physical, so it
depends on the flow, and no oracle exists: post-processing is judged against the raw ensemble
and EMOS. The files look like the synthetic data's (``forecast.nc``, ``analysis.nc``, the same
names, units and CF attributes), so every verb reads them. ``stations=N`` adds observations of
the truth run at N random stations whose errors depend on the flow
(:mod:`ensml.data.physics.stations`).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

import numpy as np
import pandas as pd
import xarray as xr
from jsonargparse.typing import NonNegativeInt, PositiveInt

from ensml import __version__, names
from ensml.data.outputs import OutputFolder
from ensml.data.outputs.generated import check_generated
from ensml.data.physics import stations as physics_stations
from ensml.data.physics.core import TRUNCATIONS, dinosaur
from ensml.data.physics.runs import TRUTH_WIND, VARIABLES, Plan, core_for, run_all
from ensml.data.station_draw import StationCount
from ensml.data.synth.build import encodings
from ensml.errors import EnsmlError
from ensml.progress import EVERY_S, Progress, note, seconds
from ensml.seeds import Seed, check_seed
from ensml.times import date_after, format_leads, from_hours, hours_of, iso_lead, parse_date, parse_leads

NAMES = ("forecast", "analysis")
#: The single-level variables (no level dimension).
SURFACE = ("si10",)
SI10_NOTE = (
    "physics testbed: wind speed sqrt(u**2 + v**2) of the model's lowest sigma layer, times the "
    "neutral log-law ratio ln(10 m / z0) / ln(z1 / z0) to 10 m over the open sea (z0 = 2e-4 m, "
    "z1 the layer's height); see ensml.data.physics.core.Core.wind_speed"
)
#: Seconds of one core per model day, at T21 with 8 layers: the truth (one state; 30-minute steps)
#: and a forecast member (batched; 60-minute steps, with its share of the overheads).
COST_S = (0.45, 0.13)


def _plan(
    truncation: str,
    layers: int,
    levels: Sequence[int],
    leads: Sequence[int | str],
    members: int,
    inits: int,
    every_hours: int,
    spinup_days: int,
    seed: int,
) -> Plan:
    """The validated options as a :class:`~ensml.data.physics.runs.Plan` (nothing runs yet)."""
    if truncation not in TRUNCATIONS:
        raise EnsmlError(f"physics truncation must be one of {', '.join(TRUNCATIONS)}, got {truncation!r}")
    if not 4 <= layers <= 32:
        raise EnsmlError(f"physics layers must be 4 … 32, got {layers}")
    if not levels or len(set(levels)) != len(levels) or any(not 100 <= p <= 900 for p in levels):
        raise EnsmlError(f"physics levels must be distinct pressures in 100 … 900 hPa, got {list(levels)}")
    lead_ns = parse_leads(leads)
    hours = hours_of(lead_ns)
    if not lead_ns.size or np.any(np.diff(hours) <= 0) or hours[0] < 0 or hours[-1] > 240:
        raise EnsmlError(f"physics leads must be increasing, within 0 … 240 h, got {format_leads(lead_ns)}")
    if np.any(hours != np.round(hours)):
        raise EnsmlError(f"physics leads must be whole hours, got {format_leads(lead_ns)}")
    if spinup_days < 2:
        raise EnsmlError(
            f"physics spinup_days must be at least 2 (its last days make the perturbations), "
            f"got {spinup_days}"
        )
    if members < 2:
        raise EnsmlError(f"physics needs at least 2 members, got members={members}")
    check_seed(seed, "physics: option --seed")
    plan = Plan(
        tuple(int(p) for p in levels),
        tuple(int(h) for h in hours),
        int(every_hours),
        int(inits),
        int(members),
        int(spinup_days),
        int(seed),
    )
    grid = {"truncation": truncation, "layers": int(layers)}
    return replace(plan, truth=replace(plan.truth, **grid), forecast=replace(plan.forecast, **grid))


def physics(
    out_dir: str,
    *,
    truncation: str = "T21",
    layers: PositiveInt = 8,
    levels: Sequence[int] = (500, 850),
    leads: Sequence[int | str] = (0, 12, 24, 36, 48),
    members: PositiveInt = 10,
    start: str = "2000-01-01",
    inits: PositiveInt = 360,
    every_hours: PositiveInt = 24,
    spinup_days: NonNegativeInt = 120,
    seed: Seed = 0,
    stations: StationCount = 0,
    workers: PositiveInt | None = None,
    overwrite: bool = False,
) -> dict[str, Path]:
    """Run a Held–Suarez primitive-equation ensemble and its verifying truth run.

    Writes ``forecast.nc`` (init_time, lead_time, member, level, latitude, longitude) and
    ``analysis.nc`` (the truth by valid time) to ``out_dir``: z (m² s⁻²) and t (K) on pressure
    levels, and the 10 m wind speed si10 (m s⁻¹), a single-level variable (no level dimension):
    the lowest σ layer's wind reduced to 10 m (:meth:`~ensml.data.physics.core.Core.wind_speed`).
    The defaults (T21: 64 × 32 Gaussian grid, 8 σ layers; 360 inits a day apart, 10 members,
    leads 0–48 h every 12 h) take about 10 minutes on 2 cores. Deterministic for a
    seed, whatever ``workers``. Needs the optional extra: ``pip install 'ensml[physics]'``.

    Parameters
    ----------
    out_dir
        Output folder: new, empty or an earlier ``data physics``'s (created if missing).
    truncation
        Spectral truncation of both models: ``T21``, ``T31`` or ``T42``.
    layers
        Equally spaced σ layers, 4 … 32.
    levels
        Pressure levels (hPa, 100 … 900) of the outputs.
    leads
        Lead times, increasing, whole hours up to 240 h (hours or durations such as ``P1D``).
    members
        Ensemble size, at least 2.
    start
        Date of the first init time (the model has no seasons: dates only label the times),
        1677-09-22 … 2262-04-11 (what ``datetime64[ns]`` holds), the last valid time too.
    inits
        Number of init times.
    every_hours
        Hours between init times.
    spinup_days
        Days the truth runs from rest before the first init (about 100 reach its climate).
    seed
        Seed of the spin-up noise and of every initial perturbation, 0 … 2**32 - 1.
    stations
        Also write observations of the truth run at this many random stations (0 … 100,000),
        whose errors depend on the flow (wind direction, stability, a power law of the wind
        speed): ``stations.nc`` (``si10`` at every station, ``t`` on every level at every
        fourth, at 00 and 12 UTC; by valid time, as ``evaluate --observations`` reads it) and
        ``stations_truth.nc`` (each station's parameters, and the truth and noise that made
        each observation); see :mod:`ensml.data.physics.stations`. The stations have their own
        random stream: the grid files are the same bit for bit with or without them.
    workers
        Processes for the forecasts (default: the cores, at most 8); the truth runs beside them.
    overwrite
        Replace an earlier ``data physics``'s outputs in ``out_dir``.

    Returns
    -------
    dict[str, Path]
        ``{"forecast": ..., "analysis": ...}`` paths (with ``stations``, also ``"stations"`` and
        ``"stations_truth"``).

    Raises
    ------
    EnsmlError
        For impossible options, a missing ``dinosaur-torch``, an ``out_dir`` that cannot be
        written or is not ensml's, an earlier dataset there without ``overwrite``, or a failed
        write (one line naming the file). Nothing is written unless every file is complete.
    """
    # the grid files record the runs' options only: the same with or without stations
    options = {k: v for k, v in locals().items() if k not in ("out_dir", "stations", "workers", "overwrite")}
    plan = _plan(truncation, layers, levels, leads, members, inits, every_hours, spinup_days, seed)
    t0 = pd.Timestamp(parse_date(start, "physics: option --start"))
    # the truth runs from the first init to the last init's longest lead: datetime64[ns] must hold it
    span_s = (plan.records - 1) * plan.record_hours * 3600
    date_after(
        t0.to_datetime64(), span_s, "physics: the last valid time (start + the inits + the longest lead)"
    )
    n_workers = int(workers) if workers else max(1, min(8, os.cpu_count() or 1))
    dinosaur()  # the extra is installed, before anything is written
    outputs = NAMES + (physics_stations.STATION_FILES if stations else ())
    check_generated(out_dir, "physics", [f"{n}.nc" for n in outputs], overwrite)
    truth_days = spinup_days + plan.records * plan.record_hours / 24
    forecast_days = inits * members * max(plan.lead_hours) / 24
    parallel = max(1, min(os.cpu_count() or 1, n_workers))
    estimate = (COST_S[0] * truth_days + COST_S[1] * forecast_days) / parallel
    note(
        f"ensml data physics: {truth_days:.0f} truth days and {forecast_days:.0f} member-days of forecasts "
        f"on {n_workers} worker{'s' * (n_workers > 1)}, about {seconds(estimate)} at T21"
    )
    with Progress("ensml data physics", inits, "init times forecast", every_s=EVERY_S) as progress:
        truth, forecast = run_all(plan, n_workers, lambda n: progress.advance(n=n))
    datasets = _datasets(plan, t0, truth, forecast, options)
    if stations:
        datasets |= _station_datasets(datasets["analysis"], truth, options, int(stations))
    return _write(datasets, Path(out_dir), options, int(stations))


def _datasets(
    plan: Plan, t0: pd.Timestamp, truth: dict, forecast: dict, options: dict
) -> dict[str, xr.Dataset]:
    """forecast and analysis as CF datasets in ensml's vocabulary."""
    core = core_for(plan.truth)  # the truth's model (built once per process): its grid's coordinates
    inits = np.datetime64(t0.to_datetime64(), "ns") + from_hours(np.arange(plan.inits) * plan.every_hours)
    leads = from_hours(plan.lead_hours)
    times = inits[0] + from_hours(np.arange(plan.records) * plan.record_hours)
    space = {
        names.LEVEL: np.asarray(plan.levels, dtype="int32"),
        names.LATITUDE: core.latitude,
        names.LONGITUDE: core.longitude,
    }
    members = np.arange(1, plan.members + 1, dtype="int32")
    fc = xr.Dataset(
        {v: (_dims(names.FORECAST_DIMS, v), forecast[v], _attrs(v)) for v in VARIABLES},
        coords={names.INIT_TIME: inits, names.LEAD_TIME: leads, names.MEMBER: members, **space},
    )
    fc = fc.assign_coords(
        {names.VALID_TIME: ((names.INIT_TIME, names.LEAD_TIME), inits[:, None] + leads[None, :])}
    )
    an = xr.Dataset(
        {v: (_dims(names.ANALYSIS_DIMS, v), truth[v], _attrs(v)) for v in VARIABLES},
        coords={names.TIME: times, **space},
    )
    fc.attrs = _global_attrs(options, "ensemble forecast (imperfect model, perturbed initial states)")
    an.attrs = _global_attrs(options, "verifying analysis: the truth run by valid time")
    for ds in (fc, an):
        for name in ds.coords:
            ds[name].attrs.update(names.COORD_ATTRS.get(str(name), {}))
    return {"forecast": fc, "analysis": an}


def _station_datasets(an: xr.Dataset, truth: dict, options: dict, n: int) -> dict[str, xr.Dataset]:
    """``stations`` and ``stations_truth`` for ``n`` stations observing the truth ``an``."""
    horizontal = (names.TIME, names.LATITUDE, names.LONGITUDE)
    wind = xr.Dataset({c: (horizontal, truth[c]) for c in TRUTH_WIND}, coords={d: an[d] for d in horizontal})
    made = physics_stations.station_datasets(int(options["seed"]), n, an, wind)
    what = {
        "stations": "station observations of the truth run by valid time",
        "stations_truth": "what made the station observations: station parameters, truth and noise",
    }
    attrs = {**options, "stations": n}
    for key, ds in made.items():
        ds.attrs = {**_global_attrs(attrs, what[key]), **ds.attrs}
        for name in ds.coords:
            ds[name].attrs.update(names.COORD_ATTRS.get(str(name), {}))
    return made


def _dims(dims: tuple[str, ...], variable: str) -> tuple[str, ...]:
    """``dims``, without the level for the single-level (surface) variables."""
    return tuple(d for d in dims if d != names.LEVEL) if variable in SURFACE else dims


def _attrs(variable: str) -> dict[str, str]:
    """CF attributes of ``variable``; si10's say how it is made."""
    attrs = dict(names.VARIABLE_ATTRS[variable])
    if variable in SURFACE:
        attrs["comment"] = SI10_NOTE
    return attrs


def _global_attrs(options: dict, what: str) -> dict:
    params = {f"physics_{k}": (list(v) if isinstance(v, (tuple, list)) else v) for k, v in options.items()}
    params["physics_leads"] = " ".join(iso_lead(lead) for lead in parse_leads(options["leads"]))
    return {
        "title": f"ensml physics testbed: {what}",
        "institution": "ensml",
        "source": f"ensml {__version__} physics testbed (ensml.data.physics): dinosaur-torch spectral "
        "core with Held-Suarez (1994) forcing",
        "references": "Held and Suarez (1994), BAMS 75, 1825-1830; the experiment: ensml.data.physics.runs",
        "comment": "Verifying analysis of (init_time, lead_time): analysis.sel(time=init_time + lead_time).",
        **params,
    }


def _write(datasets: dict[str, xr.Dataset], out_dir: Path, options: dict, stations: int) -> dict[str, Path]:
    """Every file staged and renamed into place together (a failure leaves the folder as it was).

    The grid files' history names the runs' options only (as without stations); the station
    files' adds ``stations``.
    """

    def history(opts: dict) -> str:
        return "physics(" + ", ".join(f"{k}={v!r}" for k, v in opts.items()) + f", out_dir={str(out_dir)!r})"

    paths, encoding = {key: out_dir / f"{key}.nc" for key in datasets}, encodings(datasets)
    with OutputFolder.open(out_dir, "physics", names=[p.name for p in paths.values()], whole=True) as folder:
        for key, ds in datasets.items():
            opts = options if key in NAMES else {**options, "stations": stations}
            folder.write_netcdf(ds, paths[key].name, encoding[key], history=history(opts))
    return paths


__all__ = ["physics"]
