"""A synthetic ensemble drawn from a known predictive distribution (``ensml data synth``).

The generator writes three netCDF files that look like ENS-10 (forecast, analysis) plus the
truth about them (oracle), so that models and metrics can be tested against exact answers.

The generative model
--------------------
On a state grid of times (every init time and every valid time), the true atmosphere is::

    truth(t) = clim(t) + s(lat) · [ g(t) P(t) + U(t) + n(t) ] + storms(t)

* ``clim``: z and t climatology with an equator-pole gradient, a seasonal cycle, a tropopause
  and a stationary wave (:func:`~ensml.data.synth.fields.climatology`);
* ``s(lat)``: the anomaly scale per variable and level (z' ≈ 1070 m2 s-2 at 500 hPa, 700 at
  850 hPa, t' ≈ 3 K near 50°, a third of that in the tropics) and ``g(t)`` a seasonal factor;
* ``P``: predictable large-scale weather, an AR(1) (Ornstein–Uhlenbeck) sequence of spatially
  correlated fields, e-folding time 5 days, correlation length 25°;
* ``U``: the unpredictable part, an OU process (10 days) whose innovations are scaled by the
  flow-dependent activity ``act(t, x)`` (storm tracks, winter, and a random field that changes
  from day to day);
* ``n``: analysis noise, independent at every time, scaled by ``act`` (0.04 of the anomaly
  scale for z, 0.10 for t);
* ``storms``: about ``storms_per_year``, compact (radius 5–8°) warm-core lows moving along a
  track with a ``sin²`` life cycle of 2.5–4.5 days, intensity ``A0 + B(t)`` where ``B`` is a
  Brownian motion started at genesis (std 0.42 after 2 days).

z and t anomalies are coherent: each is a fixed combination of the same three unit fields,
with z obtained from t hydrostatically (:class:`~ensml.data.synth.fields.VerticalStructure`).

The oracle
----------
What a forecast from ``init`` knows is ``P`` and ``act`` (at all times: they are the
predictable part), the storm tracks and ``A0``, and ``U`` and ``B`` up to ``init``. Given that,
the verifying analysis ``truth(init + lead)`` is exactly Gaussian at every point with::

    mu*     = clim + s (g P + Φ U(init)) + storms with B(init)
    sigma*² = s² (Var[U(valid) | U(init)] + noise²) + profile² env² shape² q (valid - max(init, genesis))

(Φ the product of the AR factors between init and valid). That is ``oracle.nc``: the true
conditional distribution, so ``(analysis - mean) / std`` is standard normal and no forecast
that uses only this information can beat its CRPS. Error variance grows about linearly with
lead (sigma* ~ sqrt(lead) plus the analysis noise).

With ``oracle_members``, ``oracle_members.nc`` holds whole fields drawn from the same conditional
distribution, jointly across the grid, levels, variables and leads: U continued from ``U(init)``
with new innovations, new analysis noise and new storm-intensity increments
(:mod:`~ensml.data.synth.oracle_members`). The analysis is exchangeable with them: they are the
best-possible reference row for multivariate scores (energy and variogram scores, rank
histograms of area means), as oracle.nc is for per-point ones.

The ensemble
------------
``forecast.nc`` holds::

    x_m = mu* - (1 - keep(lead)) storms_known + bias(var, level, lat, lead)
          + alpha(lat) · exp(delta_init) · sigma*_nostorm · eta_m

* a bias growing with lead (about 0.35 sigma* at 48 h, varying with latitude, level and
  variable);
* under-dispersion: alpha = 0.55 in mid-latitudes, 0.7 in the tropics;
* an imperfect but informative flow-dependent spread: ``exp(delta)``, a smooth random field per
  init (std 0.2, 30°), times the oracle's spread without the storm term;
* storms under-represented: the members hold ``keep = 1 - 0.25 · lead/day`` (at least half) of
  the known storm and none of its uncertainty;
* perturbations ``eta_m``: unit z/t-coherent fields, correlation length 8°, an AR(1) across
  lead times (e-folding 48 h), so members are coherent across leads and their spread grows
  with lead because sigma* does.

The 10-member spread is therefore a noisy sample of a smooth field, which 5 members can
estimate better by pooling in space than by their own sample standard deviation.

Measured on the defaults (test year 2020, 48 h, cos-latitude weighted): the raw 10-member
ensemble's CRPS is 25–26% above the oracle's, the first 5 members' 4–5% above the 10-member
ensemble, and a per-point bias correction with a spread factor fitted on 2017–2019 to the
first 5 members alone beats the raw 10 members by about 14%.

Precipitation and wind (``precip_wind``)
----------------------------------------
Two surface variables drawn from the same flow (:mod:`~ensml.data.synth.precip_wind`), each a
function of a latent field, with an exact non-Gaussian oracle:

* ``tp``, 24 h precipitation (kg m-2): ``max(0, X - shift)``, ``X`` gamma. With nothing
  revealed ``X`` has shape 0.8 and mean ``base(lat) sat(act/act_clim · exp(0.7 L - 0.245)) +
  40 A0 env``: storm tracks (more in winter), an ITCZ following the sun, dry subtropics and
  poles, more where ``L``, the low index of P (``-z'`` at 850 hPa), and the activity are high
  (``sat`` caps the factor at 4), and in the storms' known envelopes. ``shift = 0.8 (1 - 0.3
  tanh L)``.
* ``si10``, 10 m wind speed (m s-1): a normal truncated to [0, ∞) of mean ``mu0 = hypot(base(lat),
  0.7 |V_g|)``, ``base`` the trades and westerlies and ``V_g`` the geostrophic wind of the known
  z' at 850 hPa and of the storms (a ring of strong wind around each), scale ``1 + 0.12 mu0``.

What a forecast from ``init`` knows of them beyond these known fields is, at each init that
verifies the same valid time, a *reveal*: U's increment since the previous one (z's
unpredictable part, standardised; the low's for tp, other directions for si10) and, for tp, new
noise (8°). Given it, the verifying analysis is exactly::

    tp   ~ csg0(shape κ(lead), scale θ(init, lead), shift)   κ = 12 at 0 h, 2.42 at 24 h, 1.54 at 48 h
    si10 ~ TN(loc μ(init, lead), scale σ(lead))              σ² = s0² + (s∞² - s0²)(1 - exp(-lead/72 h))

(``s0 = 0.3 + 0.04 mu0``, ``s∞ = 1 + 0.12 mu0``): the analysis has the oracle's distribution
at every init and lead, the same analysis verifying all of them: tp's reveals
multiply the scale by beta variables (the beta–gamma algebra), si10's are Gaussian steps of the
latent tilted by its truncation (drawn exactly through a provisional latent). The last part,
never known, mixes the analysis noise ``n`` with new noise, so neither is a function of z's
error. On the defaults: 56% of points dry (57% poleward of 30°), 3% above 10 kg m-2 (heavy rain
20 times more frequent in storm events than elsewhere), mean 1.3 kg m-2; wind mean 6.1 m s-1,
at most 29.

The members are ``F_b⁻¹(Φ(factor · η))`` for tp (``F_b`` a biased csg0: storms damped as for z,
the scale off by ``exp((-0.05 + 0.35 sin 3 lat) · days)``, the shift ``0.75 - 0.1/day`` of the
oracle's: too much drizzle) and ``|loc_b + scale · factor · η|`` for si10 (``loc_b`` the
oracle's, storms damped, less ``0.15 + 0.25/day`` m s-1: too weak), ``factor`` the z/t members'
under-dispersion and ``η`` the z/t members' own perturbations (their low, mixed with new noise
for tp), so they are coherent with z and t. Measured on the defaults as above (test year 2020,
48 h, cos-latitude weighted, the usual 10-member ensemble CRPS, ``E|X - y| - E|X - X'|/2`` over
the members, against scoringrules' closed forms of the oracle): raw/oracle 1.28 for tp and 1.27
for si10 (1.21 with the fair ensemble CRPS), the first 5 members' 5% above the 10. ``precip_wind``
adds about a quarter to the time (on a loaded 2-core machine: 70 → 86 s, minimum of 3 runs),
170 MB (forecast 444, oracle 105, analysis 47 MB) and 0.5 GB of peak memory.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Literal

import dask
import numpy as np
import pandas as pd
import xarray as xr
from jsonargparse.typing import NonNegativeFloat, PositiveInt, restricted_number_type

from ensml.data.outputs import OutputFolder
from ensml.data.outputs.generated import check_generated
from ensml.data.station_draw import StationCount
from ensml.data.synth.build import SynthConfig, build_datasets, encodings
from ensml.data.synth.stations import STATION_FILES
from ensml.errors import EnsmlError
from ensml.progress import EVERY_S, Progress
from ensml.seeds import Seed, check_seed
from ensml.times import date_after, format_leads, iso_lead, parse_date, parse_leads

NAMES = ("forecast", "analysis", "oracle")
SUFFIXES = {"netcdf": ".nc", "zarr": ".zarr"}


def _validate(cfg: SynthConfig) -> tuple[np.ndarray, np.ndarray]:
    """Check the options; return init times (datetime64[ns]) and lead times (timedelta64[ns])."""
    if cfg.n_lat < 4 or cfg.n_lon < 8:
        raise EnsmlError(f"synth grid {cfg.n_lat} x {cfg.n_lon} is too small: need n_lat >= 4 and n_lon >= 8")
    if cfg.n_lat * cfg.n_lon > 2_000_000:
        raise EnsmlError(f"synth grid {cfg.n_lat} x {cfg.n_lon} is too large (at most 2e6 points)")
    if cfg.members < 2:
        raise EnsmlError(f"synth needs at least 2 members, got members={cfg.members}")
    if not cfg.levels:
        raise EnsmlError("synth needs at least one pressure level (levels is empty)")
    if len(set(cfg.levels)) != len(cfg.levels) or any(not 1 <= p <= 1100 for p in cfg.levels):
        raise EnsmlError(f"synth levels must be distinct pressures in 1..1100 hPa, got {list(cfg.levels)}")
    leads = parse_leads(cfg.leads)
    if not leads.size:
        raise EnsmlError("synth needs at least one lead time (leads is empty)")
    if np.any(np.diff(leads) <= np.timedelta64(0, "ns")):
        raise EnsmlError(f"synth leads must be strictly increasing, got {format_leads(leads)}")
    if cfg.every_days < 1:
        raise EnsmlError(f"synth every_days must be >= 1, got {cfg.every_days}")
    if not (np.isfinite(cfg.storms_per_year) and 0 <= cfg.storms_per_year <= 365):
        raise EnsmlError(f"synth storms_per_year must be in 0..365, got {cfg.storms_per_year}")
    check_seed(cfg.seed, "synth: option --seed")
    if cfg.stations and not (cfg.surface or cfg.precip_wind):
        raise EnsmlError(
            f"synth: stations={cfg.stations} observe the surface variables, and none is written; "
            "add --surface true (t2m) or --precip_wind true (tp, si10)"
        )
    t0, t1 = parse_date(cfg.start, "synth: option --start"), parse_date(cfg.end, "synth: option --end")
    if t1 < t0:
        raise EnsmlError(f"synth date range is empty: end {cfg.end} is before start {cfg.start}")
    inits = pd.date_range(t0, t1, freq=f"{cfg.every_days}D", unit="ns").to_numpy()
    # the analysis runs to the last init's longest lead: a valid time datetime64[ns] must hold
    date_after(
        inits[-1], int(leads[-1] // np.timedelta64(1, "s")), "synth: the last init plus the longest lead"
    )
    return inits, leads


#: The grid sizes and ensemble sizes ``synth`` accepts.
GridSize = restricted_number_type("GridSize", int, [(">=", 4), ("<=", 2000)])
Members = restricted_number_type("Members", int, [(">=", 2), ("<=", 1000)])
#: The numbers of oracle members ``synth`` accepts (0: none).
OracleMembers = restricted_number_type("OracleMembers", int, [(">=", 0), ("<=", 1000)])


def synth(
    out_dir: str,
    *,
    n_lat: GridSize = 32,
    n_lon: GridSize = 64,
    levels: Sequence[int] = (500, 850),
    leads: Sequence[int | str] = (0, 24, 48),
    members: Members = 10,
    start: str = "2017-01-01",
    end: str = "2020-12-31",
    every_days: PositiveInt = 2,
    storms_per_year: NonNegativeFloat = 6.0,
    seed: Seed = 0,
    surface: bool = False,
    precip_wind: bool = False,
    stations: StationCount = 0,
    oracle_members: OracleMembers = 0,
    format: Literal["netcdf", "zarr"] = "netcdf",
    zarr_format: Literal[2, 3] = 3,
    overwrite: bool = False,
) -> dict[str, Path]:
    """Generate a synthetic ensemble with a known predictive distribution.

    Writes ``forecast.nc`` (members), ``analysis.nc`` (the verifying truth by valid time) and
    ``oracle.nc`` (the exact predictive distribution, Gaussian for z and t, and storm masks) to
    ``out_dir``.
    The verifying analysis of forecast (init, lead) is ``analysis.sel(time=init + lead)``.
    The defaults (32 × 64 grid, 731 inits every 2 days in 2017–2020, 3 leads, 10 members,
    2 levels) take about 16 s on 2 cores and 380 MB (forecast 281, oracle 70, analysis 29);
    ``precip_wind`` adds about a quarter to the time and 170 MB. Split train/validation/test by
    year (for example test 2020, validation 2019).

    Parameters
    ----------
    out_dir
        Output folder: new, empty or an earlier synth's (created if missing). A folder holding
        anything ensml did not write is refused, whatever it holds.
    n_lat
        Latitudes, 4 … 2000: cell centres from 90 - 90/n_lat to -(90 - 90/n_lat) degrees, no
        pole rows (32 gives 87.1875 … -87.1875); at most 2e6 grid points in all.
    n_lon
        Longitudes, 4 … 2000: 0 … 360 - 360/n_lon degrees east.
    levels
        Pressure levels in hPa (1..1100), written in this order.
    leads
        Lead times, strictly increasing: hours (``[0, 6, 12]``) or durations (``["0h", "P1D"]``).
    members
        Ensemble size, 2 … 1000.
    start
        First initialisation date (00 UTC), 1677-09-22 … 2262-04-11 (what ``datetime64[ns]`` holds).
    end
        Last possible initialisation date (inclusive); its longest lead must end by 2262-04-11.
    every_days
        Days between initialisations.
    storms_per_year
        Mean number of storms (intense compact warm-core lows) per year, Poisson; at most 365.
    seed
        Random seed, 0 … 2**32 - 1; the same options and seed give the same data.
    surface
        Also write the surface (single-level) variable ``t2m``: the synthetic atmosphere's
        temperature at 1000 hPa, drawn as one more level (its oracle too). ``z`` and ``t`` are
        the same bit for bit with or without it.
    precip_wind
        Also write the surface variables ``tp`` (24 h precipitation, kg m-2) and ``si10`` (10 m
        wind speed, m s-1), tied to the flow, with exact non-Gaussian oracles: ``tp`` censored
        shifted gamma (``tp_shape``, ``tp_scale``, ``tp_shift``), ``si10`` normal truncated to
        [0, ∞) (``si10_loc``, ``si10_scale``). ``z``, ``t`` and ``t2m`` are the same bit for bit
        with or without it.
    stations
        Also write observations at this many random stations (0 … 100,000) of the surface
        variables written (``t2m``, ``tp``, ``si10``; so ``surface`` or ``precip_wind`` is
        needed), with a known truth: ``stations.nc`` (the observations, by valid time, as
        ``evaluate --observations`` reads them), ``stations_oracle.nc`` (their exact predictive
        distribution by init time, lead and station, and each station's known height offset,
        bias, noise and exposure factors) and ``orography.nc`` (the model's orography ``orog``,
        for ``evaluate --model_height``); see :mod:`ensml.data.synth.stations`. The grid files
        are the same bit for bit with or without them.
    oracle_members
        Also write ``oracle_members.nc``: this many members (0 … 1000; 0, none) drawn from the
        exact joint predictive distribution of the analysis given what the oracle knows (whole
        fields, coherent across the grid, levels, variables and leads, as the truth is), ``z``
        and ``t`` (and ``t2m``) laid out as in ``forecast.nc``: a best-possible ensemble for
        multivariate scores (energy and variogram scores, rank histograms of area means); see
        :mod:`ensml.data.synth.oracle_members`. Not tp and si10. The other files are the same
        bit for bit with or without them.
    format
        ``netcdf`` (``forecast.nc`` …) or ``zarr`` (``forecast.zarr`` … stores, zstd-compressed,
        consolidated metadata). Either way a forecast chunk holds one member's field at one
        init and lead (all levels, the whole grid), as a GRIB message does, so a training sample
        decompresses only the members and leads it uses.
    zarr_format
        Zarr store version, 2 or 3 (with ``format: zarr``).
    overwrite
        Replace an earlier synth's outputs in ``out_dir`` (those its ledger lists; the folder
        then holds this run's files only).

    Returns
    -------
    dict[str, Path]
        ``{"forecast": ..., "analysis": ..., "oracle": ...}`` paths (with ``oracle_members``, also
        ``"oracle_members"``; with ``stations``, also ``"orography"``, ``"stations"`` and
        ``"stations_oracle"``).

    Raises
    ------
    EnsmlError
        For impossible options, an ``out_dir`` that cannot be written or is not ensml's, or one
        that already holds an earlier synth's outputs (without ``overwrite``); a write that
        fails (full disk: one line naming the file). Nothing is written unless all three files
        are complete.
    """
    try:
        cfg = SynthConfig(
            n_lat=int(n_lat),
            n_lon=int(n_lon),
            levels=tuple(int(p) for p in levels),
            leads=tuple(iso_lead(lead) for lead in parse_leads(leads)),
            members=int(members),
            start=str(start),
            end=str(end),
            every_days=int(every_days),
            storms_per_year=float(storms_per_year),
            seed=int(seed),
            surface=bool(surface),
            precip_wind=bool(precip_wind),
            stations=int(stations),
        )
        n_oracle = int(oracle_members)
    except (TypeError, ValueError) as err:
        raise EnsmlError(f"synth: invalid option ({err})") from err
    if not 0 <= n_oracle <= 1000:
        raise EnsmlError(f"synth oracle_members must be in 0..1000, got {n_oracle}")
    if format not in SUFFIXES:
        raise EnsmlError(f"synth format must be netcdf or zarr, got {format!r}")
    if zarr_format not in (2, 3):
        raise EnsmlError(f"synth zarr_format must be 2 or 3, got {zarr_format!r}")
    inits, leads = _validate(cfg)
    out_dir = Path(out_dir)
    outputs = NAMES + (("oracle_members",) if n_oracle else ()) + (STATION_FILES if cfg.stations else ())
    names = [f + SUFFIXES[format] for f in outputs]
    check_generated(out_dir, "synth", names, overwrite)
    # Members are drawn lazily, block by block, as the files are written (the oracle's after).
    total, unit = len(inits), "init times drawn and written"
    if n_oracle:
        total, unit = 2 * total, "init times drawn and written (members, then oracle members)"
    with Progress("ensml synth", total, unit, every_s=EVERY_S) as progress:
        datasets = build_datasets(
            cfg, inits, leads, on_progress=lambda n: progress.advance(n=n), oracle_members=n_oracle
        )
        options = {"zarr_format": zarr_format} if format == "zarr" else {}
        extra = {"oracle_members": n_oracle} if n_oracle else {}
        return _write_all(
            datasets, encodings(datasets), out_dir, cfg, dict(zip(outputs, names)), options, extra
        )


def _write_all(
    datasets: dict[str, xr.Dataset],
    encodings: dict,
    out_dir: Path,
    cfg: SynthConfig,
    names: dict[str, str],
    zarr: dict[str, int],
    extra: dict[str, object] | None = None,
) -> dict[str, Path]:
    """Write each dataset as its output of ``names`` (zarr stores with the ``zarr`` options, else netCDF).

    The history names ``cfg`` and ``extra``, options outside it that shaped the outputs.

    The folder is opened whole: every file is staged in its ``.ensml`` and the three are renamed
    into place together at the end, replacing an earlier synth's outputs (and removing those this
    run does not write). A failure or a kill leaves the folder as it was; a rerun finishes or
    discards what a killed run staged.
    """
    options = {**asdict(cfg), **(extra or {})}
    history = "synth(" + ", ".join(f"{k}={v!r}" for k, v in options.items()) + f", out_dir={str(out_dir)!r})"
    paths = {}
    with OutputFolder.open(out_dir, "synth", names=names, whole=True) as folder:
        # Threads, whatever scheduler the caller set up: the member blocks close over big arrays.
        with dask.config.set(scheduler="threads"):
            for key, ds in datasets.items():
                write = folder.write_zarr if zarr else folder.write_netcdf
                write(ds, names[key], encodings[key], history=history, **zarr)
                paths[key] = out_dir / names[key]
    return paths
