"""Skill scores against a named reference, and bootstrap confidence intervals over init dates.

NaN/Inf as every ensml score (:mod:`ensml.scores`): a NaN score is a missing value (NaN skill;
left out of bootstrap means); an infinite score is an error.
"""

from __future__ import annotations

import warnings
from collections.abc import Hashable, Iterable

import numpy as np
import xarray as xr

from ensml.errors import EnsmlError
from ensml.names import INIT_TIME
from ensml.scores.reduce import check_no_inf, reduce_score, require_dataarray, resolve_reduce_dims

__all__ = ["bootstrap_ci", "skill_score"]

MODEL = "model"


def skill_score(
    score: xr.DataArray,
    reference: str | xr.DataArray,
    *,
    model_dim: str = MODEL,
    perfect: float = 0.0,
) -> xr.DataArray:
    r"""Skill score of a (negatively oriented) score against a reference forecast.

    .. math:: \mathrm{SS} = \frac{S - S_\mathrm{ref}}{S_\mathrm{perfect} - S_\mathrm{ref}}
              = 1 - S / S_\mathrm{ref} \quad (S_\mathrm{perfect} = 0)

    (Wilks 2019, §9.1.4): 1 is perfect, 0 no better than the reference, < 0 worse.

    Parameters
    ----------
    score : xr.DataArray
        Reduced scores, e.g. CRPS, with one entry per model along ``model_dim`` when
        ``reference`` is a name.
    reference : str or xr.DataArray
        The name of the reference along ``model_dim`` (e.g. ``"raw"`` or ``"emos"``), or the
        reference's scores themselves.
    perfect : float
        Score of a perfect forecast (0 for CRPS, Brier, RMSE).

    Returns
    -------
    xr.DataArray
        Dimensionless skill, attribute ``reference`` naming the reference; NaN where the
        reference's score equals the perfect score.
    """
    require_dataarray(score, "skill_score", "score")
    score = check_no_inf(score, "skill_score", "score")
    if not np.isfinite(perfect):
        raise EnsmlError(f"skill_score: perfect must be finite, got {perfect}")
    if isinstance(reference, str):
        if model_dim not in score.dims:
            raise EnsmlError(
                f"skill_score: score has no '{model_dim}' dimension to find reference '{reference}'"
            )
        names = [str(v) for v in score[model_dim].values]
        if reference not in names:
            raise EnsmlError(
                f"skill_score: reference '{reference}' not among the models ({', '.join(names)})"
            )
        ref = score.sel({model_dim: reference}, drop=True)
        name = reference
    else:
        require_dataarray(reference, "skill_score", "reference")
        ref = check_no_inf(reference, "skill_score", "reference")
        name = str(reference.name or "reference")
    denom = perfect - ref
    ss = (score - ref) / denom.where(denom != 0) + 0.0  # + 0.0: no "-0" for the reference itself
    return ss.rename("skill_score").assign_attrs(units="1", reference=name)


def bootstrap_ci(
    score: xr.DataArray,
    *,
    reference: xr.DataArray | None = None,
    dim: str = INIT_TIME,
    reduce_dims: str | Iterable[Hashable] | None = None,
    preserve_dims: str | Iterable[Hashable] | None = None,
    weights: xr.DataArray | None = None,
    n_resamples: int = 1000,
    confidence: float = 0.95,
    seed: int = 0,
) -> xr.Dataset:
    """Percentile bootstrap confidence interval of a mean score, resampling init dates.

    The pointwise ``score`` is first averaged (weighted, NaN-skipping) over the reduced dims
    other than ``dim``; then ``n_resamples`` sets of init dates are drawn with replacement
    (dates, not points, since points on one date are correlated; Efron & Tibshirani 1993,
    §13) and the mean over ``dim`` is taken for each. With ``reference`` (pointwise scores of
    the reference on the same points) the statistic is the skill ``1 − S/S_ref`` with the
    same dates drawn for both (a paired bootstrap).

    Returns
    -------
    xr.Dataset
        ``estimate`` (on all dates), ``lower`` and ``upper`` (the ``(1 ± confidence)/2``
        quantiles of the resampled statistic) over the preserved dims; attrs record
        ``confidence``, ``n_resamples`` and ``seed``.
    """
    require_dataarray(score, "bootstrap_ci", "score")
    score = check_no_inf(score, "bootstrap_ci", "score")
    if dim not in score.dims:
        raise EnsmlError(f"bootstrap_ci: score has no '{dim}' dimension to resample")
    if not 0 < confidence < 1:
        raise EnsmlError(f"bootstrap_ci: confidence must be in (0, 1), got {confidence}")
    if int(n_resamples) < 1:
        raise EnsmlError(f"bootstrap_ci: n_resamples must be >= 1, got {n_resamples}")
    dims = resolve_reduce_dims(score.dims, reduce_dims, preserve_dims, "bootstrap_ci")
    if dim not in dims:
        raise EnsmlError(f"bootstrap_ci: '{dim}' must be among the reduced dims to bootstrap over it")
    inner = [d for d in dims if d != dim]
    keep = [d for d in score.dims if d not in dims]

    def per_date(s: xr.DataArray) -> xr.DataArray:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)
            out = reduce_score(s, reduce_dims=inner, weights=weights, func="bootstrap_ci") if inner else s
        return out.transpose(dim, *keep).compute()

    series = [per_date(score)]
    if reference is not None:
        require_dataarray(reference, "bootstrap_ci", "reference")
        reference = check_no_inf(reference, "bootstrap_ci", "reference")
        if set(reference.dims) != set(score.dims):
            raise EnsmlError("bootstrap_ci: reference must have the same dims as score")
        series.append(per_date(reference))
    n = series[0].sizes[dim]
    rng = np.random.default_rng(seed)
    # counts[b, t]: how often date t is drawn in resample b
    counts = np.zeros((int(n_resamples), n))
    idx = rng.integers(0, n, size=(int(n_resamples), n))
    np.add.at(counts, (np.repeat(np.arange(int(n_resamples)), n), idx.ravel()), 1.0)

    def means(v: np.ndarray, c: np.ndarray) -> np.ndarray:
        flat = v.reshape(n, -1)
        ok = np.isfinite(flat)
        with np.errstate(invalid="ignore", divide="ignore"):
            return ((c @ np.where(ok, flat, 0.0)) / (c @ ok)).reshape(c.shape[0], *v.shape[1:])

    vals = [s.values.astype(np.float64) for s in series]
    ones = np.ones((1, n))
    if reference is None:
        est, boot = means(vals[0], ones)[0], means(vals[0], counts)
    else:
        est = 1 - means(vals[0], ones)[0] / means(vals[1], ones)[0]
        boot = 1 - means(vals[0], counts) / means(vals[1], counts)
    alpha = (1 - confidence) / 2
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        lo, hi = np.nanquantile(boot, [alpha, 1 - alpha], axis=0)
    coords = {c: v for c, v in series[0].coords.items() if dim not in v.dims}
    make = lambda a: xr.DataArray(a, dims=keep, coords=coords)  # noqa: E731
    return xr.Dataset({"estimate": make(est), "lower": make(lo), "upper": make(hi)}).assign_attrs(
        confidence=confidence, n_resamples=int(n_resamples), seed=seed, resampled_dim=dim
    )
