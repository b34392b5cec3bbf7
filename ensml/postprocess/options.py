"""Options of ``ensml postprocess`` (the YAML section ``products``) and their checks.

The cluster options (``cluster``, ``jobqueue``) are every cluster verb's: :mod:`ensml.cluster.options`.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field, fields
from typing import Any, ClassVar, Literal

import numpy as np

from ensml.errors import EnsmlError
from ensml.names import VARIABLE_ATTRS, default_family

#: Probability levels of the ECC quantiles (see :func:`ensml.postprocess.ecc.ecc_levels`).
EccSpacing = Literal["centred", "rank"]
OutputFormat = Literal["netcdf", "zarr", "csv"]
Device = Literal["cpu", "cuda", "auto"]


@dataclass
class Products:
    """What every output holds beside the predictive mean and std (or the estimated spread).

    Attributes
    ----------
    quantiles
        Probability levels in (0, 1) of the predictive quantiles (``<var>_quantile``).
    thresholds
        Exceedance thresholds in the variable's units, keyed by variable (``t``: at every level)
        or by variable and level in hPa (``t850``); each key gives ``<key>_exceedance``, the
        probability P(X > threshold). A precipitation variable given without values
        (``{tp: null}`` or ``{tp: []}``) gets :data:`PRECIPITATION_THRESHOLDS_MM`, 0.1, 1, 5, 10
        and 25 mm (thresholds of 24 h totals), in its units (``kg m-2``, i.e. mm, or ``m``). A
        variable is precipitation when its predictive family is one of
        :data:`PRECIPITATION_FAMILIES` or its name says so (``tp``, ``cp``, ``lsp``:
        :data:`ensml.names.DEFAULT_FAMILIES`).
    members
        Number of calibrated members (``<var>``) made by ensemble copula coupling; null: as many
        as the raw members read from each file; 0: none.
    ecc_spacing
        Probability levels of the ECC quantiles: ``centred``, (i − ½)/N (smallest CRPS), or
        ``rank``, i/(N + 1) (Schefzik et al. 2013).
    ecc_members
        Of a generative run only: beside the generated members ``<var>``, the same values at every
        point in the raw members' rank order (``<var>_ecc``: ECC-Q of the generated members'
        own margins, whose quantiles at the centred levels they are), for a downstream model
        that follows the raw ensemble's scenarios across variables, levels and leads.
    """

    quantiles: list[float] = field(default_factory=lambda: [0.05, 0.1, 0.25, 0.5, 0.75, 0.9, 0.95])
    thresholds: dict[str, list[float] | None] = field(default_factory=dict)
    members: int | None = None
    ecc_spacing: EccSpacing = "centred"
    ecc_members: bool = False

    #: Options added after output folders were first written: a unit's identity holds them only
    #: when set otherwise than their default, so that products made before they existed stay
    #: current (and are not made again) while the option is left alone.
    LATER: ClassVar[tuple[str, ...]] = ("ecc_members",)

    def identity(self) -> dict[str, Any]:
        """The options as a unit's identity records them (:data:`LATER` left out at its default)."""
        defaults = {f.name: f.default for f in fields(self) if f.name in self.LATER}
        return {k: v for k, v in asdict(self).items() if k not in defaults or v != defaults[k]}


#: Default exceedance thresholds of precipitation, mm (= kg m-2) in 24 h (``products.thresholds``).
PRECIPITATION_THRESHOLDS_MM = (0.1, 1.0, 5.0, 10.0, 25.0)
#: Families that make a variable precipitation for the default thresholds (a point mass at 0).
PRECIPITATION_FAMILIES = ("csg0", "cnormal", "clogistic")
#: Millimetres of water in one unit of a precipitation amount, by the units ensml reads.
_MM_PER_UNIT = {"kg m-2": 1.0, "mm": 1.0, "m": 1000.0}


@dataclass(frozen=True)
class ThresholdSet:
    """Thresholds of one ``products.thresholds`` entry: a variable, at one level or all."""

    key: str
    variable: str
    level: float | None  # None: every level
    values: tuple[float, ...]


def check_products(
    products: Products,
    variables: Sequence[str],
    levels: Sequence[float],
    families: Sequence[str] | None = None,
    generative: bool = False,
) -> list[ThresholdSet]:
    """Validate ``products`` against the checkpoints' variables and levels; return the thresholds.

    ``families`` (one per variable, :attr:`ensml.predictions.RunMeta.families`) tells which
    variables are precipitation, for the default thresholds; without it the names do.
    ``generative``: the checkpoints draw members (``ecc_members`` is for them only).
    """
    q = np.asarray(products.quantiles, dtype=np.float64)
    if q.ndim != 1 or not np.all((q > 0) & (q < 1)):
        raise EnsmlError(
            f"products.quantiles must be probabilities in (0, 1), got {list(products.quantiles)}"
        )
    if np.unique(q).size != q.size:
        raise EnsmlError(f"products.quantiles has repeated levels: {list(products.quantiles)}")
    if products.members is not None and products.members < 0:
        raise EnsmlError(
            f"products.members must be 0 (none), a positive number or null, got {products.members}"
        )
    if products.ecc_members and not generative:
        raise EnsmlError(
            "products.ecc_members orders a generative run's members as the raw ones are; these "
            "checkpoints' members (<var>) already are ECC-Q members"
        )
    if products.ecc_members and products.members == 0:
        raise EnsmlError("products.ecc_members needs members to order, but products.members is 0 (none)")
    family = dict(zip(variables, families or ()))
    out = []
    for key, values in products.thresholds.items():
        var, level = parse_field_key(key, variables, levels)
        if values is None or np.size(values) == 0:
            values = precipitation_thresholds(key, var, family.get(var))
        t = np.asarray(values, dtype=np.float64)
        if t.ndim != 1 or t.size == 0 or not np.all(np.isfinite(t)):
            raise EnsmlError(f"products.thresholds[{key!r}] must be a non-empty list of finite numbers")
        if np.unique(t).size != t.size:
            raise EnsmlError(f"products.thresholds[{key!r}] has repeated values: {list(values)}")
        out.append(ThresholdSet(key, var, level, tuple(float(x) for x in t)))
    return out


def is_precipitation(var: str, family: str | None = None) -> bool:
    """Whether ``var`` is a precipitation amount: by its family, else by its name."""
    if family is not None and family in PRECIPITATION_FAMILIES:
        return True
    standard_name = VARIABLE_ATTRS.get(var, {}).get("standard_name")
    return default_family(var, standard_name) == "csg0"


def precipitation_thresholds(key: str, var: str, family: str | None = None) -> list[float]:
    """The default thresholds of ``var`` (:data:`PRECIPITATION_THRESHOLDS_MM`) in its units.

    Raises
    ------
    EnsmlError
        One line naming ``products.thresholds[key]``: ``var`` is not precipitation, or its units
        are not ones ensml converts mm to.
    """
    where = f"products.thresholds[{key!r}]"
    if not is_precipitation(var, family):
        raise EnsmlError(
            f"{where} has no values; only precipitation (family {', '.join(PRECIPITATION_FAMILIES)} "
            f"or a variable such as tp) has default thresholds: give a list, e.g. {{{key}: [...]}}"
        )
    units = VARIABLE_ATTRS.get(var, {}).get("units")
    if units not in _MM_PER_UNIT:
        raise EnsmlError(
            f"{where} has no values, and ensml does not know how to express the default "
            f"precipitation thresholds ({', '.join(f'{x:g}' for x in PRECIPITATION_THRESHOLDS_MM)} "
            f"mm) in the units of {var} ({units or 'unknown'}); give a list of thresholds"
        )
    return [x / _MM_PER_UNIT[units] for x in PRECIPITATION_THRESHOLDS_MM]


def parse_field_key(key: str, variables: Sequence[str], levels: Sequence[float]) -> tuple[str, float | None]:
    """``"t"`` → (t, None); ``"t850"`` → (t, 850.0), for the given variables and levels (hPa)."""
    if key in variables:
        return key, None
    for var in sorted(variables, key=len, reverse=True):
        m = re.fullmatch(re.escape(var) + r"(\d+(?:\.\d+)?)", key)
        if m and float(m.group(1)) in [float(x) for x in levels]:
            return var, float(m.group(1))
    names = ", ".join(f"{x:g}" for x in levels)
    raise EnsmlError(
        f"products.thresholds key {key!r} is neither a variable ({', '.join(variables)}) nor a "
        f"variable and level (e.g. {variables[0]}{levels[0]:g}; levels {names} hPa)"
    )


def plain_options(**options: Any) -> dict[str, Any]:
    """The options that shape the outputs, as plain JSON values (what the manifest compares)."""

    def plain(value: Any) -> Any:
        return asdict(value) if hasattr(value, "__dataclass_fields__") else value

    return json.loads(json.dumps({k: plain(v) for k, v in options.items()}, sort_keys=True, default=str))
