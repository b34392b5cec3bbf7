"""Score extreme-event cases: CRPS, twCRPS and the improvement over the raw ensemble, with maps.

Per case and forecast (raw ensemble, its first-k subset, the post-processed predictive
distribution, the oracle) over the case's region and valid-time window, area-weighted (exact
cell area):

* CRPS: empirical ensemble CRPS for ensembles; for a predictive distribution, the CRPS of its
  family (:mod:`ensml.verify.families`, as ``evaluate``: the predictions' run metadata, the
  oracle's ``ensml_distribution``), the closed-form Gaussian CRPS for the normal, whose rows keep
  their names (``post-processed (Gaussian)``) while the others say their family
  (``post-processed (csg0)``);
* twCRPS above (``tail: upper``) or below (``lower``) the case threshold: ensembles directly,
  distributions through their ``N_QUANTILES`` equally spaced quantiles ``Q((i - ½)/N)`` as an
  ensemble (:func:`~ensml.verify.families.family_members`; for the normal
  ``mu + sd Φ⁻¹((i - ½)/N)``, within 0.1% of the exact Gaussian CRPS for N = 100);
* the relative improvement ``1 - score / score(raw ensemble)``.

A case of a surface variable (``tp``, ``si10``, ``t2m``) has no ``level``.

The figure shows the analysis (event area hatched), the mean and spread of each forecast at
the case's peak valid time (of a distribution: its mean and standard deviation,
:func:`~ensml.verify.families.family_moments`), and per-point CRPS (raw) and CRPS differences
(others − raw) averaged over the window; blue is better than the raw ensemble.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd
import xarray as xr

from ensml.data.frame import build_frame
from ensml.data.grid import horizontal_dims
from ensml.data.layouts.options import ReaderOptions
from ensml.data.surface import check_not_at_level, is_surface
from ensml.data.weights import area_weights
from ensml.errors import EnsmlError
from ensml.names import (
    INIT_TIME,
    LEAD_TIME,
    LEVEL,
    MEMBER,
    VALID_TIME,
    units_of,
)
from ensml.scores.crps import crps_ensemble
from ensml.scores.distributions import Family
from ensml.scores.twcrps import twcrps_ensemble
from ensml.times import format_lead, lead_hours
from ensml.verify.cases import Case, climatological_threshold
from ensml.verify.families import (
    distribution_crps,
    distributions,
    estimator,
    family_members,
    family_moments,
    family_params,
    frame_families,
    reading_families,
)
from ensml.verify.levels import field_name, table_level
from ensml.verify.maps import Panel, display_units, draw_maps


@dataclass
class CaseResult:
    """The scores of one case (a row per forecast) and its figure (PNG bytes)."""

    case: Case
    table: pd.DataFrame
    figure: bytes
    n_inits: int


def score_case(
    case: Case,
    forecast: str | list[str],
    analysis: str | list[str],
    predictions: str | list[str] | None = None,
    oracle: str | None = None,
    k: int | None = None,
    **readers: ReaderOptions,
) -> CaseResult:
    """Score one case on the files of ``ensml evaluate`` (see the module docstring).

    The predictions and the oracle are left out where they do not hold the case's variable and
    lead (a model of another lead); ``k`` is that of the predictions' run, or given (default 5);
    ``readers``: ``reader`` and ``analysis_reader`` of :func:`~ensml.data.frame.build_frame`.
    Each predictive distribution is scored in its own family (:mod:`ensml.verify.families`).
    """
    var, name = case.variable, case.name
    frame = build_frame(
        forecast,
        analysis,
        variables=[var],
        levels=None if case.level is None else [case.level],
        leads=[case.lead],
        predictions=predictions,
        oracle=oracle,
        partial=True,
        context=f" (case {name!r})",
        note=False,
        **readers,
    )
    subset = frame.subset(k)
    where = f"case {name!r} (forecast {forecast})"
    check_not_at_level(frame.forecast[var], case.level, where)
    if case.level is None and not is_surface(frame.forecast[var]):
        raise EnsmlError(f"{where}: variable {var!r} has pressure levels; give the case's level (hPa)")
    at_level = {} if case.level is None else {LEVEL: case.level}
    first = {INIT_TIME: 0, LEAD_TIME: 0, MEMBER: 0, **({LEVEL: 0} if at_level else {})}
    box = case.region.select(frame.forecast[var].isel(first))
    spatial = list(horizontal_dims(box) or ())
    if any(box.sizes[d] == 0 for d in spatial):
        raise EnsmlError(f"case {name!r}: region {case.region} selects no grid point of forecast {forecast}")
    families = frame_families(frame)  # of each distribution source, as evaluate's
    frame = reading_families(frame, families).within(case.start, case.end)
    extra = [*frame.runs, *(["oracle"] if frame.oracle is not None else [])]
    if frame.inits.size == 0:
        span = f"{np.datetime64(case.start, 'h')} … {np.datetime64(case.end, 'h')}"
        raise EnsmlError(
            f"case {name!r}: window {span} selects no init time at +{format_lead(case.lead)} common to the "
            f"forecast, analysis{' and ' + ', '.join(extra) if extra else ''}"
        )
    fields = frame.at(case.lead, where=case.region.select)
    fc = fields.forecast[var].sel(at_level).drop_vars([LEAD_TIME, VALID_TIME], errors="ignore")
    y = fields.analysis[var].sel(at_level).assign_attrs(units=units_of(var))
    an_box = case.region.select(frame.analysis[var].sel(at_level))
    thr, tail = _threshold(case, fc, y, an_box)

    w = area_weights(y, what=f"case {name!r}", note=False)  # evaluate notes uniform weights
    ensembles = subset.ensembles(fc)
    dists = {
        label: Distribution(_at(ds, at_level), var, family, f"{label} {var}")
        for label, (ds, family) in distributions(fields, families, var).items()
    }
    table, crps = _case_table(case, ensembles, dists, y, thr, tail, w, frame.inits.size)
    figure = _figure(case, y, thr, tail, ensembles, dists, crps, w)
    return CaseResult(case, table, figure, int(frame.inits.size))


def _at(ds: xr.Dataset, at_level: dict) -> xr.Dataset:
    """A source's fields at the case's level (if any), without their lead-time coordinates."""
    return ds.sel(at_level).drop_vars([LEAD_TIME, VALID_TIME], errors="ignore")


@dataclass
class Distribution:
    """A predictive distribution of a case: its fields (at the case's level), variable and family."""

    ds: xr.Dataset
    var: str
    family: Family
    source: str  # how messages name it

    @property
    def params(self) -> dict[str, xr.DataArray]:
        """The family's parameter fields (:func:`ensml.verify.families.family_params`)."""
        return family_params(self.ds, self.var, self.family, self.source)

    def members(self) -> xr.DataArray:
        """The distribution as its :data:`~ensml.verify.families.N_QUANTILES` quantiles
        (:func:`~ensml.verify.families.family_members`)."""
        return family_members(self.family, self.params)

    def moments(self, at: dict | None = None) -> tuple[xr.DataArray, xr.DataArray]:
        """Its mean and standard deviation (:func:`~ensml.verify.families.family_moments`), where
        ``at`` selects (isel)."""
        params = {k: v.isel(at or {}) for k, v in self.params.items()}
        return family_moments(self.family, params)


def _threshold(case: Case, fc: xr.DataArray, y: xr.DataArray, an_box: xr.DataArray):
    """The case's event threshold (a number or a per-point field) and tail, or ``(None, None)``."""
    if case.threshold is None:
        return None, None
    var, tail = case.variable, case.threshold.tail
    if case.threshold.value is not None:
        thr = case.threshold.value
        lo, hi = float(min(fc.min(), y.min())), float(max(fc.max(), y.max()))
        if (tail == "upper" and thr >= hi) or (tail == "lower" and thr <= lo):
            raise EnsmlError(
                f"case {case.name!r}: threshold {thr:g} {units_of(var)} is outside the range of "
                f"{field_name(var, case.level)} in the region and window [{lo:.6g}, {hi:.6g}]: "
                "no event to score"
            )
        return thr, tail
    thr = climatological_threshold(an_box.load(), case)
    if bool(thr.isnull().any()):  # outside the box of a projected grid: scored nowhere
        thr = thr.fillna(float(thr.median()))
    return thr, tail


def _case_table(case, ensembles, dists, y, thr, tail, w, n_inits) -> tuple[pd.DataFrame, dict]:
    """A row per forecast (CRPS, twCRPS, improvement over the raw ensemble) and the per-point CRPS."""
    spatial = list(horizontal_dims(y) or ())
    keep = [INIT_TIME, *spatial]
    fields: dict[str, xr.DataArray] = {}
    for label, ens in ensembles.items():
        fields[label] = crps_ensemble(ens, y, preserve_dims=keep)
    for label, d in dists.items():
        fields[label] = distribution_crps(d.ds, d.var, d.family, y, keep, source=d.source)
    rows = []
    for label, crps in fields.items():
        row = {
            "case": case.name,
            "variable": case.variable,
            "level_hPa": table_level(case.level),
            "lead_h": lead_hours(case.lead),
            "n_inits": int(n_inits),
            "forecast": label,
            "crps": float(crps.weighted(w).mean()),
            "units": units_of(case.variable),
            "estimator": estimator(dists[label].family) if label in dists else "empirical ensemble",
        }
        if thr is not None:
            ens = ensembles[label] if label in ensembles else dists[label].members()
            row["threshold"] = str(case.threshold)
            row["twcrps"] = float(twcrps_ensemble(ens, y, thr, tail=tail, weights=w))
        rows.append(row)
    table = pd.DataFrame(rows)
    raw = table.iloc[0]
    table["crps_vs_raw"] = 1.0 - table["crps"] / raw["crps"]
    if thr is not None:
        table["twcrps_vs_raw"] = 1.0 - table["twcrps"] / raw["twcrps"] if raw["twcrps"] > 0 else np.nan
    return table, fields


def _figure(case, y, thr, tail, ensembles, dists, fields, w) -> bytes:
    var = case.variable
    fs, fo, fu, fl = display_units(var, "field")
    ds_, _, du, dl = display_units(var, "difference")
    event = None
    if thr is not None:
        event = (y > thr) if tail == "upper" else (y < thr)
        peak = int(np.argmax(event.weighted(w).mean(list(horizontal_dims(y) or ())).values))
    else:
        peak = 0
    t_peak = y[INIT_TIME].values[peak]
    obs = y.isel({INIT_TIME: peak}) * fs + fo
    raw_label = next(iter(ensembles))
    raw = ensembles[raw_label].isel({INIT_TIME: peak})
    means = {raw_label: raw.mean(MEMBER) * fs + fo}
    spreads = {raw_label: raw.std(MEMBER) * ds_}
    moments = {label: d.moments(at={INIT_TIME: peak}) for label, d in dists.items()}
    for label, (mu, sd) in moments.items():
        means[label] = mu * fs + fo
        spreads[label] = sd * ds_
    f_lo = float(min(obs.min(), *(x.min() for x in means.values())))
    f_hi = float(max(obs.max(), *(x.max() for x in means.values())))
    s_hi = float(max(x.max() for x in spreads.values()))
    crps_mean = {label: f.mean(INIT_TIME) * ds_ for label, f in fields.items()}
    diffs = {label: crps_mean[label] - crps_mean[raw_label] for label in dists}
    d_hi = max([float(abs(d).max()) for d in diffs.values()] + [1e-12])
    n = y.sizes[INIT_TIME]
    over = "window mean" if n > 1 else "at this time"
    valid = np.datetime64(t_peak + case.lead, "h")
    hatch = event.isel({INIT_TIME: peak}) if event is not None else None

    def field(label, data):
        return Panel(data, label, fl, fu, "viridis", f_lo, f_hi, contour=obs)

    rows = [
        [
            Panel(obs, f"analysis, valid {valid}", fl, fu, "viridis", f_lo, f_hi, contour=obs, hatch=hatch),
            field(f"{raw_label}: mean", means[raw_label]),
            Panel(spreads[raw_label], f"{raw_label}: spread (std)", f"{dl} spread", du, "magma_r", 0, s_hi),
            Panel(crps_mean[raw_label], f"{raw_label}: CRPS ({over})", f"CRPS of {dl}", du, "YlOrRd", 0),
        ]
    ]
    errs = {lab: (mu - y.isel({INIT_TIME: peak})) * ds_ for lab, (mu, _) in moments.items()}
    e_hi = max([float(abs(e).max()) for e in errs.values()] + [1e-12])
    for label in dists:
        err = errs[label]
        rows.append(
            [
                Panel(err, f"{label}: mean − analysis", f"{dl} error", du, "RdBu_r", -e_hi, e_hi),
                field(f"{label}: mean", means[label]),
                Panel(spreads[label], f"{label}: spread (std)", f"{dl} spread", du, "magma_r", 0, s_hi),
                Panel(
                    diffs[label],
                    f"CRPS {label.split(' (')[0]} − raw ({over})",
                    f"ΔCRPS of {dl}",
                    du,
                    "RdBu_r",
                    -d_hi,
                    d_hi,
                ),
            ]
        )
    title = (
        f"{case.name}: {field_name(var, case.level)} at +{format_lead(case.lead)}, {n} init time(s); "
        f"analysis contours on mean panels"
        + (f"; hatched: event ({case.threshold})" if hatch is not None else "")
    )
    return draw_maps(rows, title)


def cases_table(results: list[CaseResult]) -> pd.DataFrame:
    """All cases' rows in one table."""
    return pd.concat([r.table for r in results], ignore_index=True)


def formatted(table: pd.DataFrame) -> pd.DataFrame:
    """The case table with twCRPS to 4 digits and improvements in % (``to_markdown`` formats crps)."""
    out = table.copy()
    for col, fmt in (
        ("twcrps", "{:.4g}"),
        ("crps_vs_raw", "{:+.1%}"),
        ("twcrps_vs_raw", "{:+.1%}"),
    ):
        if col in out:
            out[col] = [fmt.format(v) if pd.notna(v) else "" for v in out[col]]
    return out


def case_files(results: list[CaseResult]) -> dict[str, str | bytes]:
    """The files of the case studies by name: ``cases.csv``, ``cases.md`` and ``case_<slug>.png``."""
    from ensml.verify.tables import to_markdown

    table = cases_table(results)
    files: dict[str, str | bytes] = {
        "cases.csv": table.to_csv(index=False),
        "cases.md": to_markdown(formatted(table)),
    }
    files.update({f"case_{r.case.slug}.png": r.figure for r in results})
    return files


__all__ = [
    "CaseResult",
    "case_files",
    "cases_table",
    "formatted",
    "score_case",
]
