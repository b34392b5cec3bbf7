"""The predictive families: a name, named parameters, and what a forecast of that family can say.

A :class:`Family` turns a dict of parameter fields (numpy arrays, torch tensors or DataArrays of
one shape, in the variable's units) into a CRPS, a log score, a cdf, quantiles, samples and a
PIT. The parametric families map the two or three outputs of a network or an EMOS —
a location ``mu``, a spread ``sigma`` (both in the variable's units) and, for the censored
shifted gamma, an unconstrained ``extra`` — onto their parameters (:meth:`Family.from_moments`),
so that a model is the same whatever the family and only the last step differs.

Families (the name is what a config and a file say):

==============  =========================  ===================================================
name            parameters                 distribution
==============  =========================  ===================================================
normal          mean, std                  N(mean, std²) (z, t: today's Gaussian)
truncnormal     loc, scale                 N(loc, scale²) truncated to [0, ∞) (wind speed)
trunclogistic   loc, scale                 logistic(loc, scale) truncated to [0, ∞)
cnormal         loc, scale                 N(loc, scale²) censored at 0 (mass Φ(−loc/scale))
clogistic       loc, scale                 logistic(loc, scale) censored at 0
csg0            shape, scale, shift        max(0, X − shift), X ~ Gamma(shape, scale)
                                           (precipitation; Scheuerer & Hamill 2015)
bqn             alpha0 … alpha<d>          Bernstein quantile function of degree d (Bremnes
                                           2020), monotone, clipped at 0 for a variable ≥ 0
==============  =========================  ===================================================
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from ensml.errors import EnsmlError
from ensml.names import bqn_degree, family_params
from ensml.scores.distributions.base import Family
from ensml.scores.distributions.gamma import CSG0
from ensml.scores.distributions.location_scale import LOGISTIC_SCALE, LocationScale


@dataclass(frozen=True)
class _Spec:
    make: Callable[[], Family]
    summary: str


def _location_scale(name: str, kernel: str, bound: str, summary: str) -> _Spec:
    params = family_params(name)
    lower = None if bound == "none" else 0.0

    def make() -> Family:
        return LocationScale(name, params, lower, bound == "censored", summary, kernel=kernel, bound=bound)

    return _Spec(make, summary)


FAMILIES: dict[str, _Spec] = {
    "normal": _location_scale("normal", "normal", "none", "N(mean, std²): geopotential, temperature"),
    "truncnormal": _location_scale(
        "truncnormal", "normal", "truncated", "normal truncated to [0, ∞): wind speed"
    ),
    "trunclogistic": _location_scale(
        "trunclogistic", "logistic", "truncated", "logistic truncated to [0, ∞): wind speed, heavier tails"
    ),
    "cnormal": _location_scale("cnormal", "normal", "censored", "normal censored at 0: a point mass at 0"),
    "clogistic": _location_scale("clogistic", "logistic", "censored", "logistic censored at 0"),
    "csg0": _Spec(
        lambda: CSG0("csg0", family_params("csg0"), 0.0, True, "censored shifted gamma: precipitation"),
        "censored shifted gamma: precipitation",
    ),
}

_cache: dict[tuple[str, float | None], Family] = {}


def get_family(spec: str | Family, lower: float | None = None) -> Family:
    """The family named ``spec`` (``normal``, ``csg0``, ``bqn`` or ``bqn:12`` for degree 12, …).

    ``lower`` is the variable's physical lower bound, used by the distribution-free ``bqn``
    (its quantiles are clipped there); the parametric families carry their own support.
    """
    if isinstance(spec, Family):
        return spec
    name = str(spec).strip()
    key = (name, lower if name.startswith("bqn") else None)
    if key in _cache:
        return _cache[key]
    if name.startswith("bqn"):
        from ensml.scores.distributions.bqn import BQN

        family: Family = BQN.of_degree(bqn_degree(name), lower)
    elif name in FAMILIES:
        family = FAMILIES[name].make()
    else:
        raise EnsmlError(f"unknown distribution {name!r} (known: {', '.join(known_families())})")
    _cache[key] = family
    return family


def known_families() -> list[str]:
    """The family names a config may give."""
    return [*FAMILIES, "bqn"]


__all__ = ["CSG0", "FAMILIES", "LOGISTIC_SCALE", "Family", "LocationScale", "get_family", "known_families"]
