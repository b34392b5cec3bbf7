"""The files of ``evaluate``'s event scores (:mod:`ensml.verify.events`), per bounded variable.

``scores_<var>.csv`` / ``.md``: one row per lead, forecast, score and threshold (the CRPS, the
Brier score and twCRPS at each threshold, the PIT flatness, SEEPS and the FSS); columns as the
CRPS table's, the score in ``value`` (its units in ``units``), plus ``score``, ``threshold``,
``value_low``/``value_high`` (the flatness' 95 % interval) and ``event_frequency`` (how often
the analysis exceeded the threshold). ``reliability_<var>.csv``: the reliability diagram data
of each forecast, lead and threshold, drawn in ``reliability_<var>_gt<threshold>.png``.
``pit_<var>.csv``: the pooled PIT and rank histograms behind the flatness.
"""

from __future__ import annotations

import pandas as pd

from ensml.verify.charts import reliability_diagram
from ensml.verify.events import EventTables
from ensml.verify.levels import field_name, is_surface
from ensml.verify.rows import SKILL_COLUMNS
from ensml.verify.tables import Content, to_markdown, weighting_phrase

#: Column order of the per-variable tables (``scores_<var>.csv``).
COLUMNS = [
    "variable",
    "level_hPa",
    "lead_h",
    "forecast",
    "score",
    "threshold",
    "value",
    "units",
    "estimator",
    *SKILL_COLUMNS,
    "gap_closed",
    "value_low",
    "value_high",
    "event_frequency",
    "n_scored",
]

#: What the per-variable tables' header says about their scores.
NOTE = (
    "Scores of the events y > threshold: crps and twcrps (threshold-weighted CRPS, weight 1{z > "
    "threshold}) in the variable's units; brier (Brier score), seeps (of the median, 0 perfect, 1 "
    "climatology) and pit_flatness (mean |count / mean count - 1| of the PIT or rank histogram, 0 "
    "flat; value_low/value_high its 95 % block-bootstrap interval) lower is better; fss "
    "(fractions skill score of the median) higher is better. Skill, its interval and dm_p: vs the "
    "raw ensemble, as in scores.md.\n\n"
)


def table(rows: list[dict]) -> pd.DataFrame:
    """The rows as a table in :data:`COLUMNS` order (columns no row has are left out)."""
    df = pd.DataFrame(rows)
    return df[[c for c in COLUMNS if c in df.columns]]


def threshold_text(value: float) -> str:
    """A threshold as tables and file names show it (``0.1``, ``25``)."""
    return f"{value:g}"


def event_files(
    events: EventTables, n_inits: int, weighting: str, leads_note: str = ""
) -> dict[str, Content]:
    """The files of ``events`` by name (see the module docstring), one set per variable."""
    header = " ".join(
        filter(None, [f"Scores over {n_inits} init times, {weighting_phrase(weighting)}.", leads_note])
    )
    files: dict[str, Content] = {}
    scores = table(events.rows)
    reliability = pd.DataFrame(events.reliability)
    pit = pd.DataFrame(events.pit)
    for var in dict.fromkeys(scores["variable"]):
        own = scores[scores["variable"] == var]
        shown = own.assign(threshold=[threshold_text(t) if pd.notna(t) else "" for t in own["threshold"]])
        files[f"scores_{var}.csv"] = own.to_csv(index=False)
        files[f"scores_{var}.md"] = header + "\n\n" + NOTE + to_markdown(shown)
        if len(reliability):
            rel = reliability[reliability["variable"] == var]
            files[f"reliability_{var}.csv"] = rel.to_csv(index=False)
            files.update(_diagrams(rel, var))
        if len(pit):
            files[f"pit_{var}.csv"] = pit[pit["variable"] == var].to_csv(index=False)
    return files


def _diagrams(rel: pd.DataFrame, var: str) -> dict[str, bytes]:
    """One reliability diagram per level and threshold of ``var``."""
    out = {}
    for (lev, thr), rows in rel.groupby([rel["level_hPa"].fillna(-1.0), "threshold"], sort=True):
        level = None if lev == -1.0 or is_surface(lev) else float(lev)
        name = f"reliability_{var}_gt{threshold_text(thr)}" + ("" if level is None else f"_{level:g}hPa")
        units = f" {rows['units'].iloc[0]}" if "units" in rows and pd.notna(rows["units"].iloc[0]) else ""
        title = f"{field_name(var, level)} > {threshold_text(thr)}{units}: reliability"
        out[f"{name}.png"] = reliability_diagram(rows, title)
    return out


__all__ = ["COLUMNS", "event_files", "table", "threshold_text"]
