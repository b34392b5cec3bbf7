"""The page of the station benchmark (:mod:`ensml.experiments.benchmark_stations`):
``benchmark.md``'s tables per variable, the verdicts of the stations issue's targets and the
note on the columns, and which fitted row is a variable's best.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from ensml.verify.tables import p_value, to_markdown

#: The row every skill refers to: station-wise EMOS, the usual benchmark at stations.
REFERENCE = "EMOS, station-wise"
#: The stations issue's targets: the best station model's points of CRPS skill over station-wise
#: EMOS (its interval above zero), and the share of the raw -> oracle gap it closes.
TARGET_SKILL, TARGET_GAP = 0.03, 0.80


def best_model(result: pd.DataFrame, var: str, beside: bool = True) -> str | None:
    """The fitted station model of ``var`` with the lowest CRPS pooled over the leads (EMOS or a
    DRN; ``beside``: other than the reference, station-wise EMOS); None without one."""
    one = result[(result["variable"] == var) & result["fit_s"].notna()]
    if beside:
        one = one[one["forecast"] != REFERENCE]
    if one.empty:
        return None
    return str(one.groupby("forecast", sort=False)["crps"].mean().idxmin())


#: What ``benchmark.md`` says about its columns.
COLUMNS_NOTE = (
    "crps: the mean CRPS over the station-times of the test period that every row covers (n); "
    "the raw rows' is the ensemble CRPS of the members at the station (2 m temperature moved to "
    "the station's height where the data have a model orography), the others' their family's "
    "closed form. skill: 1 - crps / crps of station-wise EMOS, with its 95 % interval (a "
    "moving-block bootstrap over init times of each init's CRPS summed over its stations) and the "
    "Diebold-Mariano p "
    "(dm_p); skill_vs_raw: over the raw subset at the nearest grid point; gap_closed (with the "
    "station oracle): the share of the raw subset's distance to the oracle that the row closes. "
    "fit_s: the wall time of the row's fit (a DRN's split evenly over its variables).\n"
)


def _percent(value: float) -> str:
    return f"{value:+.1%}" if np.isfinite(value) else ""


def page(result: pd.DataFrame, facts: dict) -> str:
    """``benchmark.md``: what was compared on what, a table per variable, the targets' verdicts."""
    train, test = facts["train"], facts["test"]
    lines = [
        "# Station benchmark\n",
        f"{facts['source']} data, observations at {facts['stations']} stations; every model reads the "
        f"first {facts['k']} of {facts['members']} members. Fitted on {train.size} init times "
        f"({str(train[0])[:10]} … {str(train[-1])[:10]}), scored on {test.size} "
        f"({str(test[0])[:10]} … {str(test[-1])[:10]}); {facts['threads']} torch thread(s).\n",
    ]
    for var, one in result.groupby("variable", sort=False):
        shown = pd.DataFrame(
            {
                "forecast": one["forecast"],
                "lead": [f"{h} h" for h in one["lead_h"]],
                "n": one["n"],
                "crps": one["crps"],
                f"skill over {REFERENCE} [95 %]": [
                    f"{_percent(a)} [{_percent(lo)}, {_percent(hi)}]" if f != REFERENCE else "0 (reference)"
                    for f, a, lo, hi in zip(
                        one["forecast"], one["skill"], one["skill_low"], one["skill_high"]
                    )
                ],
                "DM p": [p_value(p) if f != REFERENCE else "" for f, p in zip(one["forecast"], one["dm_p"])],
                "skill over raw subset": [_percent(v) for v in one["skill_vs_raw"]],
                **(
                    {"gap closed": [f"{v:.1%}" if np.isfinite(v) else "" for v in one["gap_closed"]]}
                    if "gap_closed" in one
                    else {}
                ),
                "fit s": [f"{v:.1f}" if pd.notna(v) else "" for v in one["fit_s"]],
            }
        )
        lines += [f"## {var}\n", to_markdown(shown)]
    lines += [
        "## The stations issue's targets\n",
        *[f"- {line}" for line in verdicts(result)],
        "",
        "## The columns\n",
        COLUMNS_NOTE,
    ]
    return "\n".join(lines)


def verdicts(result: pd.DataFrame) -> list[str]:
    """Each variable's verdicts on the stations issue's targets: the best station model beside
    station-wise EMOS beats it by at least 3 points of CRPS skill with the interval above zero at
    every lead; and (with the oracle) the best station model of all closes at least 80 % of the
    raw subset's gap to the oracle at every lead."""
    out = []
    for var in dict.fromkeys(result["variable"]):
        best = best_model(result, var)
        if best is not None:
            rows = _rows_of(result, var, best)
            skills = "; ".join(
                f"{h} h {_percent(a)} [{_percent(lo)}, {_percent(hi)}]"
                for h, a, lo, hi in zip(rows["lead_h"], rows["skill"], rows["skill_low"], rows["skill_high"])
            )
            met = bool(((rows["skill"] >= TARGET_SKILL) & (rows["skill_low"] > 0)).all())
            out.append(
                f"{var}: the best station model beside {REFERENCE}, {best}, over it: {skills}. Target "
                f"at least {TARGET_SKILL:.0%} with the interval above zero at every lead: "
                f"{'met' if met else 'not met'}."
            )
        best = best_model(result, var, beside=False)
        if "gap_closed" in result and best is not None:
            rows = _rows_of(result, var, best)
            gaps = "; ".join(f"{h} h {g:.1%}" for h, g in zip(rows["lead_h"], rows["gap_closed"]))
            closed = bool((rows["gap_closed"] >= TARGET_GAP).all())
            out.append(
                f"{var}: the best station model, {best}, closes {gaps} of the raw subset's gap to the "
                f"station oracle. Target at least {TARGET_GAP:.0%} at every lead: "
                f"{'met' if closed else 'not met'}."
            )
    return out


def _rows_of(result: pd.DataFrame, var: str, name: str) -> pd.DataFrame:
    return result[(result["variable"] == var) & (result["forecast"] == name)]


__all__ = ["COLUMNS_NOTE", "REFERENCE", "TARGET_GAP", "TARGET_SKILL", "best_model", "page", "verdicts"]
