r"""Quantile (pinball) and interval scores, for quantile products such as ``<var>_quantile``.

.. math::

    \mathrm{QS}_\tau(q, y) = (\mathbb 1\{y < q\} - \tau)\,(q - y), \qquad
    \mathrm{IS}_\alpha(l, u, y) = (u - l) + \tfrac{2}{\alpha}(l - y)\,\mathbb 1\{y < l\}
        + \tfrac{2}{\alpha}(y - u)\,\mathbb 1\{y > u\}

(Koenker and Bassett 1978; Gneiting and Raftery 2007, eq. 43), negatively oriented. The quantile
score is proper for the τ-quantile; twice its mean over all levels τ ∈ (0, 1) is the CRPS. The
interval score of the central (1 − α) interval rewards a narrow interval and charges 2/α per
unit by which the observation falls outside it.

NaN/Inf as every ensml score (:mod:`ensml.scores`): a NaN forecast or observation gives NaN (a
missing point, left out of means); ±Inf is an error.
"""

from __future__ import annotations

from collections.abc import Hashable, Iterable

import numpy as np
import xarray as xr

from ensml.errors import EnsmlError
from ensml.names import QUANTILE
from ensml.scores.reduce import aligned_fields, check_fcst_obs, check_no_inf, reduce_score


def quantile_score(
    fcst: xr.DataArray,
    obs: xr.DataArray,
    *,
    quantile_dim: str = QUANTILE,
    reduce_dims: str | Iterable[Hashable] | None = None,
    preserve_dims: str | Iterable[Hashable] | None = None,
    weights: xr.DataArray | None = None,
) -> xr.DataArray:
    r"""Quantile (pinball) score of forecast quantiles, at each level τ of ``quantile_dim``.

    Parameters
    ----------
    fcst : xr.DataArray
        Forecast quantiles: the observation's dims plus ``quantile_dim``, whose coordinate holds
        the levels τ, each in (0, 1) (``<var>_quantile`` of ``ensml postprocess``).
    obs : xr.DataArray
        The observation.
    quantile_dim
        The dimension of the levels.
    reduce_dims, preserve_dims, weights
        As every ensml score (:func:`ensml.scores.reduce.reduce_score`); with neither reduce nor
        preserve, the mean over all dims, levels included. ``preserve_dims=quantile_dim`` gives
        the score of each level.

    Returns
    -------
    xr.DataArray
        ``quantile_score``, in the observation's units; lower is better.
    """
    func = "quantile_score"
    if isinstance(fcst, xr.DataArray) and quantile_dim not in fcst.dims:
        dims = ", ".join(map(str, fcst.dims))
        raise EnsmlError(
            f"{func}: forecast has no quantile dimension '{quantile_dim}' (dims: {dims}); "
            "pass quantile_dim=..."
        )
    fcst, obs = check_fcst_obs(fcst, obs, func, quantile_dim)
    if quantile_dim not in fcst.coords:
        raise EnsmlError(f"{func}: forecast has no coordinate '{quantile_dim}' giving the quantile levels")
    tau = fcst[quantile_dim].astype(np.float64)
    if not bool(((tau > 0) & (tau < 1)).all()):
        raise EnsmlError(f"{func}: quantile levels must be in (0, 1), got {tau.values.tolist()}")
    below = (obs < fcst).astype(np.float64)
    score = ((below - tau) * (fcst - obs)).where(fcst.notnull() & obs.notnull())
    return reduce_score(
        score.rename("quantile_score"),
        reduce_dims=reduce_dims,
        preserve_dims=preserve_dims,
        weights=weights,
        func=func,
    )


def interval_score(
    lower: xr.DataArray,
    upper: xr.DataArray,
    obs: xr.DataArray,
    alpha: float,
    *,
    reduce_dims: str | Iterable[Hashable] | None = None,
    preserve_dims: str | Iterable[Hashable] | None = None,
    weights: xr.DataArray | None = None,
) -> xr.DataArray:
    r"""Interval score of the central (1 − α) prediction interval ``[lower, upper]``.

    Parameters
    ----------
    lower, upper : xr.DataArray
        The interval's bounds, e.g. the 0.05 and 0.95 quantiles for ``alpha=0.1``
        (``ds["t_quantile"].sel(quantile=0.05)``); dims are matched by name and must be those of
        ``obs`` (the bounds may have fewer). ``lower > upper`` anywhere is an error.
    obs : xr.DataArray
        The observation.
    alpha
        One minus the interval's nominal coverage, in (0, 1).
    reduce_dims, preserve_dims, weights
        As every ensml score (:func:`ensml.scores.reduce.reduce_score`).

    Returns
    -------
    xr.DataArray
        ``interval_score``, in the observation's units; lower is better.
    """
    func = "interval_score"
    if not 0 < float(alpha) < 1:
        raise EnsmlError(f"{func}: alpha must be in (0, 1), got {alpha!r}")
    lower, upper, obs = aligned_fields({"lower": lower, "upper": upper, "obs": obs}, func)
    lower, upper, obs = (
        check_no_inf(a, func, n) for a, n in ((lower, "lower"), (upper, "upper"), (obs, "obs"))
    )
    crossed = int((lower > upper).sum())
    if crossed:
        raise EnsmlError(f"{func}: lower is above upper at {crossed} points")
    a = float(alpha)
    score = (upper - lower) + (2 / a) * (lower - obs).clip(min=0) + (2 / a) * (obs - upper).clip(min=0)
    return reduce_score(
        score.rename("interval_score"),
        reduce_dims=reduce_dims,
        preserve_dims=preserve_dims,
        weights=weights,
        func=func,
    )


__all__ = ["interval_score", "quantile_score"]
