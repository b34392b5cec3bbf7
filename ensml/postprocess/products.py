"""What a forecaster consumes, for one init time: a CF-described dataset of every product.

For every variable ``v`` of the checkpoints, dims (init_time, lead_time, [member | quantile |
threshold], level, latitude, longitude), float32, in the variable's units, from its predictive
family (:mod:`ensml.scores.distributions`, named by the run metadata's ``ensml_distribution``);
at stations (:func:`station_product_dataset`) ``station`` takes the place of latitude and
longitude, which become coordinates along it (CF discrete sampling geometry, ``timeSeries``):

===========================  ==========================================================
``v_mean``, ``v_std``        normal (mixed): the calibrated Gaussian's mean and std;
                             spread: the K-member mean and the estimated M-member spread
                             (std, ddof 0), the distribution N(mean, spread²)
``v_<param>``                any other family: its parameters (``tp_shape``, ``tp_scale``,
                             ``tp_shift``; ``si10_loc``, ``si10_scale``; ``tp_alpha0`` …),
                             with the family's CF attributes
``v_mean``                   any other family: the predictive mean
``v_probability_of_zero``    families with a point mass at 0 (csg0, cnormal, clogistic, a
                             bqn of a variable ≥ 0): P(v = 0), units 1
``v_quantile``               quantiles at ``products.quantiles``
``v``                        calibrated members by ECC-Q (the raw forecast's dims and name, so
                             the products open as an ensemble, e.g. in ``ensml evaluate``)
``<key>_exceedance``         P(v > threshold) for each ``products.thresholds`` entry (units 1);
                             ``t850_exceedance`` has no level dim, ``t_exceedance`` has one
===========================  ==========================================================

A generative run (:mod:`ensml.postprocess.generated`) has no parameters: its ``v`` are the
generated members, and ``v_mean``, ``v_std`` (of the members), ``v_probability_of_zero``,
``v_quantile`` and the exceedance probabilities are those of the members; with
``products.ecc_members``, ``v_ecc`` holds the same values at every point in the raw members'
rank order (ECC-Q of the generated margins, ties broken as ECC-Q's of a family's).

The products of a family bounded at 0 (precipitation, wind speed) are never negative. The
normal's products are computed by the closed forms of :mod:`ensml.postprocess.ecc` and ties
among its raw members (the file's rounding) keep member order, so that they are bit-identical
to the products made before families existed. For every other family, ties (dry members, all
0) are broken at random (Schefzik et al. 2013), seeded by the init time and the variable
(:func:`ensml.postprocess.predictive.ecc_rng`), so that the same forecast gives the same members.
Each variable's distribution is a :class:`~ensml.postprocess.predictive.Predictive` (or, of a
generative run, :class:`~ensml.postprocess.generated.GeneratedMembers`); this module lays their
products out.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
import xarray as xr

from ensml.data.outputs import DEFAULT_COMPRESSION
from ensml.data.stations import COORD_ATTRS as STATION_ATTRS
from ensml.data.stations import EMBEDDING
from ensml.errors import EnsmlError
from ensml.names import (
    COORD_ATTRS,
    ELEVATION,
    INIT_TIME,
    LATITUDE,
    LEAD_TIME,
    LEVEL,
    LONGITUDE,
    MEMBER,
    QUANTILE,
    STATION,
    VALID_TIME,
    VARIABLE_ATTRS,
    family_params,
)
from ensml.postprocess.generated import GENERATIVE, GeneratedMembers, placeholder_members
from ensml.postprocess.options import Products, ThresholdSet
from ensml.postprocess.predictive import Predictive, ecc_rng, family_name
from ensml.predictions import RunMeta

# Times are stored as numbers of this unit, so every write (and append) encodes them alike.
TIME_UNITS = "minutes since 1970-01-01 00:00:00"
TIME_ENCODING = {"units": TIME_UNITS, "calendar": "proleptic_gregorian", "dtype": "int64"}
LEAD_ENCODING = {"units": "hours", "dtype": "int64"}


def _describe(var: str, what: str, *, keep_standard_name: bool, units: str | None = None) -> dict:
    attrs = dict(VARIABLE_ATTRS.get(var, {"long_name": var}))
    if not keep_standard_name:
        attrs.pop("standard_name", None)
    attrs["long_name"] = f"{attrs.get('long_name', var)}: {what}"
    if units is not None:
        attrs["units"] = units
    return attrs


def _without_levels(ds: xr.Dataset, surface: Sequence[str]) -> xr.Dataset:
    """``ds`` with the products of surface variables (``v``, ``v_*``) taken at one level."""
    for name in list(ds.data_vars):
        if LEVEL in ds[name].dims and any(name == v or str(name).startswith(f"{v}_") for v in surface):
            ds[name] = ds[name].isel({LEVEL: 0}, drop=True)
    return ds


def placeholder_params(meta: RunMeta, shape: tuple[int, ...], n: int) -> list[dict[str, np.ndarray]]:
    """Parameters of every variable that are valid for its family, of ``shape`` (L, D, H, W), or
    ``n`` members of a generative run: what a product dataset made only for its structure (a
    zarr store's template) is made of."""
    if meta.task == GENERATIVE:
        return placeholder_members(meta, shape, n)
    out = []
    for var in meta.variables:
        name = family_name(meta, var)
        if name == "normal":
            out.append({"mean": np.zeros(shape, np.float32), "std": np.ones(shape, np.float32)})
        else:  # ones are in range for every other family (bqn: constant coefficients)
            out.append({k: np.ones(shape, np.float32) for k in family_params(name)})
    return out


def product_dataset(
    init: np.datetime64,
    meta: RunMeta,
    latitude: np.ndarray,
    longitude: np.ndarray,
    params: Sequence[Mapping[str, np.ndarray]],
    raw: np.ndarray,
    products: Products,
    thresholds: Sequence[ThresholdSet],
) -> xr.Dataset:
    """The products of one init time, with the run's metadata in its attributes.

    Parameters
    ----------
    init
        The init time.
    meta
        The run (:class:`ensml.predictions.RunMeta`): task, k, variables, their families
        (``ensml_distribution``), levels, surface variables (their products keep no level
        dimension) and leads.
    latitude, longitude
        The grid (H,) and (W,), degrees.
    params
        One dict per variable (in ``meta.variables`` order) of its family's parameters, each
        (L, D, H, W) by target lead, in the family's units (``mean``, ``std`` for the normal,
        also the K-member mean and estimated M-member spread of a spread model; ``shape``,
        ``scale``, ``shift`` for csg0; ``alpha0`` … for bqn, …). A surface variable's level axis
        holds identical copies; its products keep the first.
    raw
        (V, L, M, D, H, W): the raw members at the target leads, the ECC template.
    products, thresholds
        What to derive: quantiles, calibrated members, exceedance probabilities.

    Raises
    ------
    EnsmlError
        A variable's parameters are missing, of another shape than its raw members, or outside
        their family's range (one line naming the variable, the init and the parameter).
    """
    places = {
        LATITUDE: np.asarray(latitude, dtype=np.float64),
        LONGITUDE: np.asarray(longitude, dtype=np.float64),
    }
    return _products(init, meta, (LATITUDE, LONGITUDE), places, params, raw, products, thresholds)


def station_product_dataset(
    init: np.datetime64,
    meta: RunMeta,
    stations: xr.Dataset,
    params: Sequence[Mapping[str, np.ndarray]],
    raw: np.ndarray,
    products: Products,
    thresholds: Sequence[ThresholdSet],
) -> xr.Dataset:
    """The products of one init time at stations: :func:`product_dataset` with the grid's
    (latitude, longitude) replaced by ``station``, as CF discrete sampling geometry
    (``featureType: timeSeries``).

    ``stations`` gives the ``station`` ids (``cf_role: timeseries_id``) and their latitude,
    longitude and elevation (when known) as coordinates along ``station``, and the origin of
    each station's embedding (``embedding``: own, nearest or zero) where it has one; ``params`` are
    (L, D, S) and ``raw`` (V, L, M, D, S), S the stations.
    """
    places = {STATION: (STATION, stations[STATION].values.astype(str), dict(STATION_ATTRS[STATION]))}
    for coord in (LATITUDE, LONGITUDE, ELEVATION):
        if coord in stations.coords:
            attrs = {**COORD_ATTRS.get(coord, {}), **STATION_ATTRS.get(coord, {})}
            places[coord] = (STATION, np.asarray(stations[coord].values, np.float64), attrs)
    if EMBEDDING in stations.coords:  # where each station's embedding comes from
        places[EMBEDDING] = (STATION, stations[EMBEDDING].values.astype(str), dict(STATION_ATTRS[EMBEDDING]))
    ds = _products(init, meta, (STATION,), places, params, raw, products, thresholds)
    ds.attrs["featureType"] = "timeSeries"
    ds.attrs["Conventions"] = "CF-1.8"
    return ds


def _products(
    init: np.datetime64,
    meta: RunMeta,
    horizontal: tuple[str, ...],
    places: Mapping[str, object],
    params: Sequence[Mapping[str, np.ndarray]],
    raw: np.ndarray,
    products: Products,
    thresholds: Sequence[ThresholdSet],
) -> xr.Dataset:
    """The products of one init on the ``horizontal`` dims, whose coordinates ``places`` gives."""
    if len(params) != len(meta.variables):
        raise EnsmlError(f"products: {len(params)} sets of parameters for the variables {meta.variables}")
    n = raw.shape[2] if products.members is None else products.members
    leads = np.asarray(meta.leads, dtype="timedelta64[ns]")
    inits = np.array([init], dtype="datetime64[ns]")
    coords = {
        INIT_TIME: inits,
        LEAD_TIME: leads,
        LEVEL: np.asarray(meta.levels or (np.nan,), dtype=np.float64),  # surface only: one, dropped
        **places,
        VALID_TIME: ((INIT_TIME, LEAD_TIME), inits[:, None] + leads[None, :]),
    }
    ds = xr.Dataset(coords=coords, attrs=meta.to_attrs())
    q = np.asarray(products.quantiles, dtype=np.float64)
    if q.size:
        ds = ds.assign_coords({QUANTILE: (QUANTILE, q, {"long_name": "probability level", "units": "1"})})
    if n:
        ds = ds.assign_coords({MEMBER: (MEMBER, np.arange(n, dtype=np.int32))})
    of = GeneratedMembers.of if meta.task == GENERATIVE else Predictive.of
    dists = [of(meta, var, p, raw[i].shape, init) for i, (var, p) in enumerate(zip(meta.variables, params))]
    for i, dist in enumerate(dists):
        _variable_products(
            ds, dist, raw[i], q, n, products.ecc_spacing, init, horizontal, products.ecc_members
        )
    for t in thresholds:
        _exceedance(ds, t, dists[list(meta.variables).index(t.variable)], meta.levels, horizontal)
    for name in ds.coords:
        if name not in (STATION, ELEVATION):
            ds[name].attrs.update(COORD_ATTRS.get(str(name), {}))
    if n:
        made = "generated" if meta.task == GENERATIVE else "calibrated"
        ds[MEMBER].attrs.update(standard_name="realization", long_name=f"{made} member number")
    ds = _without_levels(ds, meta.surface)
    return ds if meta.levels else ds.drop_vars(LEVEL)


def _variable_products(
    ds: xr.Dataset,
    dist: Predictive | GeneratedMembers,
    raw: np.ndarray,
    q: np.ndarray,
    n: int,
    spacing: str,
    init: np.datetime64,
    horizontal: tuple[str, ...],
    ecc_members: bool = False,
) -> None:
    """Add ``dist``'s parameters, mean, P(0), quantiles and ECC members to ``ds``; of generated
    members, their mean, std, P(0), quantiles and the members themselves (and with
    ``ecc_members`` the same in the raw rank order).

    ``raw`` (L, M, D, *horizontal) is the ECC template.
    """
    var, names = dist.var, dist.names
    field_dims = (INIT_TIME, LEAD_TIME, LEVEL, *horizontal)
    if isinstance(dist, GeneratedMembers):
        _generated_products(ds, dist, field_dims)
    elif dist.family is None:
        ds[f"{var}_mean"] = (
            field_dims,
            dist.params["mean"][None],
            _describe(var, names["centre"], keep_standard_name=True),
        )
        ds[f"{var}_std"] = (
            field_dims,
            dist.params["std"][None],
            _describe(var, names["width"], keep_standard_name=False),
        )
    else:
        attrs = dist.family.param_attrs(var, VARIABLE_ATTRS.get(var, {"long_name": var}))
        for k, values in dist.params.items():
            ds[f"{var}_{k}"] = (field_dims, values.astype(np.float32)[None], attrs[k])
        _mean_and_zero(ds, dist, field_dims)
    if q.size:
        attrs = _describe(var, f"quantile of {names['dist']}", keep_standard_name=True)
        ds[f"{var}_quantile"] = (
            (INIT_TIME, LEAD_TIME, QUANTILE, *field_dims[2:]),
            dist.quantiles(q, axis=1)[None],
            attrs,
        )
    if n and isinstance(dist, GeneratedMembers):
        attrs = _describe(var, "generated member", keep_standard_name=True)
        attrs["generated_by"] = "the run's checkpoint(s) (ensml_task) from noise seeded by the init time"
        ds[var] = ((INIT_TIME, LEAD_TIME, MEMBER, *field_dims[2:]), dist.member_fields(n)[None], attrs)
        if ecc_members:
            attrs = _describe(var, "generated member in the raw rank order", keep_standard_name=True)
            attrs["ecc_template"] = f"rank order of the {raw.shape[1]} raw members"
            attrs["ecc_ties"] = "broken at random, seeded by the init time and the variable"
            reordered = dist.in_raw_order(raw, n, ecc_rng(init, var))
            ds[f"{var}_ecc"] = ((INIT_TIME, LEAD_TIME, MEMBER, *field_dims[2:]), reordered[None], attrs)
    elif n:
        attrs = _describe(var, f"calibrated member (ECC-Q of {names['dist']})", keep_standard_name=True)
        attrs["ecc_spacing"] = spacing
        attrs["ecc_template"] = f"rank order of the {raw.shape[1]} raw members"
        if dist.family is not None:
            attrs["ecc_ties"] = "broken at random, seeded by the init time and the variable"
        ds[var] = (
            (INIT_TIME, LEAD_TIME, MEMBER, *field_dims[2:]),
            dist.members(raw, n, spacing, init)[None],
            attrs,
        )


def _generated_products(ds: xr.Dataset, dist: GeneratedMembers, field_dims: tuple[str, ...]) -> None:
    """Add the mean, std and P(0) of generated members to ``ds``."""
    var, names = dist.var, dist.names
    _mean_and_zero(ds, dist, field_dims)
    ds[f"{var}_std"] = (
        field_dims,
        dist.std()[None],
        _describe(var, names["width"], keep_standard_name=False),
    )


def _mean_and_zero(ds: xr.Dataset, dist: Predictive | GeneratedMembers, field_dims: tuple[str, ...]) -> None:
    """Add the predictive mean and, where the distribution has a point mass at 0, P(0) to ``ds``."""
    var, names = dist.var, dist.names
    ds[f"{var}_mean"] = (
        field_dims,
        dist.mean()[None],
        _describe(var, names["centre"], keep_standard_name=True),
    )
    p0 = dist.probability_of_zero()
    if p0 is not None:
        what = f"probability of zero, P({var} = 0) ({names['dist']})"
        ds[f"{var}_probability_of_zero"] = (
            field_dims,
            p0[None],
            _describe(var, what, keep_standard_name=False, units="1"),
        )


def _exceedance(
    ds: xr.Dataset,
    t: ThresholdSet,
    dist: Predictive | GeneratedMembers,
    levels: Sequence[float],
    horizontal: tuple[str, ...],
) -> None:
    """Add ``P(X > threshold)`` of one ``products.thresholds`` entry to ``ds``."""
    dim = f"{t.key}_threshold"
    ds.coords[dim] = (dim, np.asarray(t.values), _describe(t.variable, "threshold", keep_standard_name=True))
    where = "" if t.level is None else f" at {t.level:g} hPa"
    what = f"probability of exceeding {dim}{where} ({dist.names['dist']})"
    attrs = _describe(t.variable, what, keep_standard_name=False, units="1")
    values = np.asarray(t.values)
    if t.level is None:
        p = dist.exceedance(values, axis=1)[None]
        ds[f"{t.key}_exceedance"] = ((INIT_TIME, LEAD_TIME, dim, LEVEL, *horizontal), p, attrs)
    else:
        j = [float(x) for x in levels].index(t.level)
        p = dist.at_level(j).exceedance(values, axis=1)[None]
        attrs["level"], attrs["level_units"] = t.level, "hPa"
        ds[f"{t.key}_exceedance"] = ((INIT_TIME, LEAD_TIME, dim, *horizontal), p, attrs)


def product_encoding(ds: xr.Dataset, zarr: bool = False) -> dict[str, dict]:
    """Per-variable encoding: one chunk per init, lead and member/quantile/threshold; float32."""
    enc: dict[str, dict] = {
        INIT_TIME: dict(TIME_ENCODING),
        VALID_TIME: dict(TIME_ENCODING),
        LEAD_TIME: dict(LEAD_ENCODING),
    }
    for name, var in ds.data_vars.items():
        chunks = tuple(1 if d not in (LEVEL, LATITUDE, LONGITUDE, STATION) else ds.sizes[d] for d in var.dims)
        if zarr:
            enc[str(name)] = {"chunks": chunks, "dtype": "float32"}
        else:
            enc[str(name)] = {**DEFAULT_COMPRESSION, "chunksizes": chunks, "dtype": "float32"}
    return enc
