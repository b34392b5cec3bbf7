"""The predictive distribution of each source ``evaluate`` scores: its family, its fields, its CRPS.

Predictions and products files (``ensml predict``, ``ensml postprocess``) say each variable's
family in their run metadata (:meth:`ensml.predictions.RunMeta.family_of`); the oracle of
``ensml data synth`` in its global attribute ``ensml_distribution`` (``"z:normal tp:csg0"``),
and an oracle without it (written before the families) is Gaussian throughout. A family's
parameters are the variables ``{var}_{param}`` (``z_mean``, ``z_std``; ``tp_shape``,
``tp_scale``, ``tp_shift``). Every source is scored through the same functions here, whatever
its family: :func:`family_params` and :func:`distribution_crps`; as an ensemble of its quantiles
(:func:`family_members`) and by its moments (:func:`family_moments`), which the event and spread
scores, the case studies and the report share.

Labels: a source keeps today's name with a normal family (``post-processed (Gaussian)``,
``oracle (Gaussian)``) and says its family otherwise (``post-processed (csg0)``).
"""

from __future__ import annotations

from collections.abc import Hashable, Mapping, Sequence
from dataclasses import replace

import numpy as np
import xarray as xr

from ensml.data.frame import EnsembleFrame, LeadFrame
from ensml.errors import EnsmlError
from ensml.names import MEMBER
from ensml.predictions import PREFIX, distribution_of
from ensml.scores.distributions import Family, family_for, get_family
from ensml.scores.predictive import crps_family

#: The global attribute naming each variable's family (``"z:normal tp:csg0"``), as in run metadata.
DISTRIBUTION_ATTR = f"{PREFIX}distribution"
#: The family of a source whose file names none (files written before the families).
DEFAULT = "normal"
#: The sources scored as distributions: their label and where the frame holds them.
SOURCES = {"post-processed": "predictions", "oracle": "oracle"}
#: Quantiles that stand for a predictive distribution as an ensemble (:func:`family_members`).
N_QUANTILES = 100
#: Nodes and half-width in logit(τ) of the quadrature of a distribution's moments (:func:`family_moments`).
MOMENT_NODES = 100
MOMENT_LOGIT = 14.0


def oracle_families(attrs: Mapping[str, object], variables: Sequence[str], source: str) -> dict[str, Family]:
    """The family of each of ``variables`` in an oracle file with global attributes ``attrs``.

    Raises
    ------
    EnsmlError
        The attribute is unreadable, lacks one of ``variables`` or names an unknown family.
    """
    out = {}
    for var, name in distribution_of(attrs, variables, source).items():
        try:
            out[var] = family_for(var, name)
        except EnsmlError as exc:
            raise EnsmlError(f"{source}: {DISTRIBUTION_ATTR} of {var}: {exc}") from None
    return out


def frame_families(frame: EnsembleFrame) -> dict[str, dict[str, Family]]:
    """The family of every variable of each distribution source of ``frame``, by source label
    (``post-processed``: the predictions' run metadata; ``oracle``: its attribute)."""
    out: dict[str, dict[str, Family]] = {}
    run = frame.runs.get("predictions")
    if run is not None:
        out["post-processed"] = {var: family_for(var, run.meta.family_of(var)) for var in frame.variables}
    if frame.oracle is not None:
        out["oracle"] = oracle_families(frame.oracle.attrs, frame.variables, frame.names["oracle"])
    return out


def param_vars(var: str, family: Family) -> list[str]:
    """The variables of a file that hold ``var``'s parameters: ``{var}_{param}``."""
    return [f"{var}_{p}" for p in family.params]


def reading_families(frame: EnsembleFrame, families: Mapping[str, Mapping[str, Family]]) -> EnsembleFrame:
    """``frame`` reading each distribution's parameter variables (:func:`param_vars`) at every
    lead, in place of the Gaussian ``{var}_mean``/``{var}_std``.

    Raises
    ------
    EnsmlError
        Naming the file: the oracle lacks a parameter variable (the predictions' files are
        checked as they are read).
    """
    runs = dict(frame.runs)
    if "post-processed" in families and "predictions" in runs:
        needed = [n for var, fam in families["post-processed"].items() for n in param_vars(var, fam)]
        runs["predictions"] = replace(runs["predictions"], needed=needed)
    oracle_vars = frame.oracle_vars
    if "oracle" in families and frame.oracle is not None:
        oracle_vars = [n for var, fam in families["oracle"].items() for n in param_vars(var, fam)]
        absent = [n for n in oracle_vars if n not in frame.oracle.data_vars]
        if absent:
            found = ", ".join(map(str, frame.oracle.data_vars))
            raise EnsmlError(f"{frame.names['oracle']} has no variable {absent[0]!r} (found: {found})")
    return replace(frame, runs=runs, oracle_vars=oracle_vars)


def label(source: str, family: Family) -> str:
    """The row label of a distribution source: ``post-processed (Gaussian)``, ``oracle (csg0)``."""
    return f"{source} ({'Gaussian' if family.name == DEFAULT else family.name})"


def estimator(family: Family) -> str:
    """How a family's CRPS is computed, for the tables' ``estimator`` column."""
    if family.name == DEFAULT:
        return "Gaussian closed form"
    if family.name.startswith("bqn"):
        return f"{family.name} quantile quadrature"
    return f"{family.name} closed form"


def distributions(
    lf: LeadFrame, families: Mapping[str, Mapping[str, Family]], var: str
) -> dict[str, tuple[xr.Dataset, Family]]:
    """The distribution sources of ``var`` at one lead, by row label: (their fields, family)."""
    held = {"post-processed": lf.runs.get("predictions"), "oracle": lf.oracle}
    return {
        label(source, families[source][var]): (ds, families[source][var])
        for source, ds in held.items()
        if ds is not None and source in families
    }


def family_params(
    ds: xr.Dataset, var: str, family: Family, source: str = "the forecast"
) -> dict[str, xr.DataArray]:
    """``var``'s parameter fields of ``family`` in ``ds`` (``{param: ds[f"{var}_{param}"]}``).

    Raises
    ------
    EnsmlError
        Naming ``source``: a parameter variable is missing.
    """
    absent = [n for n in param_vars(var, family) if n not in ds.data_vars]
    if absent:
        found = ", ".join(map(str, ds.data_vars))
        raise EnsmlError(
            f"{source} has no {', '.join(absent)} for the {family.name} family of {var} (found: {found})"
        )
    return {p: ds[f"{var}_{p}"] for p in family.params}


def distribution_crps(
    ds: xr.Dataset,
    var: str,
    family: Family,
    y: xr.DataArray,
    preserve_dims: Sequence[Hashable],
    source: str = "the forecast",
) -> xr.DataArray:
    """The CRPS of ``var``'s predictive distribution in ``ds`` against ``y``, per point of
    ``preserve_dims`` (NaN where ``y`` is): :func:`ensml.scores.predictive.crps_family`, which
    for a normal family is the Gaussian CRPS of ``{var}_mean`` and ``{var}_std``."""
    return crps_family(family, family_params(ds, var, family, source), y, preserve_dims=list(preserve_dims))


def quantile_levels(n: int = N_QUANTILES) -> np.ndarray:
    """The ``n`` equally spaced levels ``(i + ½)/n``, i = 0 … n − 1, float64."""
    return (np.arange(n) + 0.5) / n


def _as_numpy(family: Family, params: Mapping[str, xr.DataArray]) -> tuple[xr.DataArray, dict, np.dtype]:
    """The parameters broadcast together: one of them (their dims and coords), their values, dtype."""
    fields = xr.broadcast(*(params[k] for k in family.params))
    dtype = np.result_type(*(f.dtype for f in fields))
    return fields[0], {k: f.values for k, f in zip(family.params, fields)}, dtype


def family_members(family: Family, params: Mapping[str, xr.DataArray], n: int = N_QUANTILES) -> xr.DataArray:
    """The ``n`` equally spaced quantiles ``Q((i + ½)/n)`` of ``family(params)`` as an ensemble
    along ``member`` (first), in the dtype of the parameters (float32 stays float32).

    ``params``: each of ``family.params`` as a DataArray (:func:`ensml.verify.families.family_params`),
    broadcast together. The quantiles are :meth:`Family.quantiles` (float64), so that a normal's
    are ``mu + sd Φ⁻¹((i + ½)/n)``, bit for bit as before the families. NaN where a parameter is.
    """
    like, values, dtype = _as_numpy(family, params)
    with np.errstate(invalid="ignore"):
        q = family.quantiles(values, quantile_levels(n), axis=0)
    return xr.DataArray(q.astype(dtype, copy=False), dims=(MEMBER, *like.dims), coords=like.coords)


def gaussian_members(mu: xr.DataArray, sd: xr.DataArray, n: int = N_QUANTILES) -> xr.DataArray:
    """The ``n`` equally spaced quantiles of N(mu, sd²) as an ensemble along ``member``
    (:func:`family_members` of the normal), in ``mu``'s dtype."""
    return family_members(get_family("normal"), {"mean": mu, "std": sd}, n).astype(mu.dtype, copy=False)


def family_moments(family: Family, params: Mapping[str, xr.DataArray]) -> tuple[xr.DataArray, xr.DataArray]:
    """The predictive mean and standard deviation of ``family(params)``.

    The normal's are its parameters ``mean`` and ``std``, as they are. Another family's are
    ``E Y = ∫ Q(τ) dτ`` and ``Var Y = ∫ (Q(τ) − E Y)² dτ`` of its quantile function by the
    trapezoid rule in ``u = logit τ`` (:data:`MOMENT_NODES` nodes over ``|u| ≤``
    :data:`MOMENT_LOGIT`, i.e. τ within 1e-6 of 0 and 1, where the tails are), summed node by
    node in float64 about the median (the memory of a few fields); within 0.2 % of the standard
    deviation of a censored shifted gamma that is wet at least 5 % of the time, and 1e-4 of a
    truncated normal's, against their closed forms. In the parameters' dtype; NaN where a
    parameter is.
    """
    if family.name == "normal":
        return params["mean"], params["std"]
    like, values, dtype = _as_numpy(family, params)
    p = {k: np.asarray(v, dtype=np.float64) for k, v in values.items()}
    u = np.linspace(-MOMENT_LOGIT, MOMENT_LOGIT, MOMENT_NODES)
    tau = 1.0 / (1.0 + np.exp(-u))
    weights = tau * (1.0 - tau)  # dτ/du
    weights[[0, -1]] /= 2.0
    weights /= weights.sum()
    with np.errstate(invalid="ignore"):
        centre = np.broadcast_to(family.ppf(p, np.float64(0.5)), like.shape)
        s1, s2 = np.zeros(like.shape), np.zeros(like.shape)
        for w, t in zip(weights, tau):
            d = family.ppf(p, np.float64(t)) - centre
            s1 += w * d
            s2 += w * d * d
    mean, std = centre + s1, np.sqrt(np.maximum(s2 - s1 * s1, 0.0))
    mean_da, std_da = (xr.DataArray(a.astype(dtype), dims=like.dims, coords=like.coords) for a in (mean, std))
    return mean_da, std_da


__all__ = [
    "DISTRIBUTION_ATTR",
    "N_QUANTILES",
    "SOURCES",
    "distribution_crps",
    "distributions",
    "estimator",
    "family_members",
    "family_moments",
    "family_params",
    "frame_families",
    "gaussian_members",
    "label",
    "oracle_families",
    "param_vars",
    "quantile_levels",
    "reading_families",
]
