"""The two-step members of the generative benchmark: one set of margins, three dependence templates.

Every two-step method starts from the same per-point predictive distributions (the best
parametric network's, :class:`~ensml.train.tasks.MixedTask`) and takes the same N quantiles of
each, at ECC's centred levels (i − ½)/N; they differ only in how they order them across the
grid, as in Chen, Janke, Steinke & Lerch (2024):

* **ECC-Q**: in the rank order of the raw subset's members at each point (Schefzik,
  Thorarinsdottir & Gneiting 2013), the K members ensml's users run; with N > K each raw
  member's rank is used N / K times (:func:`ensml.postprocess.ecc.ecc_template`), ties broken at
  random;
* **Schaake shuffle**: in the rank order of N past analyses (Clark et al. 2004): the training
  period's verifying analyses closest in day of year to the forecast's valid time;
* **Gaussian copula**: the quantile function of each point applied to Φ(z), z drawn from a
  normal vector with the spatial correlation of the parametric model's normal scores
  Φ⁻¹(PIT) on the validation period (Möller, Lenkoski & Thorarinsdottir 2013); its members are
  random draws, not quantiles.
"""

from __future__ import annotations

import numpy as np

from ensml.postprocess.copulas import (
    GaussianCopula,
    fit_gaussian_copula,
    gaussian_copula_members,
    pit_normal_scores,
    schaake_shuffle,
)
from ensml.postprocess.ecc import ecc_levels, ecc_quantile_members
from ensml.scores.distributions import Family

#: The two-step methods, by row name.
ECC, SCHAAKE, COPULA = "ECC-Q", "Schaake shuffle", "Gaussian copula"


def margins(family: Family, params: dict[str, np.ndarray], n: int) -> np.ndarray:
    """The N centred quantiles (init, N, D) of each point's distribution (``params`` (init, D))."""
    levels = ecc_levels(n, "centred")
    u = np.broadcast_to(levels[None, :, None], (next(iter(params.values())).shape[0], n, 1))
    at = {p: v[:, None, :] for p, v in params.items()}
    return np.asarray(family.ppf(at, u), dtype=np.float64)


def ecc(quantiles: np.ndarray, raw: np.ndarray, seed: int) -> np.ndarray:
    """ECC-Q: ``quantiles`` (init, N, D) in the rank order of ``raw`` (init, K, D)."""
    rng = np.random.default_rng(seed)
    return ecc_quantile_members(quantiles, raw, quantiles.shape[1], "centred", axis=1, rng=rng)


def templates_by_day(valid: np.ndarray, history: np.ndarray, n: int) -> np.ndarray:
    """For each of ``valid`` times, the indices of the ``n`` times of ``history`` closest in day of
    year (ties: the earlier), the Schaake shuffle's templates."""

    def day(t: np.ndarray) -> np.ndarray:
        return (t.astype("datetime64[D]") - t.astype("datetime64[Y]")).astype(np.int64)

    distance = np.abs(day(valid)[:, None] - day(history)[None, :])
    distance = np.minimum(distance, 365 - distance)
    return np.argsort(distance, axis=1, kind="stable")[:, :n]


def schaake(quantiles: np.ndarray, templates: np.ndarray, seed: int) -> np.ndarray:
    """The Schaake shuffle of ``quantiles`` (init, N, D) by ``templates`` (init, N, D)."""
    rng = np.random.default_rng(seed)
    return schaake_shuffle(quantiles, templates, rng=rng)


def fit_copula(
    family: Family, params: dict[str, np.ndarray], obs: np.ndarray, shrinkage: float | None, seed: int
) -> GaussianCopula:
    """The Gaussian copula of ``obs`` (cases, D) under ``params``: fitted to Φ⁻¹ of their PIT
    (randomised at a point mass; :func:`ensml.postprocess.copulas.pit_normal_scores`)."""
    scores = pit_normal_scores(family.pit(params, obs, rng=np.random.default_rng(seed)))
    return fit_gaussian_copula(scores, shrinkage=shrinkage)


def copula(
    family: Family, params: dict[str, np.ndarray], fitted: GaussianCopula, n: int, seed: int
) -> np.ndarray:
    """N members (init, N, D) of ``params`` (init, D) coupled by the Gaussian copula ``fitted``
    (:func:`fit_copula`), drawn reproducibly from ``seed``."""
    rng = np.random.default_rng(seed)
    n_init = next(iter(params.values())).shape[0]
    out = []
    for i in range(n_init):
        at = {p: v[i][None, :] for p, v in params.items()}

        def quantile_function(u: np.ndarray, at: dict = at) -> np.ndarray:
            return np.asarray(family.ppf(at, u), dtype=np.float64)

        out.append(gaussian_copula_members(quantile_function, fitted, n, rng))
    return np.stack(out)


__all__ = [
    "COPULA",
    "ECC",
    "SCHAAKE",
    "copula",
    "ecc",
    "fit_copula",
    "margins",
    "schaake",
    "templates_by_day",
]
