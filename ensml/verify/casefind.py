"""Automatic case finding: climatological extremes of the analysis, and the synthetic data's storms.

* :func:`find_extreme_cases`: the valid dates and boxes where the verifying analysis exceeds a
  high (or falls below a low) climatological quantile over the largest area;
* :func:`storm_cases`: on the embedded synthetic data, the stored storms of ``oracle.nc``
  (``event_mask`` at the case lead time and the ``storm_*`` table), strongest first.

Both return :class:`ensml.verify.cases.Case` objects, which ``ensml evaluate --cases`` and
``ensml report`` score like cases written by hand (``Case.to_dict()`` gives their YAML).
"""

from __future__ import annotations

import numpy as np
import xarray as xr

from ensml.data.grid import describe, is_projected
from ensml.data.weights import area_weights
from ensml.errors import EnsmlError
from ensml.names import INIT_TIME, LATITUDE, LEAD_TIME, LONGITUDE, TIME
from ensml.times import LeadLike, format_lead, parse_lead
from ensml.verify.cases import Case, Region, Threshold

__all__ = ["find_extreme_cases", "lon_span", "storm_cases"]


def lon_span(lons: np.ndarray) -> tuple[float, float]:
    """The shortest (west, east) arc in [0, 360) covering ``lons`` (crossing 0° if shorter)."""
    u = np.unique(np.asarray(lons, dtype=float) % 360.0)
    if u.size == 1:
        return float(u[0]), float(u[0])
    gaps = np.diff(np.concatenate([u, [u[0] + 360.0]]))
    i = int(np.argmax(gaps))  # the box is the complement of the largest gap
    return float(u[(i + 1) % u.size]), float(u[i])


def _where(lat: float, lon: float, digits: int = 0) -> str:
    lon = (lon + 180.0) % 360.0 - 180.0
    return f"{abs(lat):.{digits}f}°{'S' if lat < 0 else 'N'} {abs(lon):.{digits}f}°{'W' if lon < 0 else 'E'}"


def _box(lat_lo: float, lat_hi: float, west: float, east: float, margin: float) -> Region:
    width = (east - west) % 360.0
    if width + 2 * margin >= 360.0:
        west, east = 0.0, 359.999
    else:
        west, east = (west - margin) % 360.0, (east + margin) % 360.0
    return Region((max(-90.0, lat_lo - margin), min(90.0, lat_hi + margin)), (west, east))


def _regular_grid(da: xr.DataArray, func: str) -> None:
    """Raise unless ``da`` is on a regular latitude/longitude grid (boxes are found in its indices)."""
    if is_projected(da):
        raise EnsmlError(
            f"{func}: finds latitude/longitude boxes on a regular grid, and the data are on a {describe(da)}"
        )


def find_extreme_cases(
    analysis: xr.DataArray,
    *,
    variable: str,
    level: float,
    lead: LeadLike = "48h",
    quantile: float = 0.99,
    tail: str = "upper",
    n: int = 3,
    box_deg: tuple[float, float] = (30.0, 60.0),
    min_separation_days: float = 7.0,
    valid_times: np.ndarray | None = None,
) -> list[Case]:
    """Dates and boxes where ``analysis`` (time, latitude, longitude) is most extreme.

    The threshold at each point is the quantile of its calendar month (all years); the
    exceedance area (cell-area weighted) is summed over every ``box_deg`` (lat, lon) box
    (periodic in longitude), and the ``n`` largest (date, box) pairs at least
    ``min_separation_days`` apart become single-date cases with that threshold. ``valid_times``
    restricts the dates (e.g. to those a forecast verifies at); ``lead`` is the cases' lead time
    (hours or a duration).
    """
    from scipy.ndimage import uniform_filter

    if tail not in ("upper", "lower"):
        raise EnsmlError(f"find_extreme_cases: tail must be 'upper' or 'lower', got {tail!r}")
    if not 0 < quantile < 1:
        raise EnsmlError(f"find_extreme_cases: quantile must be in (0, 1), got {quantile}")
    _regular_grid(analysis, "find_extreme_cases")
    an = analysis.transpose(TIME, LATITUDE, LONGITUDE).load()
    thr = an.groupby(f"{TIME}.month").quantile(quantile, dim=TIME)
    above = an.groupby(f"{TIME}.month") - thr
    hit = (above > 0) if tail == "upper" else (above < 0)
    if valid_times is not None:
        hit = hit.sel({TIME: np.intersect1d(hit[TIME].values, valid_times)})
    if hit.sizes[TIME] == 0:
        raise EnsmlError("find_extreme_cases: no analysis time among the forecast's valid times")
    lat, lon = an[LATITUDE].values, an[LONGITUDE].values
    dlat, dlon = abs(float(lat[1] - lat[0])), abs(float(lon[1] - lon[0]))
    size = (1, max(1, round(box_deg[0] / dlat)), max(1, round(box_deg[1] / dlon)))
    area = hit * area_weights(an, note=False)  # a regular grid: exact cell areas of latitude bands
    score = uniform_filter(area.values.astype(float), size=size, mode=("nearest", "nearest", "wrap"))
    cases: list[Case] = []
    taken: list[np.datetime64] = []
    for flat in np.argsort(score, axis=None)[::-1]:
        it, ilat, ilon = np.unravel_index(flat, score.shape)
        t = hit[TIME].values[it]
        if score[it, ilat, ilon] <= 0 or len(cases) >= n:
            break
        if any(abs(t - s) < np.timedelta64(int(min_separation_days * 86400), "s") for s in taken):
            continue
        taken.append(t)
        c_lat, c_lon = float(lat[ilat]), float(lon[ilon])
        region = _box(
            c_lat - box_deg[0] / 2,
            c_lat + box_deg[0] / 2,
            c_lon - box_deg[1] / 2,
            c_lon + box_deg[1] / 2,
            0.0,
        )
        day = np.datetime64(t, "D")
        word = "high" if tail == "upper" else "low"
        cases.append(
            Case(
                name=f"{variable}{level:g} {word} {day} {_where(c_lat, c_lon)}",
                variable=variable,
                level=float(level),
                lead=parse_lead(lead),
                region=region,
                start=np.datetime64(t, "ns"),
                end=np.datetime64(t, "ns"),
                threshold=Threshold(quantile=quantile, tail=tail),
                description=f"found automatically: largest area beyond the climatological "
                f"q{100 * quantile:g} of {variable}{level:g} in a {box_deg[0]:g}°×{box_deg[1]:g}° box",
            )
        )
    return cases


def storm_cases(
    oracle: xr.Dataset,
    *,
    lead: LeadLike = "48h",
    variable: str = "z",
    level: float = 500.0,
    n: int | None = None,
    margin_deg: float = 10.0,
    init_times: np.ndarray | None = None,
) -> list[Case]:
    """Cases for the stored storms of the synthetic ``oracle.nc``, strongest first.

    For each storm of the ``storm_*`` table, the ``event_mask`` points at ``lead`` (hours or a
    duration) that
    lie within 30° of latitude and 80° of longitude of its genesis and between genesis and
    end of life give the case: their valid dates (the window) and their box plus
    ``margin_deg``. Strength is ``storm_amplitude``; storms never in the mask at this lead (or
    at ``init_times``, when given) are left out. The threshold is the climatological 10% (z,
    a low) or 90% (other variables, a warm core) quantile.
    """
    need = [
        "event_mask",
        "storm_genesis_time",
        "storm_genesis_latitude",
        "storm_genesis_longitude",
        "storm_lifetime",
        "storm_amplitude",
    ]
    missing = [v for v in need if v not in oracle]
    if missing:
        raise EnsmlError(f"storm_cases: the oracle has no {', '.join(missing)} (not from ensml data synth?)")
    lead = parse_lead(lead)
    if lead not in oracle[LEAD_TIME].values:
        raise EnsmlError(f"storm_cases: the oracle has no lead time {format_lead(lead)}")
    mask = oracle["event_mask"].sel({LEAD_TIME: lead})
    _regular_grid(mask, "storm_cases")
    if init_times is not None:
        mask = mask.sel({INIT_TIME: np.intersect1d(mask[INIT_TIME].values, init_times)})
    mask = mask.load()
    valid = mask[INIT_TIME].values + lead
    lat, lon = mask[LATITUDE].values, mask[LONGITUDE].values
    order = np.argsort(-oracle["storm_amplitude"].values)
    cases: list[Case] = []
    for s in order:
        g_time = oracle["storm_genesis_time"].values[s]
        life = parse_lead(f"{int(float(oracle['storm_lifetime'].values[s]) * 3600)}s")  # hours in the file
        g_lat = float(oracle["storm_genesis_latitude"].values[s])
        g_lon = float(oracle["storm_genesis_longitude"].values[s])
        when = (valid >= g_time) & (valid <= g_time + life)
        near = (np.abs(lat - g_lat) <= 30)[:, None] & (np.abs((lon - g_lon + 180) % 360 - 180) <= 80)[None]
        hit = mask.values[when].astype(bool) & near[None]
        if not hit.any():
            continue
        it, ilat, ilon = np.nonzero(hit)
        west, east = lon_span(lon[ilon])
        region = _box(float(lat[ilat].min()), float(lat[ilat].max()), west, east, margin_deg)
        times = valid[when][np.unique(it)]
        amp = float(oracle["storm_amplitude"].values[s])
        hemi = "southern" if g_lat < 0 else "northern"
        day = np.datetime64(times[0], "D")
        cases.append(
            Case(
                name=f"storm {day} {hemi} hemisphere {variable}{level:g}",
                variable=variable,
                level=float(level),
                lead=lead,
                region=region,
                start=times.min(),
                end=times.max(),
                threshold=Threshold(
                    quantile=0.1 if variable == "z" else 0.9, tail="lower" if variable == "z" else "upper"
                ),
                description=f"stored storm #{int(s)} of the synthetic data (amplitude {amp:.2f}, "
                f"genesis {np.datetime64(g_time, 'h')} at {_where(g_lat, g_lon, 1)})",
            )
        )
        if n is not None and len(cases) >= n:
            break
    return cases
