"""The blocks of the verification report: text, tables and figures, in the order of the page.

:func:`blocks` lays out what :func:`ensml.report.assemble.report` computed (the global scores of
``ensml evaluate``, the scores by lead time, rank histograms, reliability and the case studies)
as blocks for :func:`ensml.report.render.render`.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd
import xarray as xr

from ensml.data.frame import EnsembleFrame
from ensml.data.grid import describe
from ensml.names import LEAD_TIME, format_lead, units_of
from ensml.report import plots
from ensml.report.render import Figure
from ensml.verify.casestudy import CaseResult, cases_table, formatted
from ensml.verify.evaluate import Scores
from ensml.verify.levels import at, field_name, levels_of
from ensml.verify.maps import Panel, draw_maps, unmappable
from ensml.verify.tables import to_markdown, weighting_phrase

EVENT = "analysis > monthly climatological mean + 1 std"
#: What the bands and markers of the skill chart are (:func:`ensml.report.plots.skill_by_lead`).
SKILL_TESTS = (
    "Shaded (error bars at a single lead): 95 % moving-block bootstrap interval over init times, "
    "at the leads of the global scores; filled markers: Diebold-Mariano p < 0.05 against the raw "
    "ensemble."
)


@dataclass
class Content:
    """What the report shows (computed by :func:`ensml.report.assemble.report`)."""

    title: str
    forecast: str  # the option values, as the text names them
    analysis: str
    scores: Scores  # the global scores, written to ``tables/``
    frame: EnsembleFrame  # of the scores by lead time (its init times)
    lead: np.timedelta64  # of the maps, rank histograms and reliability
    by_lead: pd.DataFrame  # rows of :func:`ensml.report.scores.scores_by_lead`, with skill
    hists: dict  # rank histograms at ``lead``, by (variable, level)
    rel: dict  # reliability at ``lead``, by (variable, level)
    studies: list[CaseResult]


def blocks(c: Content) -> list:
    """The report's blocks, in the order of the page (the global scores as in ``tables/``)."""
    inits, lead = c.frame.inits, c.lead
    tables = c.scores.files()
    out: list = [("h1", c.title), ("p", _summary(c))]
    out += [
        ("h2", f"Global scores at {', '.join(f'+{format_lead(x)}' for x in c.scores.leads)}"),
        ("md", tables["scores.md"]),
    ]
    if "spread.md" in tables:
        out += [
            ("h3", "Spread estimation (against the full ensemble's std)"),
            ("md", tables["spread.md"]),
        ]
    skill_map, no_map = _skill_maps(
        c.scores.per_point, c.scores.variables, c.scores.levels, lead, c.scores.leads
    )
    if skill_map is not None:
        caption = "Per-point CRPS skill of the post-processed forecast over the raw ensemble (blue: better "
        caption += "than raw)."
        out += [Figure("crps_skill_map.png", skill_map, caption)]
    if no_map:
        out += [("p", f"No map of the per-point CRPS skill: {no_map}.")]
    by_lead = c.by_lead
    units = [units_of(v) for v in by_lead["variable"]]
    out += [
        ("h2", "Scores by lead time"),
        Figure("crps_by_lead.png", plots.scores_by_lead(by_lead, "crps", "CRPS"), "CRPS by lead time."),
        Figure(
            "crps_skill_by_lead.png",
            plots.skill_by_lead(by_lead, c.scores.table),
            "CRPS skill vs raw ensemble by lead time: 1 − CRPS / CRPS(raw ensemble) at each lead, "
            f"area-weighted means over {inits.size} init times; the raw ensemble is the 0 line, "
            "above it is better. CRPS estimators: the empirical ensemble CRPS for ensembles (raw "
            "ensemble, raw subset), the closed form for Gaussian forecasts (post-processed, oracle). "
            + SKILL_TESTS,
        ),
        ("h2", "Spread and skill"),
        Figure(
            "spread_skill.png",
            plots.spread_skill(by_lead),
            "Spread (solid) and RMSE of the mean (dashed); labels: spread-skill ratio (ensembles "
            "with the (M+1)/M correction, so 1 is calibrated).",
        ),
        ("md", to_markdown(by_lead.assign(ssr=by_lead["ssr"].round(3), units=units))),
        ("h2", f"Rank histograms at +{format_lead(lead)}"),
        Figure("rank_histograms.png", plots.rank_histograms(c.hists, lead),
               "A U shape means too little spread; a slope means bias."),
        ("h2", f"Reliability at +{format_lead(lead)}"),
        Figure(
            "reliability.png",
            plots.reliability_diagrams(c.rel, EVENT),
            f"Event: {EVENT} (per grid point). Gaussian forecasts through 100 quantiles.",
        ),
    ]  # fmt: skip
    return out + _case_blocks(c.studies)


def _summary(c: Content) -> str:
    inits = c.frame.inits
    return (
        f"Forecast `{c.forecast}` verified against `{c.analysis}` over {inits.size} init times "
        f"({np.datetime64(inits[0], 'D')} … {np.datetime64(inits[-1], 'D')}) "
        f"on a {describe(c.frame.forecast)}. "
        f"All means are {weighting_phrase(c.frame.weights.attrs['weighting'])}. "
        "Raw ensembles are scored with the empirical ensemble CRPS, Gaussian "
        "forecasts (post-processed, oracle) with the closed-form Gaussian CRPS; lower is better. "
        "Skill = 1 − CRPS / CRPS(raw ensemble) at the same lead time."
    )


def _skill_maps(
    ds: xr.Dataset, variables: list[str], levels: list[float], lead: np.timedelta64, scored: np.ndarray
) -> tuple[bytes | None, str | None]:
    """The skill maps at ``lead`` (PNG), or ``None`` and why not (no such lead scored, or a grid
    that cannot be drawn). ``ds``: the per-point scores (``scores.nc``), with a lead_time dim
    when ``scored`` holds several leads."""
    raw_name = next((v for v in ds.data_vars if str(v).startswith("crps_raw_ensemble_")), None)
    if raw_name is None or not any(str(v).startswith("crps_post_processed_") for v in ds.data_vars):
        return None, None
    if lead not in scored:
        have = ", ".join(f"+{format_lead(x)}" for x in scored)
        return None, f"the predictions hold no +{format_lead(lead)} (scored: {have})"
    if LEAD_TIME in ds.dims:
        ds = ds.sel({LEAD_TIME: lead})
    why = unmappable(ds[raw_name])
    if why:
        return None, why
    panels = []
    for var in variables:
        pp, raw = ds.get(f"crps_post_processed_{var}"), ds.get(f"crps_raw_ensemble_{var}")
        if pp is None or raw is None:
            continue
        panels.append([
            Panel(1 - at(pp, lev) / at(raw, lev), f"{field_name(var, lev)} at +{format_lead(lead)}",
                  "CRPS skill vs raw ensemble", "1", "RdBu", -0.6, 0.6)
            for lev in levels_of(pp, levels)
        ])  # fmt: skip
    title = "Post-processed forecast: CRPS skill over the raw ensemble"
    return (draw_maps(panels, title) if panels else None), None


def _case_blocks(studies: list[CaseResult]) -> list:
    if not studies:
        return []
    out: list = [
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
        out += [
            ("h3", c.name),
            (
                "p",
                f"{c.description + '. ' if c.description else ''}{c.variable}{c.level:g} hPa at "
                f"+{format_lead(c.lead)}; region {c.region}; valid {np.datetime64(c.start, 'h')} … "
                f"{np.datetime64(c.end, 'h')} ({r.n_inits} init times); threshold "
                f"{c.threshold if c.threshold else 'none'}.",
            ),
            Figure(
                f"case_{c.slug}.png",
                r.figure,
                f"{c.name}: analysis, mean and spread at the peak valid time; CRPS and its difference to the "
                "raw ensemble.",
            ),
        ]
    return out


__all__ = ["EVENT", "SKILL_TESTS", "Content", "blocks"]
