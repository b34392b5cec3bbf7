r"""Point-forecast scores of precipitation: SEEPS and the fractions skill score.

Both judge a single field per forecast (for a predictive distribution or an ensemble, e.g. its
median: :func:`ensml.scores.predictive.median_family`), and both come from the ``scores``
package (Leeuwenburg et al. 2024, JOSS 9, 6889), wrapped here with ensml's conventions:

- :func:`seeps` (Rodwell et al. 2010): the stable equitable error in probability space of the
  three categories dry / light / heavy, with the climatology of each point from
  :func:`seeps_climatology`;
- :func:`fractions_skill_score` (Roberts & Lean 2008): how well the forecast places the events
  ``y > t`` within a neighbourhood, at each threshold.

NaN: a NaN forecast or observation is a missing point in SEEPS (left out of means, as every
ensml score); the fractions skill score needs whole fields and refuses NaN.
"""

from __future__ import annotations

import warnings
from collections.abc import Hashable, Iterable, Sequence

import numpy as np
import xarray as xr

from ensml.errors import EnsmlError
from ensml.scores.probability import _thresholds
from ensml.scores.reduce import check_no_inf, reduce_score, require_dataarray

__all__ = ["DRY_THRESHOLD", "fractions_skill_score", "seeps", "seeps_climatology"]

#: Precipitation at or below this is "dry" in SEEPS (mm, i.e. kg m-2, per 24 h; Rodwell et al. 2010).
DRY_THRESHOLD = 0.2
#: The light/heavy boundary of SEEPS: the climatological quantile of wet amounts at which light
#: precipitation is twice as likely as heavy (p2 = 2 p3).
LIGHT_HEAVY_QUANTILE = 2.0 / 3.0


def seeps_climatology(obs: xr.DataArray, dim: str, *, dry_threshold: float = DRY_THRESHOLD) -> xr.Dataset:
    r"""The climatology of SEEPS at each point, from observations along ``dim`` (e.g. ``time``).

    .. math::
        p_1 = P(y \le d), \qquad t_{lh} = Q_{2/3}(y \mid y > d)

    with ``d = dry_threshold``: the probability of a dry day and the amount that splits the wet
    days into light (two thirds, at or below) and heavy (one third) (Rodwell et al. 2010,
    QJRMS 136, 1344, §2). NaN observations are left out; a point with no observation, or no wet
    day, has NaN there (SEEPS is then not scored at that point).

    Returns
    -------
    xr.Dataset
        ``prob_dry`` (1) and ``light_heavy_threshold`` (units of ``obs``), over the other dims,
        with the number of observations used (``n_climate``).
    """
    require_dataarray(obs, "seeps_climatology", "observation")
    if dim not in obs.dims:
        raise EnsmlError(
            f"seeps_climatology: the observation has no '{dim}' dim (dims: {', '.join(map(str, obs.dims))})"
        )
    obs = check_no_inf(obs, "seeps_climatology", "observation")
    n = obs.notnull().sum(dim)
    dry = (obs <= dry_threshold).astype(np.float64).where(obs.notnull())
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # a point without any wet day
        p1 = dry.sum(dim) / n.where(n > 0)
        wet = obs.where(obs > dry_threshold).astype(np.float64)
        split = wet.quantile(LIGHT_HEAVY_QUANTILE, dim=dim, skipna=True).drop_vars("quantile")
    units = {k: v for k, v in obs.attrs.items() if k == "units"}
    return xr.Dataset(
        {
            "prob_dry": p1.assign_attrs(units="1", long_name="climatological probability of a dry day"),
            "light_heavy_threshold": split.assign_attrs(
                **units, long_name="climatological boundary of light and heavy precipitation"
            ),
            "n_climate": n.assign_attrs(units="1", long_name="observations in the climatology"),
        },
        attrs={"dry_threshold": dry_threshold},
    )


def seeps(
    fcst: xr.DataArray,
    obs: xr.DataArray,
    climatology: xr.Dataset,
    *,
    dry_threshold: float = DRY_THRESHOLD,
    mask_clim_extremes: bool = True,
    reduce_dims: str | Iterable[Hashable] | None = None,
    preserve_dims: str | Iterable[Hashable] | None = None,
    weights: xr.DataArray | None = None,
) -> xr.DataArray:
    r"""SEEPS of point forecasts of precipitation (Rodwell et al. 2010, QJRMS 136, 1344, eq. 15).

    Forecast and observation fall into dry (``≤ dry_threshold``), light (``≤`` the climatology's
    ``light_heavy_threshold``) and heavy; the score is the entry of the penalty matrix

    .. math::
        S = \frac12 \begin{pmatrix}
        0 & \frac{1}{1-p_1} & \frac{1}{p_3}+\frac{1}{1-p_1} \\
        \frac{1}{p_1} & 0 & \frac{1}{p_3} \\
        \frac{1}{p_1}+\frac{1}{1-p_3} & \frac{1}{1-p_3} & 0
        \end{pmatrix}, \qquad p_3 = (1 - p_1)/3

    (rows: forecast category, columns: observed), 0 for a perfect forecast, 1 on average for a
    climatological one; lower is better. Computed by ``scores.categorical.seeps``. With
    ``mask_clim_extremes`` (default) points where :math:`p_1 \notin [0.1, 0.85]` are not scored
    (NaN), as Rodwell et al. recommend; points with :math:`p_1` exactly 0 or 1 never are.

    Parameters
    ----------
    fcst, obs
        Point forecasts (e.g. a predictive median) and observations, same dims, in the units of
        the climatology; NaN is a missing point.
    climatology
        :func:`seeps_climatology` of observations of the same points (a training period).
    dry_threshold
        The dry/light boundary, the climatology's.
    reduce_dims, preserve_dims, weights
        As every ensml score (:func:`ensml.scores.reduce.reduce_score`).
    """
    from scores.categorical import seeps as scores_seeps

    func = "seeps"
    require_dataarray(fcst, func, "forecast")
    require_dataarray(obs, func, "observation")
    if set(fcst.dims) != set(obs.dims):
        raise EnsmlError(f"{func}: forecast dims {fcst.dims} differ from the observation's {obs.dims}")
    fcst, obs = check_no_inf(fcst, func, "forecast"), check_no_inf(obs, func, "observation")
    p1 = climatology["prob_dry"]
    p1 = p1.where((p1 > 0) & (p1 < 1))  # all dry or all wet: no penalty matrix
    score = scores_seeps(
        fcst,
        obs,
        p1,
        climatology["light_heavy_threshold"],
        dry_light_threshold=dry_threshold,
        mask_clim_extremes=mask_clim_extremes,
        preserve_dims="all",
    )
    score = score.where(fcst.notnull() & obs.notnull()).transpose(*obs.dims, ...)
    kw = {"reduce_dims": reduce_dims, "preserve_dims": preserve_dims, "weights": weights}
    out = reduce_score(score.rename("seeps"), **kw, func=func)
    return out.assign_attrs(units="1", long_name="stable equitable error in probability space")


def fractions_skill_score(
    fcst: xr.DataArray,
    obs: xr.DataArray,
    thresholds: float | Sequence[float],
    *,
    window: tuple[int, int],
    spatial_dims: tuple[str, str],
    preserve_dims: Sequence[Hashable] = (),
) -> xr.DataArray:
    r"""Fractions skill score of the events ``y > t`` over windows of ``window`` grid points.

    .. math::
        \mathrm{FSS} = 1 - \frac{\sum_w (P_f - P_o)^2}{\sum_w P_f^2 + \sum_w P_o^2}

    with :math:`P_f`, :math:`P_o` the fractions of the window's points where the forecast
    (observation) exceeds ``t``, the sums over every window position inside the field (no
    padding) and over the fields of the reduced dims (the aggregation of Roberts & Lean 2008,
    MWR 136, 78, as Mittermaier 2021, MWR 149, 3491, recommends); 1 perfect, 0 no skill at that
    scale. Computed by ``scores.spatial.fss_2d``. NaN where neither field has an event.

    Parameters
    ----------
    fcst, obs
        Point forecasts and observations with the same dims, two of them ``spatial_dims``; no
        NaN (the windows need whole fields).
    thresholds
        Event thresholds, in the units of ``obs``.
    window
        The window's size in grid points along ``spatial_dims``.
    preserve_dims
        Dims kept (every other non-spatial dim is aggregated over).

    Returns
    -------
    xr.DataArray
        The score (1) with a ``threshold`` dim and ``preserve_dims``.
    """
    from scores.spatial import fss_2d

    func = "fractions_skill_score"
    require_dataarray(fcst, func, "forecast")
    require_dataarray(obs, func, "observation")
    if set(fcst.dims) != set(obs.dims):
        raise EnsmlError(f"{func}: forecast dims {fcst.dims} differ from the observation's {obs.dims}")
    missing = [d for d in spatial_dims if d not in obs.dims]
    if missing or len(spatial_dims) != 2:
        raise EnsmlError(f"{func}: spatial_dims must be two dims of the fields, got {spatial_dims}")
    for d, n in zip(spatial_dims, window):
        if not 1 <= int(n) <= obs.sizes[d]:
            raise EnsmlError(
                f"{func}: window {tuple(window)} does not fit the field along '{d}' ({obs.sizes[d]})"
            )
    for name, a in (("forecast", fcst), ("observation", obs)):
        if bool(a.isnull().any()):
            raise EnsmlError(f"{func}: the {name} holds NaN; the fractions skill score needs whole fields")
    t = _thresholds(thresholds, func)
    keep = list(preserve_dims)
    out = []
    for v in t.values:
        with warnings.catch_warnings(), np.errstate(invalid="ignore", divide="ignore"):
            warnings.simplefilter("ignore", RuntimeWarning)  # no event in either field: 0/0
            out.append(
                fss_2d(
                    fcst.astype(np.float64),
                    obs.astype(np.float64),
                    event_threshold=float(v),
                    window_size=(int(window[0]), int(window[1])),
                    spatial_dims=tuple(spatial_dims),
                    reduce_dims=[d for d in obs.dims if d not in keep],
                )
            )
    score = xr.concat(out, dim=t)
    return score.rename("fss").assign_attrs(units="1", long_name="fractions skill score", window=list(window))
