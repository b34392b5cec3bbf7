"""A variable's scores at one lead in two steps: its parts on a block of init times, its rows.

``evaluate`` scores a variable at a lead from fields that are per init time and point: the
CRPS of every ensemble and distribution, the analysis, the spread estimates and the Hersbach
sums of each ensemble (:class:`VariableParts`, from :func:`variable_parts`). Every one of them
at an init time depends only on that init's data, so the parts of disjoint blocks of init
times, joined in init order (:func:`join_parts`), are exactly the parts of the whole; the rows
(:func:`parts_rows`: the CRPS, spread and decomposition rows, with the skill intervals and tests
over the init times, and the per-point fields) are then computed once from the joined parts.
That is how ``evaluate --cluster`` gives the tables of the single-process run: each dask worker
reads and scores its own block of init times (:mod:`ensml.verify.distributed`), the client joins
what comes back, one number per source, init and point (the members stay on the workers).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TypeVar

import numpy as np
import xarray as xr

from ensml.data.frame import EnsembleFrame, LeadFrame
from ensml.data.grid import horizontal_dims
from ensml.data.subset import Subset
from ensml.names import INIT_TIME, LEVEL, MEMBER, members_name, raw_ensemble_name, raw_subset_name
from ensml.scores.crps import crps_ensemble
from ensml.scores.distributions import Family
from ensml.scores.hersbach import case_sums, decomposition_of_sums
from ensml.scores.significance import skill_tests
from ensml.scores.uncertainty import pooled_uncertainty
from ensml.times import lead_hours
from ensml.verify.families import distribution_crps, distributions, estimator
from ensml.verify.inputs import count_observed
from ensml.verify.rows import crps_rows, decomposition_rows, slug, spread_scores

T = TypeVar("T", xr.DataArray, xr.Dataset)
#: The key of the M-member std, against which the spread estimates are scored.
SPREAD_TARGET = "target"


@dataclass
class VariableParts:
    """A variable's fields at one lead on some init times, from which its rows are computed.

    Every field has ``init_time`` (and the level and horizontal dims): ``crps`` by source (the
    tables' row order), ``analysis`` (NaN: not observed), ``sums`` the Hersbach case sums of
    each ensemble of more than one member (:func:`ensml.scores.hersbach.case_sums`, over the
    points, per init and level), ``spread`` the spread estimates and :data:`SPREAD_TARGET` (the
    M-member std) with spread predictions, else None. ``estimators`` names how each
    distribution's CRPS is computed, ``oracle`` its row label, ``members`` M.
    """

    crps: dict[str, xr.DataArray]
    analysis: xr.DataArray
    sums: dict[str, xr.DataArray]
    spread: dict[str, xr.DataArray] | None
    estimators: dict[str, str]
    oracle: str
    members: int


def variable_parts(
    frame: EnsembleFrame,
    lf: LeadFrame,
    var: str,
    subset: Subset,
    fair: bool,
    families: dict[str, dict[str, Family]],
) -> VariableParts:
    """The parts of ``var`` at the lead of ``lf`` (read, checked and, with ``missing_forecast``,
    with the forecast's NaN as not observed), on ``lf``'s init times."""
    x, y = lf.forecast[var], lf.analysis[var]
    ensembles = lead_ensembles(frame, lf, var, subset)
    dists = distributions(lf, families, var)
    spread = None
    if "spread predictions" in lf.runs:
        sample = ensembles[raw_subset_name(subset.k)].std(MEMBER, ddof=1)
        spread = {
            f"{subset.k}-member sample std (ddof 1)": sample,
            "spread model": lf.runs["spread predictions"][f"{var}_std"],
            SPREAD_TARGET: x.std(MEMBER, ddof=0),
        }
    return VariableParts(
        crps=_in_order(crps_fields(frame, lf, var, ensembles, fair, dists)),
        analysis=_contiguous(y),
        sums=_decomposition_sums(ensembles, y, frame.weights),
        spread=None if spread is None else _in_order(spread),
        estimators={name: estimator(family) for name, (_, family) in dists.items()},
        oracle=next((name for name in dists if name.startswith("oracle")), "oracle (Gaussian)"),
        members=x.sizes[MEMBER],
    )


def _contiguous(field: xr.DataArray) -> xr.DataArray:
    """``field`` in C order: the rows' means (xarray's weighted means, through einsum) sum in an
    order that follows the memory layout, so a block's parts and the joined parts of several
    (concatenated in C order) must have the same one."""
    return field.copy(data=np.ascontiguousarray(field.values))


def _in_order(fields: dict[str, xr.DataArray]) -> dict[str, xr.DataArray]:
    return {name: _contiguous(field) for name, field in fields.items()}


def join_inits(blocks: list[T]) -> T:
    """Fields (or datasets) of consecutive blocks of init times joined along the init time, in
    order; their other coordinates must match exactly (the first block's attributes are kept)."""
    return xr.concat(blocks, dim=INIT_TIME, join="exact", combine_attrs="override")


def join_parts(parts: list[VariableParts]) -> VariableParts:
    """The parts of consecutive blocks of init times, in init order, as one (the same values as
    :func:`variable_parts` of all those init times at once)."""
    if len(parts) == 1:
        return parts[0]
    first, cat = parts[0], join_inits
    return VariableParts(
        crps={name: cat([p.crps[name] for p in parts]) for name in first.crps},
        analysis=cat([p.analysis for p in parts]),
        sums={name: cat([p.sums[name] for p in parts]) for name in first.sums},
        spread=None if first.spread is None else {n: cat([p.spread[n] for p in parts]) for n in first.spread},
        estimators=first.estimators,
        oracle=first.oracle,
        members=first.members,
    )


def parts_rows(
    frame: EnsembleFrame,
    parts: VariableParts,
    var: str,
    lead: np.timedelta64,
    k: int,
    fields: dict[str, xr.DataArray],
    fair: bool = False,
) -> tuple[list[dict], list[dict], list[dict]]:
    """CRPS rows, spread rows and CRPS decomposition rows of ``var`` at ``lead`` from its joined
    ``parts``; its per-point fields are added to ``fields``."""
    y, sources, weights, levels = parts.analysis, parts.crps, frame.weights, frame.levels
    raw_key = raw_ensemble_name(parts.members)
    for name, crps in sources.items():  # the mean over the init times that observe each point
        fields[f"crps_{slug(name)}_{var}"] = crps.mean(INIT_TIME)
    count_observed(y, var, lead, fields)
    h = lead_hours(lead)
    units = y.attrs.get("units") or None  # the data's own units, else ensml's table (names.py)
    rows = crps_rows(
        sources,
        weights,
        var,
        levels,
        h,
        raw_key,
        units=units,
        ensemble="fair ensemble" if fair else "empirical ensemble",
        init_first=True,
        tests=skill_tests(sources, weights, raw_key, lead),
        oracle_key=parts.oracle,
        estimators=parts.estimators,
    )
    decomposition = decomposition_rows(_decomposed(parts.sums, y, weights), var, levels, h, units=units)
    if parts.spread is None:
        return rows, [], decomposition
    estimates = dict(parts.spread)
    target = estimates.pop(SPREAD_TARGET)
    for name, est in estimates.items():
        fields[f"spread_rmse_{slug(name)}_{var}"] = np.sqrt(((est - target) ** 2).mean(INIT_TIME))
    spread = spread_scores(estimates, target, weights, var, levels, h, parts.members, units=units)
    return rows, spread, decomposition


def lead_ensembles(frame: EnsembleFrame, lf: LeadFrame, var: str, subset: Subset) -> dict[str, xr.DataArray]:
    """The ensembles of ``var`` at one lead, by name: the raw ensemble, the raw subset and the
    members given (``--members``: ECC's post-processed members or generated ones)."""
    ensembles = subset.ensembles(lf.forecast[var])
    if "members" in lf.runs:
        members = lf.runs["members"][var]
        ensembles[members_name(frame.runs["members"].meta.task, members.sizes[MEMBER])] = members
    return ensembles


def crps_fields(
    frame: EnsembleFrame,
    lf: LeadFrame,
    var: str,
    ensembles: dict[str, xr.DataArray],
    fair: bool,
    dists: dict[str, tuple[xr.Dataset, Family]],
) -> dict[str, xr.DataArray]:
    """The CRPS of every ensemble and predictive distribution of ``var`` by init time and point
    (NaN where the analysis is not observed): the intervals of the tables resample init times."""
    y = lf.analysis[var]
    dims = [d for d in [INIT_TIME, LEVEL, *horizontal_dims(frame.forecast)] if d in y.dims]
    sources = {name: crps_ensemble(x, y, preserve_dims=dims, fair=fair) for name, x in ensembles.items()}
    for name, (ds, family) in dists.items():
        sources[name] = distribution_crps(ds, var, family, y, dims, source=f"{name} {var}")
    post = [name for name in dists if name.startswith("post-processed")]
    oracle = [name for name in dists if name.startswith("oracle")]
    order = [*list(ensembles)[:2], *post, *list(ensembles)[2:], *oracle]
    return {name: sources[name] for name in order if name in sources}  # the tables' row order


def _observed(
    y: xr.DataArray, weights: xr.DataArray
) -> tuple[xr.DataArray | None, xr.DataArray, xr.DataArray]:
    """(observed mask, y with 0 where not observed, weights × observed): a NaN gets weight 0, as
    in the CRPS table; the values there are never used. The mask is None when all are observed."""
    observed = y.notnull()
    if bool(observed.all()):
        return None, y, weights
    return observed, y.where(observed, 0.0), weights * observed


def _decomposition_sums(
    ensembles: dict[str, xr.DataArray], y: xr.DataArray, weights: xr.DataArray
) -> dict[str, xr.DataArray]:
    """The Hersbach case sums of each ensemble per init time (and level), over the points where
    ``y`` is observed; an ensemble of one member (a deterministic run) has none: its bins are
    only the outliers."""
    observed, y, weights = _observed(y, weights)
    if observed is not None:  # missing_forecast: the members' NaN are where y is not observed
        ensembles = {name: x.where(observed, 0.0) for name, x in ensembles.items()}
    keep = [d for d in (INIT_TIME, LEVEL) if d in y.dims]
    return {
        name: case_sums(x, y, preserve_dims=keep, weights=weights)
        for name, x in ensembles.items()
        if x.sizes[MEMBER] > 1
    }


def _decomposed(
    sums: dict[str, xr.DataArray], y: xr.DataArray, weights: xr.DataArray
) -> dict[str, xr.Dataset]:
    """The Hersbach decomposition of each ensemble's area-weighted mean CRPS, per level, over the
    init times and points where ``y`` is observed, from its per-init case sums (summed in init
    order) and the uncertainty of the analysis pooled in init order (computed once for all
    ensembles), so that the result does not depend on how the init times were split in blocks."""
    if not sums:
        return {}
    _, observed, w = _observed(y, weights)
    uncertainty = pooled_uncertainty(observed, keep=[d for d in (LEVEL,) if d in observed.dims], weights=w)
    return {
        name: decomposition_of_sums(s, y, over=INIT_TIME, uncertainty=uncertainty) for name, s in sums.items()
    }


__all__ = [
    "VariableParts",
    "crps_fields",
    "join_inits",
    "join_parts",
    "lead_ensembles",
    "parts_rows",
    "variable_parts",
]
