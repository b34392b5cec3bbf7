"""The files of ``ensml benchmark``: the tables as CSV and ``benchmark.md`` (summary, targets,
reliability deviations, every score, with the note on how each column is computed)."""

from __future__ import annotations

import re
from collections.abc import Sequence

import numpy as np
import pandas as pd

from ensml.experiments.benchmark_calibration import CALIBRATION_NOTE
from ensml.experiments.benchmark_events import EVENTS_NOTE, reliability_markdown
from ensml.experiments.benchmark_maps import MAP_NAME
from ensml.verify.tables import to_markdown


def _format(df: pd.DataFrame) -> pd.DataFrame:
    out = df.copy()
    fmts = {
        "spread_rmse": "{:.4g}",
        "spread_corr": "{:.3f}",
        "mean_spread_corr": "{:.3f}",
        "params": "{:,.0f}",
        "train_s": "{:.0f}",
        "mean_skill_vs_raw_ensemble": "{:+.1%}",
        "mean_gap_closed": "{:.1%}",
        "mean_events_skill_vs_raw": "{:+.1%}",
        "spread_rmse_reduction": "{:+.1%}",
        "val_score": "{:.4g}",
        "baseline_val_score": "{:.4g}",
        "time_to_baseline_s": "{:.0f}",
        "samples_to_baseline": "{:,.0f}",
        "epochs": "{:.0f}",
        "best_epoch": "{:.0f}",
        "skill_vs_local_emos": "{:+.1%}",
        "emos_skill_low": "{:+.1%}",
        "emos_skill_high": "{:+.1%}",
        "mean_skill_vs_local_emos": "{:+.1%}",
        "spread_skill_ratio": "{:.3f}",
        "ssr_low": "{:.3f}",
        "ssr_high": "{:.3f}",
        "mean_spread_skill_ratio": "{:.3f}",
        "flatness": "{:.3f}",
        "flatness_low": "{:.3f}",
        "flatness_high": "{:.3f}",
        "mean_flatness": "{:.3f}",
        "neg_quantile_share": "{:.1%}",
        "reliability_dev": "{:.3f}",
    }
    fmts.update({c: "{:+.1%}" for c in out.columns if re.fullmatch(r"skill_\d+h", str(c))})
    for col, fmt in fmts.items():
        if col in out:
            out[col] = [fmt.format(v) if pd.notna(v) else "" for v in out[col]]
    return out


def _other_families(table: pd.DataFrame) -> str:
    """The note's words on the rows scored in families other than the normal (none: nothing)."""
    known = {"empirical ensemble", "Gaussian closed form"}
    crps = table["estimator"][table["crps"].notna()] if "crps" in table else table["estimator"].iloc[:0]
    if set(crps.dropna()) <= known:
        return ""
    return ", and each other family's CRPS (closed form, quantile quadrature for bqn) as its estimator says"


#: The reliability diagrams' file, written when a variable has event thresholds.
RELIABILITY_NAME = "benchmark_reliability.csv"
#: The files of a benchmark folder.
BENCHMARK_NAMES = ("benchmark.csv", "benchmark_summary.csv", "benchmark.md", MAP_NAME, RELIABILITY_NAME)


def benchmark_files(
    table: pd.DataFrame,
    summary: pd.DataFrame,
    n_inits: int,
    oracle: bool = True,
    reliability: pd.DataFrame | None = None,
    targets: Sequence[str] = (),
) -> dict[str, str]:
    """``benchmark.csv``, ``benchmark_summary.csv`` and ``benchmark.md`` (both tables) by name;
    ``oracle``: whether the table was scored against the generator's oracle (the note says so).
    With ``reliability`` rows (variables with event thresholds), also
    :data:`RELIABILITY_NAME` and, in ``benchmark.md``, the targets' verdict lines (``targets``)
    and each model's reliability deviation per threshold at the last lead."""
    if oracle:
        refs = (
            "skill and gap_closed refer to the raw ensemble (all members, empirical) and the "
            "oracle; crps_events: mean over the oracle's event_mask points. "
        )
    else:
        refs = "skill refers to the raw ensemble (all members, empirical). "
    note = (
        f"Test split: {n_inits} init times; area-weighted means (exact cell area). CRPS estimator per "
        "row: empirical ensemble CRPS for raw ensembles, closed-form Gaussian CRPS for rows marked "
        "Gaussian" + _other_families(table) + ". " + refs + "train_s is wall-clock time "
        "(with time_to_baseline_s, the only columns that differ between runs with the same seed). "
        "Time to quality: the first validation epoch whose score (val_score: the normalised CRPS of "
        "a mixed model, the normalised squared spread error of a spread model) reaches the baseline's "
        "(local EMOS for mixed models, the K-member sample std for spread models), its wall time "
        "from the start of training and the training samples seen by then. " + CALIBRATION_NOTE + "\n\n"
    )
    md = "## Summary (means over variables and levels; skill columns per lead)\n\n" + to_markdown(
        _format(summary)
    )
    files = {}
    if reliability is not None and not reliability.empty:
        md += "\n## Targets\n\n" + "".join(f"- {line}\n" for line in targets)
        last = int(table["lead_h"].max())
        wide = reliability_markdown(reliability, last)
        wide = wide.map(lambda v: f"{v:.3f}" if isinstance(v, float) and np.isfinite(v) else v)
        md += f"\n## Reliability at {last} h\n\n{EVENTS_NOTE}\n\n"
        md += to_markdown(wide).replace("| nan |", "|  |")
        files[RELIABILITY_NAME] = reliability.to_csv(index=False)
    md += "\n## All scores\n\n" + note + to_markdown(_format(table)).replace("| nan |", "|  |")
    return {
        "benchmark.csv": table.to_csv(index=False),
        "benchmark_summary.csv": summary.to_csv(index=False),
        "benchmark.md": md,
        **files,
    }


__all__ = ["BENCHMARK_NAMES", "RELIABILITY_NAME", "benchmark_files"]
