r"""Logarithmic and Dawid–Sebastiani scores of a Gaussian forecast :math:`N(\mu, \sigma^2)`.

.. math::

    \mathrm{LogS} = -\log \varphi_{\mu,\sigma}(y)
        = \tfrac12 \log 2\pi + \log\sigma + \tfrac12 z^2, \qquad
    \mathrm{DSS} = z^2 + 2 \log\sigma, \qquad z = (y - \mu)/\sigma

(Good 1952; Dawid and Sebastiani 1999; Gneiting and Raftery 2007), both negatively oriented
(lower is better). For a Gaussian, :math:`\mathrm{DSS} = 2\,\mathrm{LogS} - \log 2\pi`: the two
rank forecasts alike, DSS being the log score of any forecast's first two moments. Unlike the
CRPS they punish an overconfident σ without bound, so they answer "is the spread right" more
sharply; they need σ > 0.

NaN/Inf as every ensml score (:mod:`ensml.scores`): NaN in μ, σ or y gives NaN (a missing point,
left out of means); ±Inf in any of them is an error, as is σ ≤ 0.
"""

from __future__ import annotations

import math
from collections.abc import Hashable, Iterable
from typing import Literal

import numpy as np
import xarray as xr

from ensml.errors import EnsmlError
from ensml.scores.reduce import aligned_fields, check_no_inf, reduce_score

_HALF_LOG_2PI = 0.5 * math.log(2.0 * math.pi)
Kind = Literal["log", "dss"]


def _pointwise(mu: np.ndarray, sigma: np.ndarray, obs: np.ndarray, *, kind: Kind, func: str) -> np.ndarray:
    """LogS or DSS of numpy arrays (σ ≤ 0 is an error; NaN stays NaN)."""
    m, s, y = np.broadcast_arrays(*(np.asarray(a, dtype=np.float64) for a in (mu, sigma, obs)))
    bad = int(np.count_nonzero(s <= 0))
    if bad:
        raise EnsmlError(f"{func}: sigma must be > 0 ({bad} values are not; min {np.nanmin(s):.6g})")
    z = (y - m) / s
    out = z * z + 2.0 * np.log(s) if kind == "dss" else _HALF_LOG_2PI + np.log(s) + 0.5 * z * z
    dtype = np.result_type(np.asarray(mu).dtype, np.asarray(sigma).dtype, np.asarray(obs).dtype, np.float32)
    return out.astype(dtype if np.issubdtype(dtype, np.floating) else np.float64, copy=False)


def _score(
    mu: xr.DataArray,
    sigma: xr.DataArray,
    obs: xr.DataArray,
    kind: Kind,
    func: str,
    reduce: dict,
) -> xr.DataArray:
    mu, sigma, obs = aligned_fields({"mu": mu, "sigma": sigma, "obs": obs}, func)
    mu, sigma, obs = (check_no_inf(a, func, n) for a, n in ((mu, "mu"), (sigma, "sigma"), (obs, "obs")))
    score = xr.apply_ufunc(
        _pointwise,
        mu,
        sigma,
        obs,
        kwargs={"kind": kind, "func": func},
        dask="parallelized",
        output_dtypes=[np.result_type(mu.dtype, sigma.dtype, obs.dtype, np.float32)],
        keep_attrs=False,
    ).rename("logs" if kind == "log" else "dss")
    return reduce_score(score, **reduce, func=func)


def log_score_gaussian(
    mu: xr.DataArray,
    sigma: xr.DataArray,
    obs: xr.DataArray,
    *,
    reduce_dims: str | Iterable[Hashable] | None = None,
    preserve_dims: str | Iterable[Hashable] | None = None,
    weights: xr.DataArray | None = None,
) -> xr.DataArray:
    r"""Logarithmic (ignorance) score :math:`-\log \varphi_{\mu,\sigma}(y)` of a Gaussian forecast.

    Parameters
    ----------
    mu, sigma, obs : xr.DataArray
        Gaussian mean, standard deviation (> 0) and observation, e.g. ``<var>_mean`` and
        ``<var>_std`` of ``ensml predict`` or ``ensml postprocess`` and the analysis; dims are
        matched by name and must be those of ``obs`` (``mu``/``sigma`` may have fewer).
    reduce_dims, preserve_dims, weights
        As every ensml score (:func:`ensml.scores.reduce.reduce_score`): the NaN-skipping
        (weighted) mean over ``reduce_dims``, or over every dim but ``preserve_dims``; with
        neither, over all dims.

    Returns
    -------
    xr.DataArray
        ``logs`` in nats; lower is better.
    """
    reduce = {"reduce_dims": reduce_dims, "preserve_dims": preserve_dims, "weights": weights}
    return _score(mu, sigma, obs, "log", "log_score_gaussian", reduce)


def dawid_sebastiani_score(
    mu: xr.DataArray,
    sigma: xr.DataArray,
    obs: xr.DataArray,
    *,
    reduce_dims: str | Iterable[Hashable] | None = None,
    preserve_dims: str | Iterable[Hashable] | None = None,
    weights: xr.DataArray | None = None,
) -> xr.DataArray:
    r"""Dawid–Sebastiani score :math:`((y-\mu)/\sigma)^2 + 2\log\sigma` of a forecast's mean and std.

    Parameters and reduction as :func:`log_score_gaussian`; returns ``dss``, lower is better.
    The score of any forecast that has a mean and a std (not only a Gaussian one).
    """
    reduce = {"reduce_dims": reduce_dims, "preserve_dims": preserve_dims, "weights": weights}
    return _score(mu, sigma, obs, "dss", "dawid_sebastiani_score", reduce)


__all__ = ["dawid_sebastiani_score", "log_score_gaussian"]
