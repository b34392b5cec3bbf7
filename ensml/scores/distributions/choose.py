"""Which family each variable gets: the config's choice, else the default of its name.

The choice is made once, where a model is built (``model.distribution`` in the config), written
into its checkpoint and outputs (:class:`ensml.predictions.RunMeta`), and read back from there by
every later verb through :func:`family_for`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from ensml.names import default_family, family_names
from ensml.scores.distributions.families import Family, get_family


def natural_lower(var: str) -> float | None:
    """The physical lower bound of ``var`` (0 for precipitation and wind speed), else None."""
    return 0.0 if default_family(var) != "normal" else None


def family_for(var: str, name: str) -> Family:
    """The family ``name`` for the variable ``var`` (a quantile network is clipped at its bound)."""
    return get_family(name, lower=natural_lower(var))


def resolve_families(
    variables: Sequence[str], distribution: Mapping[str, str] | None, option: str = "model.distribution"
) -> tuple[Family, ...]:
    """The family of each of ``variables``: ``distribution[var]`` where given, else the default.

    Raises
    ------
    EnsmlError
        One line naming ``option`` and the value: a variable that is not among ``variables``, or
        a family ensml does not know (:func:`ensml.names.family_names`).
    """
    names = family_names(variables, distribution, option)
    return tuple(family_for(var, name) for var, name in zip(variables, names))


__all__ = ["family_for", "natural_lower", "resolve_families"]
