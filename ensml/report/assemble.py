"""``ensml report``: one self-contained verification report (Markdown + PNG, and HTML).

The report holds the global scores of ``ensml evaluate`` at every lead time the predictions
hold, CRPS, CRPS skill and spread-skill by lead time, rank histograms, reliability diagrams and
maps of the per-point CRPS skill at the report's lead, and the case studies (from YAML files,
the stored storms of the synthetic data and/or found automatically). Everything is computed
first and written to a hidden temporary folder beside ``out_dir``, which replaces ``out_dir``
only when complete: a failure leaves no report.
``out_dir`` must be new, empty or an earlier report (:mod:`ensml.data.outdir`).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import xarray as xr

from ensml.data.grid import describe, is_projected
from ensml.data.open import check_lead_times, open_analysis, open_dataset, open_forecast
from ensml.data.outdir import check_output_folder, replace_folder
from ensml.data.weights import area_weights
from ensml.errors import EnsmlError
from ensml.names import INIT_TIME, LEAD_TIME, LEVEL, TIME, units_of
from ensml.progress import Progress, note, seconds
from ensml.report import plots
from ensml.report.render import Figure, render
from ensml.report.scores import gaussians, scores_by_lead, skill_by_lead
from ensml.verify.casefind import find_extreme_cases, storm_cases
from ensml.verify.cases import load_cases
from ensml.verify.casestudy import cases_table, formatted, score_case
from ensml.verify.evaluate import evaluate
from ensml.verify.levels import at, field_name, levels_of
from ensml.verify.maps import Panel, draw_maps, unmappable
from ensml.verify.tables import to_markdown, weighting_phrase

EVENT = "analysis > monthly climatological mean + 1 std"
REPORT_NAMES = ("report.md", "report.html", "figures", "tables")  # what a report folder holds


def report(
    forecast: str | list[str],
    analysis: str | list[str],
    predictions: str | None = None,
    spread_predictions: str | None = None,
    oracle: str | None = None,
    cases: str | list[str] | None = None,
    n_storm_cases: int = 0,
    n_extreme_cases: int = 0,
    k: int = 5,
    lead_hours: int = 48,
    variables: list[str] | None = None,
    levels: list[float] | None = None,
    out_dir: str = "runs/report",
    title: str = "ensml verification report",
    case_variable: str | None = None,
    case_level: float | None = None,
) -> Path:
    """Write the verification report (``report.md`` + ``figures/``, and ``report.html``).

    Parameters
    ----------
    forecast
        The raw ensemble forecast (paths or globs).
    analysis
        The verifying analysis (paths or globs).
    predictions
        Mixed-model predictions (``<var>_mean``, ``<var>_std``), as for ``ensml evaluate``.
    spread_predictions
        Spread-model predictions (``<var>_std``), as for ``ensml evaluate``.
    oracle
        The generator's true predictive distribution (``ensml data synth``'s ``oracle.nc``).
    k
        Size of the raw subset scored beside the full ensemble (members 0 … k-1).
    lead_hours
        Lead time of the skill maps, rank histograms, reliability diagrams and automatic case
        studies (h). The global score table covers every lead the predictions hold (every
        forecast lead but 0 h without predictions), and the charts by lead every forecast lead.
    variables
        Variables to report (default: all of the forecast's).
    levels
        Pressure levels to report, hPa (default: all of the forecast's).
    cases
        Case-study YAML files, folders or globs (:mod:`ensml.verify.cases`).
    n_storm_cases
        Also study this many stored storms of the synthetic ``oracle`` (strongest first).
    n_extreme_cases
        Also study this many dates/boxes found automatically where the analysis exceeds its
        monthly climatological 99% quantile over the largest area.
    out_dir
        The report folder; replaced as a whole when the new report is complete.
    title
        The report's title.
    case_variable
        Variable of the automatic cases (default ``z`` when present, else the first).
    case_level
        Level (hPa) of the automatic cases (default 500 when present, else the first).
    """
    check_output_folder(out_dir, "report", REPORT_NAMES)  # before hours of work, not after
    grid = open_forecast(forecast, variables)
    check_lead_times(grid, [lead_hours], f"forecast {forecast}")  # of the maps and histograms
    if n_storm_cases or n_extreme_cases:
        if is_projected(grid):
            option = "n_extreme_cases" if n_extreme_cases else "n_storm_cases"
            raise EnsmlError(
                f"report: {option} searches latitude/longitude boxes of a regular grid, and forecast "
                f"{forecast} is on a {describe(grid)}; give the cases as YAML files (--cases)"
            )
    case_list = load_cases(cases) if cases else []
    # the YAML cases first: a bad case fails in seconds, before the global scores
    studies = [score_case(c, forecast, analysis, predictions, oracle, k) for c in case_list]
    out = Path(out_dir)
    progress = Progress("report", 4, "stages")

    def stage(what: str) -> None:
        progress.advance(f"{what} in {seconds(progress.lap)}")

    with replace_folder(out, "report", REPORT_NAMES) as tmp:
        table = evaluate(
            forecast,
            analysis,
            predictions,
            spread_predictions,
            oracle,
            k=k,
            lead_hours=None,  # every lead the predictions hold
            variables=variables,
            levels=levels,
            out_dir=str(tmp / "tables"),
        )
        stage("global scores")
        variables = list(dict.fromkeys(table["variable"]))
        levels = [float(v) for v in dict.fromkeys(table["level_hPa"]) if pd.notna(v)]
        fc, an = open_forecast(forecast, variables), open_analysis(analysis, variables)
        on_levels = [v for v in variables if LEVEL in fc[v].dims]  # the others are surface ones
        preds = open_dataset(predictions, "predictions") if predictions else None
        orc = open_dataset(oracle, "oracle") if oracle else None
        inits = fc[INIT_TIME].values
        if preds is not None:
            inits = np.intersect1d(inits, preds[INIT_TIME].values)
        inits = inits[np.isin(inits + fc[LEAD_TIME].values.max(), an[TIME].values)]
        w = area_weights(fc, note=False)  # evaluate has noted uniform weights already
        parts = [scores_by_lead(fc, an, gaussians(preds, orc), v, levels, inits, w, k) for v in variables]
        by_lead = skill_by_lead(pd.concat([p[0] for p in parts], ignore_index=True))
        lead = np.timedelta64(lead_hours, "h").astype("timedelta64[ns]")
        hists = {key: h for p in parts for key, h in p[1][lead].items()}
        rel = {(v, lev): s for p in parts for (ld, v, lev), s in p[2].items() if ld == lead}
        stage("scores by lead time, rank histograms and reliability")

        found = []
        if (n_storm_cases or n_extreme_cases) and not (on_levels or case_variable):
            note("report: no automatic case studies (they search a pressure level; all are surface)")
            n_storm_cases = n_extreme_cases = 0
        var0 = case_variable or ("z" if "z" in on_levels else (on_levels or variables)[0])
        default_level = 500.0 if 500.0 in levels else (levels[0] if levels else None)
        lev0 = case_level if case_level is not None else default_level
        if n_storm_cases and orc is not None and "event_mask" in orc:
            found += storm_cases(orc, lead_hours=lead_hours, variable=var0, level=lev0, init_times=inits)
        if n_extreme_cases:
            found += find_extreme_cases(
                an[var0].sel({LEVEL: lev0}), variable=var0, level=lev0, lead_hours=lead_hours,
                n=n_extreme_cases, valid_times=inits + lead,
            )  # fmt: skip
        n_storm = 0
        for c in found:  # automatic cases that repeat one from the YAML files are left out
            is_storm = c.name.startswith("storm")
            if any(_same_event(c, d) for d in case_list) or (is_storm and n_storm >= n_storm_cases):
                continue
            n_storm += is_storm
            case_list.append(c)
            studies.append(score_case(c, forecast, analysis, predictions, oracle, k))
        stage(f"{len(studies)} case studies")
        scored = sorted({int(h) for h in table["lead_h"]})
        skill_map, no_map = _skill_maps(tmp / "tables" / "scores.nc", variables, levels, lead_hours, scored)

        blocks: list = [("h1", title)]
        blocks += [
            (
                "p",
                f"Forecast `{forecast}` verified against `{analysis}` over {inits.size} init times "
                f"({np.datetime64(inits[0], 'D')} … {np.datetime64(inits[-1], 'D')}) on a {describe(fc)}. "
                f"All means are {weighting_phrase(w.attrs['weighting'])}. "
                "Raw ensembles are scored with the empirical ensemble CRPS, Gaussian "
                "forecasts (post-processed, oracle) with the closed-form Gaussian CRPS; lower is better. "
                "Skill = 1 − CRPS / CRPS(raw ensemble) at the same lead time.",
            )
        ]
        blocks += [
            ("h2", f"Global scores at {', '.join(f'+{h} h' for h in scored)}"),
            ("md", (tmp / "tables" / "scores.md").read_text()),
        ]
        if (tmp / "tables" / "spread.md").exists():
            blocks += [
                ("h3", "Spread estimation (against the full ensemble's std)"),
                ("md", (tmp / "tables" / "spread.md").read_text()),
            ]
        if skill_map is not None:
            blocks += [
                Figure(
                    "crps_skill_map.png",
                    skill_map,
                    "Per-point CRPS skill of the post-processed "
                    "forecast over the raw ensemble (blue: better than raw).",
                )
            ]
        if no_map:
            blocks += [("p", f"No map of the per-point CRPS skill: {no_map}.")]
        blocks += [
            ("h2", "Scores by lead time"),
            Figure("crps_by_lead.png", plots.scores_by_lead(by_lead, "crps", "CRPS"), "CRPS by lead time."),
            Figure(
                "crps_skill_by_lead.png",
                plots.skill_by_lead(by_lead),
                "CRPS skill vs raw ensemble by lead time: 1 − CRPS / CRPS(raw ensemble) at each lead, "
                f"area-weighted means over {inits.size} init times; the raw ensemble is the 0 line, "
                "above it is better. CRPS estimators: the empirical ensemble CRPS for ensembles (raw "
                "ensemble, raw subset), the closed form for Gaussian forecasts (post-processed, oracle).",
            ),
            ("h2", "Spread and skill"),
            Figure(
                "spread_skill.png",
                plots.spread_skill(by_lead),
                "Spread (solid) and RMSE of the mean (dashed); labels: spread-skill ratio (ensembles "
                "with the (M+1)/M correction, so 1 is calibrated).",
            ),
            (
                "md",
                to_markdown(
                    by_lead.assign(
                        ssr=by_lead["ssr"].round(3), units=[units_of(v) for v in by_lead["variable"]]
                    )
                ),
            ),
            ("h2", f"Rank histograms at +{lead_hours} h"),
            Figure(
                "rank_histograms.png",
                plots.rank_histograms(hists, lead_hours),
                "A U shape means too little spread; a slope means bias.",
            ),
            ("h2", f"Reliability at +{lead_hours} h"),
            Figure(
                "reliability.png",
                plots.reliability_diagrams(rel, EVENT),
                f"Event: {EVENT} (per grid point). Gaussian forecasts through 100 quantiles.",
            ),
        ]
        blocks += _case_blocks(studies)
        render(blocks, tmp, title)
        stage("maps, charts and pages")
    progress.close()
    print(f"ensml report: wrote {out / 'report.md'} and {out / 'report.html'}")
    return out


def _same_event(a, b) -> bool:
    """Two cases of one field whose windows and boxes overlap (an automatic repeat of a YAML case)."""
    if (a.variable, a.level, a.lead_hours) != (b.variable, b.level, b.lead_hours):
        return False
    if a.end < b.start or b.end < a.start:
        return False
    if a.region.lat[1] < b.region.lat[0] or b.region.lat[1] < a.region.lat[0]:
        return False
    lon = np.arange(0.0, 360.0, 1.0)
    return bool(np.intersect1d(a.region.lon_indices(lon), b.region.lon_indices(lon)).size)


def _skill_maps(
    scores_nc: Path, variables, levels, lead_hours: int, scored: list[int]
) -> tuple[bytes | None, str | None]:
    """The skill maps at ``lead_hours`` (PNG), or ``None`` and why not (no such lead scored, or a
    grid that cannot be drawn). ``scored``: the leads in ``scores.nc`` (h; a lead_time dim if several)."""
    ds = xr.open_dataset(scores_nc).load()
    raw_name = next((v for v in ds.data_vars if str(v).startswith("crps_raw_ensemble_")), None)
    if raw_name is None or not any(str(v).startswith("crps_post_processed_") for v in ds.data_vars):
        return None, None
    if lead_hours not in scored:
        have = ", ".join(f"+{h} h" for h in scored)
        return None, f"the predictions hold no +{lead_hours} h (scored: {have})"
    if LEAD_TIME in ds.dims:
        ds = ds.sel({LEAD_TIME: np.timedelta64(lead_hours, "h").astype("timedelta64[ns]")})
    why = unmappable(ds[raw_name])
    if why:
        return None, why
    panels = []
    for var in variables:
        pp, raw = ds.get(f"crps_post_processed_{var}"), ds.get(f"crps_raw_ensemble_{var}")
        if pp is None or raw is None:
            continue
        panels.append(
            [
                Panel(
                    1 - at(pp, lev) / at(raw, lev),
                    f"{field_name(var, lev)} at +{lead_hours} h",
                    "CRPS skill vs raw ensemble",
                    "1",
                    "RdBu",
                    -0.6,
                    0.6,
                )
                for lev in levels_of(pp, levels)
            ]
        )
    title = "Post-processed forecast: CRPS skill over the raw ensemble"
    return (draw_maps(panels, title) if panels else None), None


def _case_blocks(studies) -> list:
    if not studies:
        return []
    blocks: list = [
        ("h2", "Case studies"),
        (
            "p",
            "Per case: area-weighted CRPS and threshold-weighted CRPS (twCRPS, weight on the event "
            "side of the threshold) over the region and window; *_vs_raw = 1 − score / score(raw "
            "ensemble), positive is better. Gaussian twCRPS from 100 quantiles.",
        ),
        (
            "md",
            to_markdown(formatted(cases_table(studies)).drop(columns=["variable", "level_hPa", "lead_h"])),
        ),
    ]
    for r in studies:
        c = r.case
        blocks += [
            ("h3", c.name),
            (
                "p",
                f"{c.description + '. ' if c.description else ''}{c.variable}{c.level:g} hPa at "
                f"+{c.lead_hours} h; region {c.region}; valid {np.datetime64(c.start, 'h')} … "
                f"{np.datetime64(c.end, 'h')} ({r.n_inits} init times); threshold "
                f"{c.threshold if c.threshold else 'none'}.",
            ),
            Figure(
                f"case_{c.slug}.png",
                r.figure,
                f"{c.name}: analysis, mean and spread at the peak "
                "valid time; CRPS and its difference to the raw ensemble.",
            ),
        ]
    return blocks


__all__ = ["report"]
