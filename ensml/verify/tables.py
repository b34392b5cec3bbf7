"""Score tables: write CSV / Markdown / per-point netCDF together, formatted alike."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import xarray as xr

from ensml.data.writers import write_netcdf

FLOAT_FORMATS = {
    "crps": "{:.4g}",
    "skill_vs_raw_ensemble": "{:+.1%}",
    "gap_closed": "{:.1%}",
    "rmse": "{:.4g}",
    "spread": "{:.4g}",
    "correlation": "{:.3f}",
    "crps_events": "{:.4g}",
    "events_skill_vs_raw": "{:+.1%}",
    "level_hPa": "{:g}",
}


def formatted(df: pd.DataFrame) -> pd.DataFrame:
    """``df`` with its score columns as text, as tables show them (:data:`FLOAT_FORMATS`)."""
    out = df.copy()
    for col, fmt in FLOAT_FORMATS.items():
        if col in out:
            blank = "surface" if col == "level_hPa" else ""  # a surface variable has no level
            out[col] = [fmt.format(v) if pd.notna(v) else blank for v in out[col]]
    return out


def to_markdown(df: pd.DataFrame) -> str:
    """A GitHub-flavoured Markdown table (no tabulate dependency)."""
    df = formatted(df).astype(object).fillna("").astype(str)  # pandas 3 keeps NaN through astype(str)
    lines = ["| " + " | ".join(df.columns) + " |", "|" + "|".join("---" for _ in df.columns) + "|"]
    lines += ["| " + " | ".join(row) + " |" for row in df.itertuples(index=False)]
    return "\n".join(lines) + "\n"


EVALUATE_NAMES = ("scores.csv", "scores.md", "scores.nc", "spread.csv", "spread.md", "cases")


def weighting_phrase(weighting: str) -> str:
    """How means were weighted, for tables and reports (``weighting`` of ``area_weights``)."""
    return f"unweighted ({weighting})" if weighting.startswith("uniform") else f"area-weighted ({weighting})"


def write_outputs(
    folder: Path,
    table: pd.DataFrame,
    spread: pd.DataFrame | None,
    fields: xr.Dataset,
    n_inits: int,
    weighting: str = "exact cell area",
    leads_note: str = "",
) -> None:
    """Write evaluate's tables and per-point scores into ``folder`` (a new, empty folder).

    ``evaluate`` builds its output folder this way inside :func:`ensml.data.outdir.replace_folder`,
    so ``out_dir`` holds one run's results, complete, or the earlier run's. ``weighting`` (the
    attribute of :func:`ensml.data.weights.area_weights`) is stated in the headers and in
    ``scores.nc``; ``leads_note`` (leads left out, see :class:`ensml.verify.evaluate.Scores`) in
    the headers.
    """
    header = " ".join(
        filter(None, [f"Scores over {n_inits} init times, {weighting_phrase(weighting)}.", leads_note])
    )
    header += "\n\n"
    table.to_csv(folder / "scores.csv", index=False)
    (folder / "scores.md").write_text(header + to_markdown(table))
    if spread is not None:
        spread.to_csv(folder / "spread.csv", index=False)
        (folder / "spread.md").write_text(header + to_markdown(spread))
    fields.attrs.update(
        title="ensml per-point scores (mean over init times)", init_times=n_inits, weighting=weighting
    )
    write_netcdf(fields, folder / "scores.nc")
