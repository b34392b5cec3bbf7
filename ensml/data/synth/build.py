"""Assemble the synthetic ensemble's datasets and encodings (see :mod:`ensml.data.synth.generate`)."""

from __future__ import annotations

import uuid
from collections.abc import Callable
from dataclasses import asdict, dataclass, replace

import dask
import dask.array as da
import numpy as np
import xarray as xr

from ensml import __version__, names
from ensml.data.synth import model as synth_model
from ensml.data.synth import stations as synth_stations
from ensml.data.synth.oracle_members import oracle_member_drawer
from ensml.data.synth.precip_wind import TP_ATTRS

# Stored values are rounded, far below the local uncertainty, so that zlib can shrink them:
# members to a power-of-two step of at most 1/32 of the designed member spread at that point
# (rounding error std < 1% of the spread; exact ties of 5 members, a zero sample spread,
# become rarer than 1e-8 per point), oracle means to at most 1/256 of sigma*, oracle std to
# 11 significant bits (relative error < 2.5e-4). The analysis is stored as computed (float32).
MEMBER_STEPS_PER_SPREAD = 32
MEAN_STEPS_PER_STD = 256
STD_BITS = 11
BLOCK_INITS = 4  # inits drawn per task while writing (temporaries below 32 MB)
#: The synthetic 2 m temperature ``t2m`` is the synthetic atmosphere's temperature at this level.
SURFACE_HPA = 1000
SURFACE_NOTE = f"synthetic: the temperature of the synthetic atmosphere at {SURFACE_HPA} hPa"
MEMBER_NOTE = "rounded to power-of-two steps of at most 1/32 of the ensemble spread"
ORACLE_MEMBER_NOTE = (
    "a draw from the exact joint predictive distribution of the analysis given what the oracle "
    "knows (see ensml.data.synth.oracle_members); rounded to power-of-two steps of at most 1/32 "
    "of the oracle's standard deviation"
)
PRECIP_WIND_NOTE = "synthetic, tied to the flow: see ensml.data.synth.precip_wind"
#: The surface variables of ``precip_wind``, their CF attributes and predictive distribution family.
PRECIP_WIND = {"tp": (TP_ATTRS, "csg0"), "si10": (names.VARIABLE_ATTRS["si10"], "truncnormal")}
#: The oracle's parameters of each family: (name, long name, units: None for the variable's).
FAMILY_PARAMETERS = {
    "normal": (("mean", "mean", None), ("std", "standard deviation", None)),
    "csg0": (
        ("shape", "censored shifted gamma shape", "1"),
        ("scale", "censored shifted gamma scale", None),
        ("shift", "censored shifted gamma shift", None),
    ),
    "truncnormal": (
        ("loc", "location of the normal truncated to [0, inf)", None),
        ("scale", "scale of the normal truncated to [0, inf)", None),
    ),
}
DISTRIBUTION_NOTE = (
    "oracle.nc holds its exact predictive distribution, the family of each variable in the "
    "oracle's ensml_distribution attribute (var:family): normal N(mean, std**2) ({var}_mean, "
    "{var}_std); csg0, the censored shifted gamma max(0, X - shift) with X ~ Gamma(shape, scale) "
    "({var}_shape, {var}_scale, {var}_shift); truncnormal, N(loc, scale**2) truncated to [0, inf) "
    "({var}_loc, {var}_scale)."
)

#: The oracle's variables of the storm table: the table's key and the attributes.
STORM_VARIABLES = {
    "storm_genesis_time": ("genesis_time", {"long_name": "storm genesis time"}),
    "storm_genesis_latitude": ("lat0", {"long_name": "storm genesis latitude", "units": "degrees_north"}),
    "storm_genesis_longitude": ("lon0", {"long_name": "storm genesis longitude", "units": "degrees_east"}),
    "storm_lifetime": ("lifetime_hours", {"long_name": "storm lifetime", "units": "hours"}),
    "storm_amplitude": ("amplitude", {"long_name": "storm known intensity factor", "units": "1"}),
}


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
    leads: tuple[str, ...]  # ISO 8601 durations (ensml.times.iso_lead)
    members: int
    start: str
    end: str
    every_days: int
    storms_per_year: float
    seed: int
    surface: bool = False
    precip_wind: bool = False
    stations: int = 0


def _coord_attrs(ds: xr.Dataset) -> xr.Dataset:
    for name in ds.coords:
        if name in names.COORD_ATTRS:
            ds[name].attrs.update(names.COORD_ATTRS[name])
    return ds


def _global_attrs(cfg: SynthConfig, what: str) -> dict:
    # netCDF-3 attributes hold no lists of strings: the leads (ISO durations) as one string
    params = {f"synth_{k}": (list(v) if isinstance(v, tuple) else v) for k, v in asdict(cfg).items()}
    params["synth_leads"] = " ".join(cfg.leads)
    return {
        "title": f"ensml synthetic ensemble: {what}",
        "institution": "ensml",
        "source": f"ensml {__version__} synthetic ensemble generator (ensml.data.synth.generate)",
        "references": "see the docstring of ensml.data.synth.generate for the generative model",
        "comment": (
            "Synthetic data from a known predictive distribution. Verifying analysis of "
            "(init_time, lead_time) is analysis.sel(time=init_time + lead_time); " + DISTRIBUTION_NOTE
        ),
        **params,
    }


def build_datasets(
    cfg: SynthConfig,
    inits: np.ndarray,
    leads: np.ndarray,
    *,
    on_progress: Callable[[int], object] | None = None,
    oracle_members: int = 0,
) -> dict[str, xr.Dataset]:
    """The three datasets for validated options; see :func:`synth`.

    Analysis and oracle are in memory; the forecast members are a dask array drawn block by
    block while the file is written, so memory stays bounded and drawing overlaps compression.
    ``on_progress(n)`` is called as the members of ``n`` more inits are drawn. With
    ``oracle_members``, a fourth dataset ``oracle_members`` of that many oracle members
    (:mod:`.oracle_members`), drawn in the same way (``on_progress`` is called for them too).
    """
    # t2m is the temperature of the synthetic atmosphere at SURFACE_HPA, drawn as one more level.
    extra = [SURFACE_HPA] if cfg.surface and SURFACE_HPA not in cfg.levels else []
    gen_levels = list(cfg.levels) + extra
    out = synth_model.generate(
        n_lat=cfg.n_lat,
        n_lon=cfg.n_lon,
        levels=np.asarray(gen_levels, dtype=float),
        inits=inits,
        leads=leads,
        members=cfg.members,
        storms_per_year=cfg.storms_per_year,
        seed=cfg.seed,
        precip_wind=cfg.precip_wind,
    )
    members, surface_members = _lazy_members(
        out["member_block"],
        out["member_spread"],
        out.get("surface"),
        cfg,
        len(inits),
        len(gen_levels),
        on_progress,
    )
    written = _written(cfg, gen_levels)
    space = {
        names.LEVEL: np.asarray(cfg.levels, dtype="int32"),
        names.LATITUDE: out["latitude"],
        names.LONGITUDE: out["longitude"],
    }
    fc_coords = {names.INIT_TIME: inits, names.LEAD_TIME: leads}
    valid = {names.VALID_TIME: ((names.INIT_TIME, names.LEAD_TIME), inits[:, None] + leads[None, :])}
    fc = _forecast(
        members, written, {**fc_coords, names.MEMBER: np.arange(1, cfg.members + 1, dtype="int32"), **space}
    )
    an = _analysis(out["truth"], written, {names.TIME: out["times"], **space})
    orc = _oracle(out, written, {**fc_coords, **space})
    ens = None
    if oracle_members:  # a fourth dataset, drawn like the forecast's members
        ens_cfg = replace(cfg, members=oracle_members)
        ens_coords = {**fc_coords, names.MEMBER: np.arange(1, oracle_members + 1, dtype="int32"), **space}
        ens = _oracle_members(out["oracle_state"], ens_cfg, written, ens_coords, on_progress)
        ens = ens.assign_coords(valid)
        ens.attrs = _global_attrs(cfg, "oracle members, drawn from the exact predictive distribution")
        ens.attrs["synth_oracle_members"] = oracle_members
    if cfg.precip_wind:
        fc, an, orc = _add_precip_wind(fc, an, orc, out["surface"], surface_members)
    fc = fc.assign_coords(valid)
    fc.attrs = _global_attrs(cfg, "ensemble forecast")
    an.attrs = _global_attrs(cfg, "verifying analysis (truth) by valid time")
    orc = orc.assign_coords(valid)
    orc.attrs = _global_attrs(cfg, "oracle predictive distribution of the analysis (see ensml_distribution)")
    orc.attrs["ensml_distribution"] = " ".join(
        [f"{v}:normal" for v in written]
        + [f"{v}:{fam}" for v, (_, fam) in PRECIP_WIND.items() if cfg.precip_wind]
    )
    out = {"forecast": _coord_attrs(fc), "analysis": _coord_attrs(an), "oracle": _coord_attrs(orc)}
    if ens is not None:
        out["oracle_members"] = _coord_attrs(ens)
    if cfg.stations:
        what = {
            "orography": "model orography",
            "stations": "station observations by valid time",
            "stations_oracle": "oracle predictive distribution at the stations (see ensml_distribution)",
        }
        for key, ds in synth_stations.station_datasets(cfg.seed, cfg.stations, an, orc).items():
            ds.attrs = {**_global_attrs(cfg, what[key]), **ds.attrs}
            out[key] = _coord_attrs(ds)
    return out


def _written(cfg: SynthConfig, gen_levels: list[int]) -> dict[str, tuple[str, slice | int]]:
    """Each variable written: the generated variable (z or t) it is, and its generated levels.

    ``z`` and ``t`` on the levels asked for (the first generated ones, a slice); with
    ``surface``, ``t2m`` the ``t`` of the single level ``SURFACE_HPA`` (an index).
    """
    on_levels = slice(0, len(cfg.levels))
    surface = {"t2m": ("t", gen_levels.index(SURFACE_HPA))} if cfg.surface else {}
    return {"z": ("z", on_levels), "t": ("t", on_levels)} | surface


def _dims(dims: tuple[str, ...], levels: slice | int) -> tuple[str, ...]:
    """``dims``, without the level for a single-level (surface) variable."""
    return dims if isinstance(levels, slice) else tuple(d for d in dims if d != names.LEVEL)


def _forecast(members, written: dict, coords: dict) -> xr.Dataset:
    """The rounded float32 members ``(init, lead, member, [level,] lat, lon)`` of each variable (dask)."""
    data = {}
    for v, (source, k) in written.items():
        note = MEMBER_NOTE if isinstance(k, slice) else f"{SURFACE_NOTE}; {MEMBER_NOTE}"
        block = members[("z", "t").index(source)][..., k, :, :]
        data[v] = (_dims(names.FORECAST_DIMS, k), block, {**names.VARIABLE_ATTRS[v], "comment": note})
    return xr.Dataset(data, coords=coords)


def _analysis(truth: dict[str, np.ndarray], written: dict, coords: dict) -> xr.Dataset:
    """The verifying truth ``(time, [level,] lat, lon)`` of each variable, float32 as computed."""
    data = {}
    for v, (source, k) in written.items():
        surface = {} if isinstance(k, slice) else {"comment": SURFACE_NOTE}
        data[v] = (_dims(names.ANALYSIS_DIMS, k), truth[source][:, k], {**names.VARIABLE_ATTRS[v], **surface})
    return xr.Dataset(data, coords=coords)


def _oracle_members(state: dict, cfg: SynthConfig, written: dict, coords: dict, on_progress) -> xr.Dataset:
    """``cfg.members`` oracle members ``(init, lead, member, [level,] lat, lon)`` of each variable
    (:func:`.oracle_members.oracle_member_drawer`), float32, a dask array drawn block by block,
    rounded to power-of-two steps of at most 1/32 of the oracle's std (``state["std"]``)."""
    mean, std = state["mean"], state["std"]  # (init, lead, v, k, lat, lon)
    block = oracle_member_drawer(cfg.seed, cfg.members, state)
    members, _ = _lazy_members(block, std, None, cfg, mean.shape[0], mean.shape[3], on_progress)
    data = {}
    for v, (source, k) in written.items():
        note = ORACLE_MEMBER_NOTE if isinstance(k, slice) else f"{SURFACE_NOTE}; {ORACLE_MEMBER_NOTE}"
        x = members[("z", "t").index(source)][..., k, :, :]
        data[v] = (_dims(names.FORECAST_DIMS, k), x, {**names.VARIABLE_ATTRS[v], "comment": note})
    return xr.Dataset(data, coords=coords)


def _oracle(out: dict, written: dict, coords: dict) -> xr.Dataset:
    """The exact predictive distribution of each variable, the storm event mask and storm table."""
    dims = (names.INIT_TIME, names.LEAD_TIME, names.LEVEL, names.LATITUDE, names.LONGITUDE)
    data = {}
    for v, (source, k) in written.items():
        data |= _oracle_distribution(
            v, out["mean"][source][:, :, k], out["std"][source][:, :, k], _dims(dims, k)
        )
    data["event_mask"] = (
        (names.INIT_TIME, names.LEAD_TIME, names.LATITUDE, names.LONGITUDE),
        out["event_mask"],
        {
            "long_name": "storm event at valid time (intensity above 25% of the storm's peak)",
            "flag_values": np.array([0, 1], dtype="uint8"),
            "flag_meanings": "no_storm storm",
        },
    )
    for name, (key, attrs) in STORM_VARIABLES.items():
        data[name] = ("storm", out["storms"][key], dict(attrs))
    return xr.Dataset(data, coords=coords)


def _add_precip_wind(fc: xr.Dataset, an: xr.Dataset, orc: xr.Dataset, surface: dict, members) -> tuple:
    """``fc``, ``an`` and ``orc`` with tp and si10 (surface variables, no level) added."""
    fc_dims = _dims(names.FORECAST_DIMS, 0)
    an_dims = _dims(names.ANALYSIS_DIMS, 0)
    orc_dims = (names.INIT_TIME, names.LEAD_TIME, names.LATITUDE, names.LONGITUDE)
    for n, (v, (attrs, family)) in enumerate(PRECIP_WIND.items()):
        fc[v] = (fc_dims, members[n], {**attrs, "comment": f"{PRECIP_WIND_NOTE}; {MEMBER_NOTE}"})
        an[v] = (an_dims, surface["truth"][v], {**attrs, "comment": PRECIP_WIND_NOTE})
        for param, long_name, units in FAMILY_PARAMETERS[family]:
            a = surface["oracle"][f"{v}_{param}"]
            if param == "shape":
                stored = a
            elif param in ("loc", "shift"):
                stored = a.copy()
                _quantise(stored, surface["oracle"][f"{v}_scale"], MEAN_STEPS_PER_STD)
            else:
                stored = a.copy()
                _round_mantissa(stored, STD_BITS)
            orc[f"{v}_{param}"] = (
                orc_dims,
                stored,
                {
                    "long_name": f"oracle {long_name} of {attrs['long_name']}",
                    "units": units or attrs["units"],
                },
            )
    return fc, an, orc


def _oracle_distribution(v: str, mean: np.ndarray, std: np.ndarray, dims: tuple[str, ...]) -> dict:
    """``{v}_mean`` and ``{v}_std``, float32, rounded for storage (``mean``, ``std`` in float64)."""
    a = names.VARIABLE_ATTRS[v]
    mean32 = mean.astype(np.float32)
    _quantise(mean32, std, MEAN_STEPS_PER_STD)
    std32 = std.astype(np.float32)
    _round_mantissa(std32, STD_BITS)
    mean_attrs = {
        **a,
        "long_name": f"oracle predictive mean of {a['long_name']}",
        "comment": "rounded to power-of-two steps of at most 1/256 of the std",
    }
    std_attrs = {
        "standard_name": f"{a['standard_name']} standard_error",
        "long_name": f"oracle predictive standard deviation of {a['long_name']}",
        "units": a["units"],
        "comment": f"rounded to {STD_BITS} significant bits",
    }
    return {f"{v}_mean": (dims, mean32, mean_attrs), f"{v}_std": (dims, std32, std_attrs)}


def _lazy_members(
    block, spread: np.ndarray, surface: dict | None, cfg: SynthConfig, n_init: int, n_levels: int, on_progress
):
    """Dask arrays of rounded float32 members: ``(v, init, lead, member, level, lat, lon)`` of z
    and t, and, with ``surface`` (precip_wind), ``(2, init, lead, member, lat, lon)`` of tp and
    si10 (else None), drawn together block by block."""

    def make(i0: int, i1: int) -> tuple[np.ndarray, np.ndarray | None]:
        x, xs = block(i0, i1) if surface else (block(i0, i1), None)  # x (v, init, lead, member, k, lat, lon)
        _quantise(x, spread[i0:i1].transpose(2, 0, 1, 3, 4, 5)[:, :, :, None], MEMBER_STEPS_PER_SPREAD)
        if surface:  # xs (2, init, lead, member, lat, lon)
            steps = surface["member_spread"][i0:i1].transpose(2, 0, 1, 3, 4)[:, :, :, None]
            _quantise(xs, steps, MEMBER_STEPS_PER_SPREAD)
        if on_progress is not None:
            on_progress(i1 - i0)
        return x, xs

    token = uuid.uuid4().hex
    shape = (len(cfg.leads), cfg.members, n_levels, cfg.n_lat, cfg.n_lon)
    blocks, surface_blocks = [], []
    for i0 in range(0, n_init, BLOCK_INITS):
        n = min(i0 + BLOCK_INITS, n_init) - i0
        # Explicit keys: tokenising ``make`` would hash the arrays in its closure per block.
        both = dask.delayed(make, nout=2)(i0, i0 + n, dask_key_name=f"synth-{token}-{i0}")
        blocks.append(da.from_delayed(both[0], shape=(2, n, *shape), dtype=np.float32))
        if surface:
            surface_blocks.append(
                da.from_delayed(both[1], shape=(2, n, *shape[:2], *shape[3:]), dtype=np.float32)
            )
    surface_members = da.concatenate(surface_blocks, axis=1) if surface else None
    return da.concatenate(blocks, axis=1), surface_members


def encodings(datasets: dict[str, xr.Dataset]) -> dict[str, dict]:
    """Chunks, time units and dtypes of every variable, from each dataset's own dims.

    A forecast chunk is one field of one member: (init time, lead, member) = (1, 1, 1), every
    level and the whole grid, as a GRIB message holds one. A training sample with K of M
    members at L input leads then decompresses K·L + M - K chunks per variable and uses all of
    each (members 0 … K-1 at the input leads, the others at the target lead for the spread
    target), not the whole init. A zarr v3 store groups the chunks of one init time in one
    shard (one file, read in part). The analysis is chunked by valid time (a sample reads two:
    at init and at the target lead), the oracle by one init time and lead.
    """
    time_enc = {
        "units": "hours since 1970-01-01 00:00:00",
        "calendar": "proleptic_gregorian",
        "dtype": "int64",
    }
    lead_enc = {"units": "hours", "dtype": "int64"}
    first = {names.INIT_TIME: 1, names.LEAD_TIME: 1, names.MEMBER: 1, names.TIME: 1}  # others whole
    out = {}
    for name, ds in datasets.items():
        enc: dict[str, dict] = {}
        for v, var in ds.data_vars.items():
            if var.ndim < 3:  # the storm table
                continue
            chunks = tuple(min(first.get(d, n), n) for d, n in var.sizes.items())
            enc[str(v)] = {"chunksizes": chunks, "dtype": "uint8" if v == "event_mask" else "float32"}
            if names.MEMBER in var.dims:  # zarr v3: one shard (one file) per init time
                enc[str(v)]["shards"] = tuple(1 if d == names.INIT_TIME else n for d, n in var.sizes.items())
        for coord in (names.INIT_TIME, names.VALID_TIME, names.TIME):
            if coord in ds.variables:
                enc[coord] = time_enc
        if names.LEAD_TIME in ds.variables:
            enc[names.LEAD_TIME] = lead_enc
        if "storm_genesis_time" in ds.variables:
            enc["storm_genesis_time"] = time_enc
        out[name] = enc
    return out
