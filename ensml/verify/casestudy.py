"""Score extreme-event cases: CRPS, twCRPS and the improvement over the raw ensemble, with maps.

Per case and forecast (raw ensemble, its first-k subset, the post-processed Gaussian, the
oracle) over the case's region and valid-time window, area-weighted (exact cell area):

* CRPS: empirical ensemble CRPS for ensembles, closed-form Gaussian CRPS for Gaussians;
* twCRPS above (``tail: upper``) or below (``lower``) the case threshold: ensembles directly,
  Gaussians through their ``N_QUANTILES`` equally spaced quantiles ``mu + sd Φ⁻¹((i - ½)/N)``
  as an ensemble (within 0.1% of the exact Gaussian CRPS for N = 100);
* the relative improvement ``1 - score / score(raw ensemble)``.

The figure shows the analysis (event area hatched), the mean and spread of each forecast at
the case's peak valid time, and per-point CRPS (raw) and CRPS differences (others − raw) averaged
over the window; blue is better than the raw ensemble.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd
import xarray as xr
from scipy.stats import norm

from ensml.data.grid import check_same_grid, horizontal_dims
from ensml.data.open import check_lead_times, check_levels, open_analysis, open_dataset, open_forecast
from ensml.data.outdir import replace_folder
from ensml.data.surface import check_not_at_level
from ensml.data.weights import area_weights
from ensml.errors import EnsmlError
from ensml.names import INIT_TIME, LEAD_TIME, LEVEL, MEMBER, TIME, units_of
from ensml.scores.crps import crps_ensemble
from ensml.scores.gaussian import crps_gaussian_xr
from ensml.scores.twcrps import twcrps_ensemble
from ensml.verify.cases import Case, climatological_threshold
from ensml.verify.maps import Panel, display_units, draw_maps

N_QUANTILES = 100


@dataclass
class CaseResult:
    """The scores of one case (a row per forecast) and its figure (PNG bytes)."""

    case: Case
    table: pd.DataFrame
    figure: bytes
    n_inits: int


def gaussian_members(mu: xr.DataArray, sd: xr.DataArray, n: int = N_QUANTILES) -> xr.DataArray:
    """The ``n`` equally spaced quantiles of N(mu, sd²) as an ensemble along ``member``."""
    z = xr.DataArray(norm.ppf((np.arange(n) + 0.5) / n), dims=[MEMBER])
    return (mu + sd * z).transpose(MEMBER, ...).astype(mu.dtype)


def _gaussian_source(ds: xr.Dataset, var: str, path: str, inits: np.ndarray, case: Case, what: str):
    for v in (f"{var}_mean", f"{var}_std"):
        if v not in ds:
            raise EnsmlError(f"{what} file {path} has no variable {v!r} for case {case.name!r}")
    sel = {INIT_TIME: inits, LEVEL: case.level}
    lead = np.timedelta64(case.lead_hours, "h").astype("timedelta64[ns]")
    if LEAD_TIME in ds[f"{var}_mean"].dims:
        sel[LEAD_TIME] = lead
    mu, sd = (case.region.select(ds[v].sel(sel)).load() for v in (f"{var}_mean", f"{var}_std"))
    return mu.drop_vars(LEAD_TIME, errors="ignore"), sd.drop_vars(LEAD_TIME, errors="ignore")


def _lead_of(ds: xr.Dataset) -> np.ndarray:
    return np.atleast_1d(ds[LEAD_TIME].values) if LEAD_TIME in ds.coords else np.array([], "timedelta64[ns]")


def score_case(
    case: Case,
    forecast: str | list[str],
    analysis: str | list[str],
    predictions: str | None = None,
    oracle: str | None = None,
    k: int = 5,
) -> CaseResult:
    """Score one case on the files of ``ensml evaluate`` (see the module docstring)."""
    var, name = case.variable, case.name
    fc_ds = open_forecast(forecast, [var])
    an_ds = open_analysis(analysis, [var])
    check_same_grid(fc_ds, an_ds, f"forecast {forecast}", f"analysis {analysis}")
    check_not_at_level(fc_ds[var], case.level, f"case {name!r} (forecast {forecast})")
    check_levels(fc_ds, [case.level], f"forecast {forecast} (case {name!r})")
    check_levels(an_ds, [case.level], f"analysis {analysis} (case {name!r})")
    check_lead_times(fc_ds, [case.lead_hours], f"forecast {forecast} (case {name!r})")
    lead = np.timedelta64(case.lead_hours, "h").astype("timedelta64[ns]")
    box = case.region.select(fc_ds[var].isel({INIT_TIME: 0, LEAD_TIME: 0, MEMBER: 0, LEVEL: 0}))
    spatial = list(horizontal_dims(box) or ())
    if any(box.sizes[d] == 0 for d in spatial):
        raise EnsmlError(f"case {name!r}: region {case.region} selects no grid point of forecast {forecast}")

    inits = fc_ds[INIT_TIME].values
    valid = inits + lead
    inits = inits[(valid >= case.start) & (valid <= case.end) & np.isin(valid, an_ds[TIME].values)]
    extra: dict[str, xr.Dataset] = {}
    for path, what in ((predictions, "predictions"), (oracle, "oracle")):
        if path:
            ds = open_dataset(path, what)
            check_same_grid(fc_ds, ds, f"forecast {forecast}", f"{what} {path}")
            if lead in _lead_of(ds) and f"{var}_mean" in ds:  # a model of another lead or variable
                extra[what] = ds
                inits = np.intersect1d(inits, ds[INIT_TIME].values)
    if inits.size == 0:
        span = f"{np.datetime64(case.start, 'h')} … {np.datetime64(case.end, 'h')}"
        raise EnsmlError(
            f"case {name!r}: window {span} selects no init time at +{case.lead_hours} h common to the "
            f"forecast, analysis{' and ' + ', '.join(extra) if extra else ''}"
        )
    fc = case.region.select(fc_ds[var].sel({INIT_TIME: inits, LEAD_TIME: lead, LEVEL: case.level})).load()
    fc = fc.drop_vars([LEAD_TIME, "valid_time"], errors="ignore")
    an_box = case.region.select(an_ds[var].sel({LEVEL: case.level}))
    y = an_box.sel({TIME: inits + lead}).load().rename({TIME: INIT_TIME}).assign_coords({INIT_TIME: inits})
    y = y.assign_attrs(units=units_of(var))

    thr = tail = None
    if case.threshold is not None:
        tail = case.threshold.tail
        if case.threshold.value is not None:
            thr = case.threshold.value
            lo, hi = float(min(fc.min(), y.min())), float(max(fc.max(), y.max()))
            if (tail == "upper" and thr >= hi) or (tail == "lower" and thr <= lo):
                raise EnsmlError(
                    f"case {name!r}: threshold {thr:g} {units_of(var)} is outside the range of "
                    f"{var}{case.level:g} in the region and window [{lo:.6g}, {hi:.6g}]: no event to score"
                )
        else:
            thr = climatological_threshold(an_box.load(), case)
            if bool(thr.isnull().any()):  # outside the box of a projected grid: scored nowhere
                thr = thr.fillna(float(thr.median()))

    w = area_weights(y, what=f"case {name!r}", note=False)  # evaluate notes uniform weights
    m = fc.sizes[MEMBER]
    ensembles = {
        f"raw ensemble ({m} members)": fc,
        f"raw subset ({min(k, m)} members)": fc.isel({MEMBER: slice(0, k)}),
    }
    gaussians = {}
    sources = (
        ("predictions", predictions, "post-processed (Gaussian)"),
        ("oracle", oracle, "oracle (Gaussian)"),
    )
    for what, path, label in sources:
        if what in extra:
            gaussians[label] = _gaussian_source(extra[what], var, str(path), inits, case, what)

    fields: dict[str, xr.DataArray] = {}
    rows = []
    for label, ens in ensembles.items():
        fields[label] = crps_ensemble(ens, y, preserve_dims=[INIT_TIME, *spatial])
    for label, (mu, sd) in gaussians.items():
        fields[label] = crps_gaussian_xr(mu, sd, y, preserve_dims=[INIT_TIME, *spatial])
    for label, crps in fields.items():
        row = {
            "case": name, "variable": var, "level_hPa": case.level, "lead_h": case.lead_hours,
            "n_inits": int(inits.size), "forecast": label,
            "crps": float(crps.weighted(w).mean()), "units": units_of(var),
            "estimator": "Gaussian closed form" if label in gaussians else "empirical ensemble",
        }  # fmt: skip
        if thr is not None:
            ens = ensembles[label] if label in ensembles else gaussian_members(*gaussians[label])
            row["threshold"] = str(case.threshold)
            row["twcrps"] = float(twcrps_ensemble(ens, y, thr, tail=tail, weights=w))
        rows.append(row)
    table = pd.DataFrame(rows)
    raw = table.iloc[0]
    table["crps_vs_raw"] = 1.0 - table["crps"] / raw["crps"]
    if thr is not None:
        table["twcrps_vs_raw"] = 1.0 - table["twcrps"] / raw["twcrps"] if raw["twcrps"] > 0 else np.nan
    figure = _figure(case, y, thr, tail, ensembles, gaussians, fields, w)
    return CaseResult(case, table, figure, int(inits.size))


def _figure(case, y, thr, tail, ensembles, gaussians, fields, w) -> bytes:
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
    for label, (mu, sd) in gaussians.items():
        means[label] = mu.isel({INIT_TIME: peak}) * fs + fo
        spreads[label] = sd.isel({INIT_TIME: peak}) * ds_
    f_lo = float(min(obs.min(), *(x.min() for x in means.values())))
    f_hi = float(max(obs.max(), *(x.max() for x in means.values())))
    s_hi = float(max(x.max() for x in spreads.values()))
    crps_mean = {label: f.mean(INIT_TIME) * ds_ for label, f in fields.items()}
    diffs = {label: crps_mean[label] - crps_mean[raw_label] for label in gaussians}
    d_hi = max([float(abs(d).max()) for d in diffs.values()] + [1e-12])
    n = y.sizes[INIT_TIME]
    over = "window mean" if n > 1 else "at this time"
    valid = np.datetime64(t_peak + np.timedelta64(case.lead_hours, "h"), "h")
    hatch = event.isel({INIT_TIME: peak}) if event is not None else None

    def field(label, data):
        return Panel(data, label, fl, fu, "viridis", f_lo, f_hi, contour=obs)

    rows = [[
        Panel(obs, f"analysis, valid {valid}", fl, fu, "viridis", f_lo, f_hi, contour=obs, hatch=hatch),
        field(f"{raw_label}: mean", means[raw_label]),
        Panel(spreads[raw_label], f"{raw_label}: spread (std)", f"{dl} spread", du, "magma_r", 0, s_hi),
        Panel(crps_mean[raw_label], f"{raw_label}: CRPS ({over})", f"CRPS of {dl}", du, "YlOrRd", 0),
    ]]  # fmt: skip
    errs = {
        lab: (mu.isel({INIT_TIME: peak}) - y.isel({INIT_TIME: peak})) * ds_
        for lab, (mu, _) in gaussians.items()
    }
    e_hi = max([float(abs(e).max()) for e in errs.values()] + [1e-12])
    for label in gaussians:
        err = errs[label]
        rows.append([
            Panel(err, f"{label}: mean − analysis", f"{dl} error", du, "RdBu_r", -e_hi, e_hi),
            field(f"{label}: mean", means[label]),
            Panel(spreads[label], f"{label}: spread (std)", f"{dl} spread", du, "magma_r", 0, s_hi),
            Panel(diffs[label], f"CRPS {label.split(' (')[0]} − raw ({over})", f"ΔCRPS of {dl}", du,
                  "RdBu_r", -d_hi, d_hi),
        ])  # fmt: skip
    title = (
        f"{case.name}: {var}{case.level:g} hPa at +{case.lead_hours} h, {n} init time(s); "
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


CASES_NAMES = ("cases.csv", "cases.md", "case_*.png")  # what a case-study folder holds


def write_cases(out_dir: str | Path, results: list[CaseResult]) -> Path:
    """Write ``cases.csv``, ``cases.md`` and ``case_<slug>.png`` into ``out_dir`` together.

    Everything goes to a hidden temporary folder beside ``out_dir`` first, which replaces
    ``out_dir`` only when complete (:func:`ensml.data.outdir.replace_folder`).
    """
    from ensml.verify.tables import to_markdown

    with replace_folder(out_dir, "cases", CASES_NAMES) as tmp:
        table = cases_table(results)
        table.to_csv(tmp / "cases.csv", index=False)
        (tmp / "cases.md").write_text(to_markdown(formatted(table)))
        for r in results:
            (tmp / f"case_{r.case.slug}.png").write_bytes(r.figure)
    return Path(out_dir)


__all__ = [
    "CASES_NAMES",
    "CaseResult",
    "cases_table",
    "formatted",
    "gaussian_members",
    "score_case",
    "write_cases",
]
