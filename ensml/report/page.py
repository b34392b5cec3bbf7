"""The blocks of the verification report: text, tables and figures, in the order of the page.

:func:`blocks` lays out what :func:`ensml.report.assemble.report` computed (the global scores of
``ensml evaluate``, the scores by lead time, rank histograms, reliability and the case studies)
as blocks for :func:`ensml.report.render.render`.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pandas as pd
import xarray as xr

from ensml.data.frame import EnsembleFrame
from ensml.data.grid import describe
from ensml.names import LEAD_TIME, units_of
from ensml.report import plots
from ensml.report.render import Figure
from ensml.scores.distributions import Family
from ensml.times import format_lead
from ensml.verify.casestudy import CaseResult, cases_table, formatted
from ensml.verify.charts import reliability_diagram
from ensml.verify.evaluate import Scores
from ensml.verify.event_tables import threshold_text
from ensml.verify.families import DEFAULT, N_QUANTILES, estimator
from ensml.verify.levels import at, field_name, is_surface, levels_of
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
    frame: EnsembleFrame  # the frame scored, once (its init times, grid and weights)
    lead: np.timedelta64  # of the maps, rank histograms and reliability
    by_lead: pd.DataFrame  # the table of :func:`ensml.report.scores.scores_by_lead`, with skill
    hists: dict  # rank histograms at ``lead``, by (variable, level)
    rel: dict  # reliability at ``lead``, by (variable, level)
    studies: list[CaseResult]
    #: the family of each variable of each distribution source (``post-processed``, ``oracle``)
    families: dict[str, dict[str, Family]] = field(default_factory=dict)
    #: reliability rows of the threshold events of the bounded variables at ``lead``
    events: pd.DataFrame | None = None


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
            f"ensemble, raw subset), {_distribution_estimators(c.families, 'skill')}. " + SKILL_TESTS,
        ),
        ("h2", "Spread and skill"),
        Figure(
            "spread_skill.png",
            plots.spread_skill(by_lead),
            "Spread (solid) and RMSE of the mean (dashed); labels: spread-skill ratio (ensembles "
            "with the (M+1)/M correction, so 1 is calibrated)." + _moments_note(c.families),
        ),
        ("md", to_markdown(by_lead.assign(ssr=by_lead["ssr"].round(3), units=units))),
        ("h2", f"Rank histograms at +{format_lead(lead)}"),
        Figure(
            "rank_histograms.png",
            plots.rank_histograms(c.hists, lead),
            "A U shape means too little spread; a slope means bias.",
        ),
        ("h2", f"Reliability at +{format_lead(lead)}"),
    ]
    if c.rel:
        caption = f"Event: {EVENT} (per grid point). {_through_quantiles(c.families, list(c.rel))}."
        out.append(Figure("reliability.png", plots.reliability_diagrams(c.rel, EVENT), caption))
    out += _event_reliability(c.events)
    return out + _case_blocks(c.studies)


def _names(families: dict[str, dict[str, Family]], variables: list[str] | None = None) -> list[str]:
    """The family names of the distribution sources (of ``variables``, or all), in order."""
    fams = [f for fs in families.values() for v, f in fs.items() if variables is None or v in variables]
    return list(dict.fromkeys(f.name for f in fams))


def _only_normal(names: list[str]) -> bool:
    return set(names) <= {DEFAULT}


def _distribution_estimators(families: dict[str, dict[str, Family]], where: str) -> str:
    """How the distributions are scored, for the summary (``where="summary"``) or the skill chart."""
    names = _names(families)
    if _only_normal(names):  # the words of the report before the families
        if where == "summary":
            return "Gaussian forecasts (post-processed, oracle) with the closed-form Gaussian CRPS"
        return "the closed form for Gaussian forecasts (post-processed, oracle)"
    by_name = {f.name: f for fs in families.values() for f in fs.values()}
    how = ", ".join(estimator(by_name[n]) for n in names)
    return f"predictive distributions (post-processed, oracle) with the CRPS of their family ({how})"


def _moments_note(families: dict[str, dict[str, Family]]) -> str:
    if _only_normal(_names(families)):
        return ""
    return (
        " Predictive distributions: the spread is their standard deviation, the RMSE that of "
        "their mean (other families than the Gaussian by quadrature of the quantile function)."
    )


def _through_quantiles(families: dict[str, dict[str, Family]], keys: list) -> str:
    """What stands for the distributions in the climatological reliability diagrams."""
    if _only_normal(_names(families, [var for var, _ in keys])):
        return f"Gaussian forecasts through {N_QUANTILES} quantiles"
    return f"Predictive distributions through {N_QUANTILES} quantiles of their family"


def _event_reliability(events: pd.DataFrame | None) -> list:
    """A reliability diagram per bounded variable, level and threshold (as ``evaluate``'s)."""
    if events is None or not len(events):
        return []
    variables = ", ".join(dict.fromkeys(events["variable"]))
    out: list = [
        (
            "p",
            f"{variables}: reliability of the events y > t at the thresholds of evaluate's event "
            "scores: P(Y > t) of each predictive distribution from its family, the fraction of the "
            "raw ensemble's members above t; below each diagram, the share of the points in each "
            "probability bin (raw ensemble).",
        )
    ]
    levels = events["level_hPa"].fillna(-1.0)  # a surface variable's NaN level as one key
    for (var, lev, thr), rows in events.groupby([events["variable"], levels, "threshold"], sort=False):
        level = None if lev == -1.0 or is_surface(lev) else float(lev)
        units = str(rows["units"].iloc[0]) if pd.notna(rows["units"].iloc[0]) else ""
        event = f"{field_name(var, level)} > {threshold_text(thr)} {units}".rstrip()
        name = f"reliability_{var}_gt{threshold_text(thr)}" + ("" if level is None else f"_{level:g}hPa")
        figure = reliability_diagram(rows, f"{event}: reliability")
        out.append(Figure(f"{name}.png", figure, f"Event: {event} (per grid point)."))
    return out


def _summary(c: Content) -> str:
    inits = c.frame.inits
    return (
        f"Forecast `{c.forecast}` verified against `{c.analysis}` over {inits.size} init times "
        f"({np.datetime64(inits[0], 'D')} … {np.datetime64(inits[-1], 'D')}) "
        f"on a {describe(c.frame.forecast)}. "
        f"All means are {weighting_phrase(c.frame.weights.attrs['weighting'])}. "
        "Raw ensembles are scored with the empirical ensemble CRPS, "
        f"{_distribution_estimators(c.families, 'summary')}; lower is better. "
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
        panels.append(
            [
                Panel(
                    1 - at(pp, lev) / at(raw, lev),
                    f"{field_name(var, lev)} at +{format_lead(lead)}",
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


def _case_blocks(studies: list[CaseResult]) -> list:
    if not studies:
        return []
    out: list = [
        ("h2", "Case studies"),
        (
            "p",
            "Per case: area-weighted CRPS and threshold-weighted CRPS (twCRPS, weight on the event "
            "side of the threshold) over the region and window; *_vs_raw = 1 − score / score(raw "
            f"ensemble), positive is better. {_case_twcrps(studies)}",
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
                f"{c.description + '. ' if c.description else ''}{field_name(c.variable, c.level)} at "
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


def _case_twcrps(studies: list[CaseResult]) -> str:
    """How the distributions' twCRPS of the case studies is computed."""
    estimators = set(cases_table(studies)["estimator"]) - {"empirical ensemble", "Gaussian closed form"}
    if not estimators:
        return f"Gaussian twCRPS from {N_QUANTILES} quantiles."
    return f"The predictive distributions' twCRPS from {N_QUANTILES} quantiles of their family."


__all__ = ["EVENT", "SKILL_TESTS", "Content", "blocks"]
