"""A synthetic ensemble drawn from a known predictive distribution (``ensml data synth``).

The generator writes three netCDF files that look like ENS-10 (forecast, analysis) plus the
truth about them (oracle), so that models and metrics can be tested against exact answers.

The generative model
--------------------
On a state grid of times (every init time and every valid time), the true atmosphere is::

    truth(t) = clim(t) + s(lat) · [ g(t) P(t) + U(t) + n(t) ] + storms(t)

* ``clim``: z and t climatology with an equator-pole gradient, a seasonal cycle, a tropopause
  and a stationary wave (:func:`~ensml.data.synth_fields.climatology`);
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
with z obtained from t hydrostatically (:class:`~ensml.data.synth_fields.VerticalStructure`).

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
"""

from __future__ import annotations

import itertools
import sys
import uuid
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

import dask
import dask.array as da
import numpy as np
import pandas as pd
import xarray as xr
from tqdm import tqdm

from ensml import __version__, names
from ensml.data import synth_model
from ensml.data.writers import write_netcdf
from ensml.errors import EnsmlError

FILES = ("forecast.nc", "analysis.nc", "oracle.nc")
# Stored values are rounded, far below the local uncertainty, so that zlib can shrink them:
# members to a power-of-two step of at most 1/32 of the designed member spread at that point
# (rounding error std < 1% of the spread; exact ties of 5 members, a zero sample spread,
# become rarer than 1e-8 per point), oracle means to at most 1/256 of sigma*, oracle std to
# 11 significant bits (relative error < 2.5e-4). The analysis is stored as computed (float32).
MEMBER_STEPS_PER_SPREAD = 32
MEAN_STEPS_PER_STD = 256
STD_BITS = 11
BLOCK_INITS = 4  # inits drawn per task while writing (temporaries below 32 MB)


def _quantise(a: np.ndarray, scale: np.ndarray, steps: int) -> None:
    """Round ``a`` in place to multiples of the largest power of two <= ``scale / steps``.

    ``scale`` broadcasts against ``a``; powers of two make the scaling exact in binary, so the
    stored values have trailing zero bits that zlib compresses.
    """
    tiny = np.finfo(a.dtype).tiny
    step = np.exp2(np.floor(np.log2(np.maximum(scale / steps, tiny)))).astype(a.dtype)
    np.divide(a, step, out=a)
    np.round(a, out=a)
    np.multiply(a, step, out=a)


def _round_mantissa(a: np.ndarray, bits: int) -> None:
    """Round positive float32 ``a`` in place to ``bits`` significant mantissa bits."""
    drop = 23 - bits
    u = a.view(np.uint32)
    u += np.uint32(1 << (drop - 1))
    u &= np.uint32(~((1 << drop) - 1) & 0xFFFFFFFF)


@dataclass(frozen=True)
class SynthConfig:
    """Validated generator options (see :func:`synth`)."""

    n_lat: int
    n_lon: int
    levels: tuple[int, ...]
    lead_hours: tuple[int, ...]
    members: int
    start: str
    end: str
    every_days: int
    storms_per_year: float
    seed: int


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
    leads = cfg.lead_hours
    if not leads:
        raise EnsmlError("synth needs at least one lead time (lead_hours is empty)")
    if leads[0] < 0 or any(b <= a for a, b in itertools.pairwise(leads)):
        raise EnsmlError(f"synth lead_hours must be >= 0 and strictly increasing, got {list(leads)}")
    if cfg.every_days < 1:
        raise EnsmlError(f"synth every_days must be >= 1, got {cfg.every_days}")
    if not (np.isfinite(cfg.storms_per_year) and 0 <= cfg.storms_per_year <= 365):
        raise EnsmlError(f"synth storms_per_year must be in 0..365, got {cfg.storms_per_year}")
    if cfg.seed < 0:
        raise EnsmlError(f"synth seed must be >= 0, got {cfg.seed}")
    try:
        t0, t1 = pd.Timestamp(cfg.start), pd.Timestamp(cfg.end)
    except (ValueError, TypeError) as err:
        raise EnsmlError(
            f"synth start/end must be dates like 2017-01-01, got {cfg.start!r}, {cfg.end!r}"
        ) from err
    if t1 < t0:
        raise EnsmlError(f"synth date range is empty: end {cfg.end} is before start {cfg.start}")
    inits = pd.date_range(t0, t1, freq=f"{cfg.every_days}D").to_numpy().astype("datetime64[ns]")
    lead_td = np.asarray(leads, dtype="int64").astype("timedelta64[h]").astype("timedelta64[ns]")
    return inits, lead_td


def _prepare_out_dir(out_dir: Path, overwrite: bool) -> None:
    if out_dir.exists() and not out_dir.is_dir():
        raise EnsmlError(f"synth out_dir {out_dir} exists and is not a directory")
    present = [f for f in FILES if (out_dir / f).exists()]
    if present and not overwrite:
        raise EnsmlError(
            f"synth out_dir {out_dir} already has {', '.join(present)}; pass overwrite=True to replace"
        )


def synth(
    out_dir: str | Path,
    *,
    n_lat: int = 32,
    n_lon: int = 64,
    levels: Sequence[int] = (500, 850),
    lead_hours: Sequence[int] = (0, 24, 48),
    members: int = 10,
    start: str = "2017-01-01",
    end: str = "2020-12-31",
    every_days: int = 2,
    storms_per_year: float = 6.0,
    seed: int = 0,
    overwrite: bool = False,
) -> dict[str, Path]:
    """Generate a synthetic ensemble with a known predictive distribution.

    Writes ``forecast.nc`` (members), ``analysis.nc`` (the verifying truth by valid time) and
    ``oracle.nc`` (the exact Gaussian predictive distribution and storm masks) to ``out_dir``.
    The verifying analysis of forecast (init, lead) is ``analysis.sel(time=init + lead)``.
    The defaults (32 × 64 grid, 731 inits every 2 days in 2017–2020, 3 leads, 10 members,
    2 levels) take about 16 s on 2 cores and 380 MB (forecast 281, oracle 70, analysis 29);
    split train/validation/test by year (for example test 2020, validation 2019).

    Parameters
    ----------
    out_dir
        Output directory, created if missing.
    n_lat
        Number of latitudes: cell centres from 90 - 90/n_lat to -(90 - 90/n_lat) degrees,
        no pole rows (32 gives 87.1875 … -87.1875).
    n_lon
        Number of longitudes: 0 … 360 - 360/n_lon degrees east.
    levels
        Pressure levels in hPa (1..1100), written in this order.
    lead_hours
        Lead times in hours, >= 0 and strictly increasing (for example 0, 6, …, 48).
    members
        Ensemble size, >= 2.
    start
        First initialisation date (00 UTC).
    end
        Last possible initialisation date (inclusive).
    every_days
        Days between initialisations.
    storms_per_year
        Mean number of storms (intense compact warm-core lows) per year, Poisson.
    seed
        Random seed; the same options and seed give the same data.
    overwrite
        Replace existing output files in ``out_dir`` (other files there are left alone).

    Returns
    -------
    dict[str, Path]
        ``{"forecast": ..., "analysis": ..., "oracle": ...}`` paths.

    Raises
    ------
    EnsmlError
        For impossible options or an ``out_dir`` that already holds the outputs. Nothing is
        written unless all three files are complete.
    """
    try:
        cfg = SynthConfig(
            n_lat=int(n_lat),
            n_lon=int(n_lon),
            levels=tuple(int(p) for p in levels),
            lead_hours=tuple(int(h) for h in lead_hours),
            members=int(members),
            start=str(start),
            end=str(end),
            every_days=int(every_days),
            storms_per_year=float(storms_per_year),
            seed=int(seed),
        )
    except (TypeError, ValueError) as err:
        raise EnsmlError(f"synth: invalid option ({err})") from err
    inits, leads = _validate(cfg)
    out_dir = Path(out_dir)
    _prepare_out_dir(out_dir, overwrite)
    quiet = not sys.stderr.isatty()
    with tqdm(total=len(inits), desc="ensml synth", unit="init", leave=False, disable=quiet) as bar:
        datasets = build_datasets(cfg, inits, leads, on_progress=bar.update)
        return _write_all(datasets, _encodings(datasets, cfg), out_dir, cfg)


def _write_all(datasets: dict[str, xr.Dataset], encodings: dict, out_dir: Path, cfg: SynthConfig) -> dict:
    """Write the datasets to a hidden staging directory, then move them into ``out_dir``.

    A failure leaves neither a partial set of files nor a created-but-empty ``out_dir``.
    """
    created = not out_dir.exists()
    out_dir.mkdir(parents=True, exist_ok=True)
    staging = out_dir / f".synth-{uuid.uuid4().hex[:12]}.tmp"
    staging.mkdir()
    history = (
        "synth(" + ", ".join(f"{k}={v!r}" for k, v in asdict(cfg).items()) + f", out_dir={str(out_dir)!r})"
    )
    try:
        # Threads, whatever scheduler the caller set up: the member blocks close over big arrays.
        with dask.config.set(scheduler="threads"):
            for name, ds in datasets.items():
                write_netcdf(ds, staging / f"{name}.nc", encodings[name], history=history)
        paths = {}
        for name in datasets:
            paths[name] = out_dir / f"{name}.nc"
            (staging / f"{name}.nc").replace(paths[name])
    except BaseException:
        for f in staging.glob("*"):
            f.unlink(missing_ok=True)
        staging.rmdir()
        if created:
            out_dir.rmdir()
        raise
    staging.rmdir()
    return paths


def _coord_attrs(ds: xr.Dataset) -> xr.Dataset:
    for name in ds.coords:
        if name in names.COORD_ATTRS:
            ds[name].attrs.update(names.COORD_ATTRS[name])
    return ds


def _global_attrs(cfg: SynthConfig, what: str) -> dict:
    params = {f"synth_{k}": (list(v) if isinstance(v, tuple) else v) for k, v in asdict(cfg).items()}
    return {
        "title": f"ensml synthetic ensemble: {what}",
        "institution": "ensml",
        "source": f"ensml {__version__} synthetic ensemble generator (ensml.data.synth)",
        "references": "see the docstring of ensml.data.synth for the generative model",
        "comment": (
            "Synthetic data from a known predictive distribution. Verifying analysis of "
            "(init_time, lead_time) is analysis.sel(time=init_time + lead_time); oracle.nc holds "
            "its exact Gaussian distribution N(mean, std**2)."
        ),
        **params,
    }


def build_datasets(
    cfg: SynthConfig,
    inits: np.ndarray,
    leads: np.ndarray,
    *,
    on_progress: Callable[[int], object] | None = None,
) -> dict[str, xr.Dataset]:
    """The three datasets for validated options; see :func:`synth`.

    Analysis and oracle are in memory; the forecast members are a dask array drawn block by
    block while the file is written, so memory stays bounded and drawing overlaps compression.
    ``on_progress(n)`` is called as the members of ``n`` more inits are drawn.
    """
    out = synth_model.generate(
        n_lat=cfg.n_lat,
        n_lon=cfg.n_lon,
        levels=np.asarray(cfg.levels, dtype=float),
        inits=inits,
        leads=leads,
        members=cfg.members,
        storms_per_year=cfg.storms_per_year,
        seed=cfg.seed,
    )
    members = _lazy_members(out["member_block"], out["member_spread"], cfg, len(inits), on_progress)
    lat, lon, times = out["latitude"], out["longitude"], out["times"]
    level = np.asarray(cfg.levels, dtype="int32")
    space = {names.LEVEL: level, names.LATITUDE: lat, names.LONGITUDE: lon}
    fc_coords = {names.INIT_TIME: inits, names.LEAD_TIME: leads}
    valid = (names.VALID_TIME, (names.INIT_TIME, names.LEAD_TIME), inits[:, None] + leads[None, :])

    fc = xr.Dataset(
        {
            v: (
                names.FORECAST_DIMS,
                members[n],
                {
                    **names.VARIABLE_ATTRS[v],
                    "comment": "rounded to power-of-two steps of at most 1/32 of the ensemble spread",
                },
            )
            for n, v in enumerate(("z", "t"))
        },
        coords={**fc_coords, names.MEMBER: np.arange(1, cfg.members + 1, dtype="int32"), **space},
    ).assign_coords({names.VALID_TIME: valid[1:]})
    fc.attrs = _global_attrs(cfg, "ensemble forecast")

    an = xr.Dataset(
        {v: (names.ANALYSIS_DIMS, out["truth"][v], dict(names.VARIABLE_ATTRS[v])) for v in ("z", "t")},
        coords={names.TIME: times, **space},
    )
    an.attrs = _global_attrs(cfg, "verifying analysis (truth) by valid time")

    odims = (names.INIT_TIME, names.LEAD_TIME, names.LEVEL, names.LATITUDE, names.LONGITUDE)
    ovars = {}
    for v in ("z", "t"):
        a = names.VARIABLE_ATTRS[v]
        mean = out["mean"][v].astype(np.float32)
        _quantise(mean, out["std"][v], MEAN_STEPS_PER_STD)
        std = out["std"][v].astype(np.float32)
        _round_mantissa(std, STD_BITS)
        ovars[f"{v}_mean"] = (
            odims,
            mean,
            {
                **a,
                "long_name": f"oracle predictive mean of {a['long_name']}",
                "comment": "rounded to power-of-two steps of at most 1/256 of the std",
            },
        )
        ovars[f"{v}_std"] = (
            odims,
            std,
            {
                "standard_name": f"{a['standard_name']} standard_error",
                "long_name": f"oracle predictive standard deviation of {a['long_name']}",
                "units": a["units"],
                "comment": f"rounded to {STD_BITS} significant bits",
            },
        )
    ovars["event_mask"] = (
        (names.INIT_TIME, names.LEAD_TIME, names.LATITUDE, names.LONGITUDE),
        out["event_mask"],
        {
            "long_name": "storm event at valid time (intensity above 25% of the storm's peak)",
            "flag_values": np.array([0, 1], dtype="uint8"),
            "flag_meanings": "no_storm storm",
        },
    )
    st = out["storms"]
    ovars["storm_genesis_time"] = ("storm", st["genesis_time"], {"long_name": "storm genesis time"})
    ovars["storm_genesis_latitude"] = (
        "storm",
        st["lat0"],
        {"long_name": "storm genesis latitude", "units": "degrees_north"},
    )
    ovars["storm_genesis_longitude"] = (
        "storm",
        st["lon0"],
        {"long_name": "storm genesis longitude", "units": "degrees_east"},
    )
    ovars["storm_lifetime"] = (
        "storm",
        st["lifetime_hours"],
        {"long_name": "storm lifetime", "units": "hours"},
    )
    ovars["storm_amplitude"] = (
        "storm",
        st["amplitude"],
        {"long_name": "storm known intensity factor", "units": "1"},
    )
    orc = xr.Dataset(ovars, coords={**fc_coords, **space})
    orc = orc.assign_coords({names.VALID_TIME: valid[1:]})
    orc.attrs = _global_attrs(cfg, "oracle predictive distribution N(mean, std**2) of the analysis")
    return {"forecast": _coord_attrs(fc), "analysis": _coord_attrs(an), "oracle": _coord_attrs(orc)}


def _lazy_members(block, spread: np.ndarray, cfg: SynthConfig, n_init: int, on_progress):
    """Dask array ``(v, init, lead, member, level, lat, lon)`` of rounded float32 members."""

    def make(i0: int, i1: int) -> np.ndarray:
        x = block(i0, i1)  # (v, init, lead, member, k, lat, lon)
        _quantise(x, spread[i0:i1].transpose(2, 0, 1, 3, 4, 5)[:, :, :, None], MEMBER_STEPS_PER_SPREAD)
        if on_progress is not None:
            on_progress(i1 - i0)
        return x

    token = uuid.uuid4().hex
    shape = (len(cfg.lead_hours), cfg.members, len(cfg.levels), cfg.n_lat, cfg.n_lon)
    blocks = [
        da.from_delayed(
            # Explicit keys: tokenising ``make`` would hash the arrays in its closure per block.
            dask.delayed(make)(i0, min(i0 + BLOCK_INITS, n_init), dask_key_name=f"synth-{token}-{i0}"),
            shape=(2, min(i0 + BLOCK_INITS, n_init) - i0, *shape),
            dtype=np.float32,
        )
        for i0 in range(0, n_init, BLOCK_INITS)
    ]
    return da.concatenate(blocks, axis=1)


def _encodings(datasets: dict[str, xr.Dataset], cfg: SynthConfig) -> dict[str, dict]:
    """Chunking (one init_time per forecast chunk), time units, and quantisation of members."""
    time_enc = {
        "units": "hours since 1970-01-01 00:00:00",
        "calendar": "proleptic_gregorian",
        "dtype": "int64",
    }
    lead_enc = {"units": "hours", "dtype": "int64"}
    nl, nk = len(cfg.lead_hours), len(cfg.levels)
    fc = {
        v: {"chunksizes": (1, nl, cfg.members, nk, cfg.n_lat, cfg.n_lon), "dtype": "float32"}
        for v in ("z", "t")
    }
    fc.update({names.INIT_TIME: time_enc, names.VALID_TIME: time_enc, names.LEAD_TIME: lead_enc})
    n_time = datasets["analysis"].sizes[names.TIME]
    an = {
        v: {"chunksizes": (min(n_time, 32), nk, cfg.n_lat, cfg.n_lon), "dtype": "float32"} for v in ("z", "t")
    }
    an[names.TIME] = time_enc
    orc = {
        v: {"chunksizes": (1, nl, nk, cfg.n_lat, cfg.n_lon), "dtype": "float32"}
        for v in ("z_mean", "z_std", "t_mean", "t_std")
    }
    orc["event_mask"] = {"chunksizes": (1, nl, cfg.n_lat, cfg.n_lon), "dtype": "uint8"}
    orc.update({names.INIT_TIME: time_enc, names.VALID_TIME: time_enc, names.LEAD_TIME: lead_enc})
    orc["storm_genesis_time"] = time_enc
    return {"forecast": fc, "analysis": an, "oracle": orc}
