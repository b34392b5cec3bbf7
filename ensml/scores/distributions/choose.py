"""Which family each variable gets: the config's choice, else the default of its name.

The choice is made once, where a model is built (``model.distribution`` in the config), written
into its checkpoint and outputs (:class:`ensml.predictions.RunMeta`), and read back from there by
every later verb through :func:`family_for`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from ensml.errors import EnsmlError
from ensml.names import default_family
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
        a family ensml does not know.
    """
    chosen = dict(distribution or {})
    if not isinstance(distribution, Mapping | None):
        raise EnsmlError(f"{option} must map variables to families, e.g. {{tp: csg0}}, got {distribution!r}")
    unknown = [v for v in chosen if v not in variables]
    if unknown:
        raise EnsmlError(
            f"{option} names {', '.join(map(str, unknown))}, not among the variables ({', '.join(variables)})"
        )
    families = []
    for var in variables:
        name = str(chosen.get(var, default_family(var)))
        try:
            families.append(family_for(var, name))
        except EnsmlError as exc:
            raise EnsmlError(f"{option}.{var}: {exc}") from None
    return tuple(families)


__all__ = ["family_for", "natural_lower", "resolve_families"]
