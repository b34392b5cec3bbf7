"""Quantile functions at ``Φ(ζ)`` for the copulas of :mod:`ensml.data.synth.precip_wind`.

A draw ``F⁻¹(Φ(ζ))`` of a spatially correlated standard normal ``ζ`` has the distribution ``F``
at every point and the field's coherence. The gamma and beta quantiles are interpolated in
tables of ``log F⁻¹(Φ(ζ))`` on a fine grid of ``ζ`` (relative error below 1e-6 in float64,
1e-5 in float32, far below the stored precision; scipy's inverses would take seconds per
million points); the truncated normal's is closed form.
"""

from __future__ import annotations

from functools import lru_cache

import numpy as np
from scipy import special

ZETA_MAX, ZETA_N = 9.0, 8193  # quantile tables at Φ(ζ), ζ = -9 … 9 (1e-19 … 1 - 1e-19)
ZETA = np.linspace(-ZETA_MAX, ZETA_MAX, ZETA_N)
_BELOW = ZETA < 0


@lru_cache(maxsize=64)
def _gamma_table(shape: float) -> np.ndarray:
    """``log`` quantiles of Gamma(shape, 1) at ``Φ(ZETA)``, each from the nearer tail."""
    lo = special.gammaincinv(shape, special.ndtr(ZETA[_BELOW]))
    hi = special.gammainccinv(shape, special.ndtr(-ZETA[~_BELOW]))
    return np.log(np.concatenate([lo, hi]))


@lru_cache(maxsize=256)
def _beta_table(a: float, b: float) -> np.ndarray:
    """``log`` quantiles of Beta(a, b) at ``Φ(ZETA)``, each from the nearer tail."""
    lo = special.betaincinv(a, b, special.ndtr(ZETA[_BELOW]))
    hi = 1.0 - special.betaincinv(b, a, special.ndtr(-ZETA[~_BELOW]))
    return np.log(np.concatenate([lo, hi]))


def _lookup(table: np.ndarray, zeta: np.ndarray) -> np.ndarray:
    """``exp`` of ``table`` interpolated linearly at ``zeta`` (the grid ``ZETA``; clamped at its ends).

    In ``zeta``'s float type: float64 for the truth (relative error below 1e-5), float32 for the
    members.
    """
    dtype = zeta.dtype
    x = (zeta + dtype.type(ZETA_MAX)) * dtype.type((ZETA_N - 1) / (2 * ZETA_MAX))
    np.clip(x, 0, ZETA_N - 1.001, out=x)
    i = x.astype(np.intp)
    x -= i
    tab = table.astype(dtype, copy=False)
    lo = tab[i]
    x *= tab[i + 1] - lo
    x += lo
    return np.exp(x, out=x)


def gamma_quantile(shape: float, zeta: np.ndarray) -> np.ndarray:
    """Quantile of Gamma(``shape``, 1) at probability ``Φ(zeta)`` (tabulated in ``zeta``)."""
    return _lookup(_gamma_table(float(shape)), np.asarray(zeta))


def beta_quantile(a: float, b: float, zeta: np.ndarray) -> np.ndarray:
    """Quantile of Beta(``a``, ``b``) at probability ``Φ(zeta)`` (tabulated in ``zeta``)."""
    return _lookup(_beta_table(float(a), float(b)), np.asarray(zeta))


def truncnorm_quantile(loc, scale, zeta) -> np.ndarray:
    """Quantile of N(``loc``, ``scale²``) truncated to [0, ∞) at probability ``Φ(zeta)``.

    From the tail nearer to ``zeta``: ``Φ((x - loc)/scale) = Φ(-a) + Φ(ζ) Φ(a)`` below the
    median and ``Φ̄((x - loc)/scale) = Φ(-ζ) Φ(a)`` above (``a = loc/scale``, ``Φ(a)`` taken as
    ``1 - Φ(-a)``: exact for the locations here, a few scales above 0 at least); never negative.
    """
    q = special.ndtr(-loc / scale)
    below = zeta < 0
    p = special.ndtr(-np.abs(zeta))
    p *= 1.0 - q
    p += np.where(below, q, 0.0)
    z = special.ndtri(p)
    z = np.where(below, z, -z)
    z *= scale
    z += loc
    return np.maximum(z, 0.0, out=z)
