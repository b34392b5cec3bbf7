"""Predictive distributions: one family, named parameters, and every score and product of it.

The abstraction that training, the EMOS fits, ``predict``, ``postprocess``, ``evaluate`` and
``report`` share (docs/architecture.md): a :class:`Family` (:func:`get_family` by name) gives the
CRPS (closed form, differentiable in torch, stable as σ → 0 and at the bound), the log score
where it is defined, cdf, quantiles, samples, the (randomised) PIT, and the CF attributes of its
parameters in files. Which family a variable has is a fact of the run: chosen in the config,
written into the outputs (:class:`ensml.predictions.RunMeta`) and read back from them.
"""

from ensml.scores.distributions.bqn import BQN, bernstein_basis
from ensml.scores.distributions.choose import family_for, natural_lower, resolve_families
from ensml.scores.distributions.families import (
    CSG0,
    FAMILIES,
    LOGISTIC_SCALE,
    Family,
    LocationScale,
    get_family,
    known_families,
)

__all__ = [
    "BQN",
    "CSG0",
    "FAMILIES",
    "LOGISTIC_SCALE",
    "Family",
    "LocationScale",
    "bernstein_basis",
    "family_for",
    "get_family",
    "known_families",
    "natural_lower",
    "resolve_families",
]
