"""Score tables: write CSV / Markdown / per-point netCDF together, formatted alike."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pandas as pd
import xarray as xr

if TYPE_CHECKING:
    from ensml.data.outputs import OutputFolder


FLOAT_FORMATS = {
    "crps": "{:.4g}",
    "skill_vs_raw_ensemble": "{:+.1%}",
    "gap_closed": "{:.1%}",
    "rmse": "{:.4g}",
    "mae": "{:.4g}",
    "spread_skill": "{:.3f}",
    "spread": "{:.4g}",
    "correlation": "{:.3f}",
    "crps_events": "{:.4g}",
    "events_skill_vs_raw": "{:+.1%}",
    "level_hPa": "{:g}",
    "dm_stat": "{:.2f}",
    "reliability": "{:.4g}",
    "resolution": "{:.4g}",
    "uncertainty": "{:.4g}",
    "crps_potential": "{:.4g}",
    "block_length": "{:g}",
    "value": "{:.4g}",
    "value_low": "{:.4g}",
    "value_high": "{:.4g}",
    "event_frequency": "{:.3g}",
}
#: Interval ends, shown together as one ``skill_95%`` column in Markdown.
INTERVAL = ("skill_low", "skill_high")


def formatted(df: pd.DataFrame) -> pd.DataFrame:
    """``df`` with its score columns as text, as tables show them (:data:`FLOAT_FORMATS`)."""
    out = df.copy()
    for col, fmt in FLOAT_FORMATS.items():
        if col in out:
            blank = "surface" if col == "level_hPa" else ""  # a surface variable has no level
            out[col] = [fmt.format(v) if pd.notna(v) else blank for v in out[col]]
    if "dm_p" in out:
        out["dm_p"] = [p_value(v) for v in out["dm_p"]]
    if all(c in out for c in INTERVAL):
        at = out.columns.get_loc(INTERVAL[0])
        ends = zip(*(df[c] for c in INTERVAL), strict=True)
        text = [f"[{lo:+.1%}, {hi:+.1%}]" if pd.notna(lo) and pd.notna(hi) else "" for lo, hi in ends]
        out = out.drop(columns=list(INTERVAL))
        out.insert(at, "skill_95%", text)
    return out


def p_value(p: float) -> str:
    """A p-value as tables show it: two significant digits, ``<0.001`` below 0.001."""
    if pd.isna(p):
        return ""
    return "<0.001" if p < 0.001 else f"{p:.2g}"


def to_markdown(df: pd.DataFrame) -> str:
    """A GitHub-flavoured Markdown table (no tabulate dependency)."""
    df = formatted(df).astype(object).fillna("").astype(str)  # pandas 3 keeps NaN through astype(str)
    lines = ["| " + " | ".join(df.columns) + " |", "|" + "|".join("---" for _ in df.columns) + "|"]
    lines += ["| " + " | ".join(row) + " |" for row in df.itertuples(index=False)]
    return "\n".join(lines) + "\n"


#: What the decomposition table's header says about its columns.
DECOMPOSITION_NOTE = (
    "Hersbach (2000) decomposition of the ensemble CRPS: crps = reliability - resolution + "
    "uncertainty (lower reliability is better, higher resolution is better; uncertainty is the "
    "CRPS of the analysis' own climatology over the same init times and points, pooled over the "
    "grid, so differences between places count as resolution). Always of the standard "
    "(empirical) ensemble CRPS.\n\n"
)


#: What an output of a verb is: text, bytes, or a dataset written as CF netCDF.
Content = str | bytes | xr.Dataset


def weighting_phrase(weighting: str) -> str:
    """How means were weighted, for tables and reports (``weighting`` of ``area_weights``)."""
    return f"unweighted ({weighting})" if weighting.startswith("uniform") else f"area-weighted ({weighting})"


def score_files(
    table: pd.DataFrame,
    spread: pd.DataFrame | None,
    fields: xr.Dataset,
    n_inits: int,
    weighting: str = "exact cell area",
    leads_note: str = "",
    decomposition: pd.DataFrame | None = None,
) -> dict[str, Content]:
    """Evaluate's tables and per-point scores by file name (``scores.csv``, ``scores.md``, ``scores.nc``,
    ``spread.csv``, ``spread.md`` with a spread table, ``decomposition.csv``, ``decomposition.md``
    with a CRPS decomposition table).

    ``weighting`` (the attribute of :func:`ensml.data.weights.area_weights`) is stated in the
    headers and in ``scores.nc``; ``leads_note`` (leads left out, see
    :class:`ensml.verify.evaluate.Scores`) in the headers.
    """
    header = " ".join(
        filter(None, [f"Scores over {n_inits} init times, {weighting_phrase(weighting)}.", leads_note])
    )
    header += "\n\n"
    files: dict[str, Content] = {
        "scores.csv": table.to_csv(index=False),
        "scores.md": header + to_markdown(table),
    }
    if spread is not None:
        files["spread.csv"] = spread.to_csv(index=False)
        files["spread.md"] = header + to_markdown(spread)
    if decomposition is not None and len(decomposition):  # none for ensembles of one member
        files["decomposition.csv"] = decomposition.to_csv(index=False)
        files["decomposition.md"] = header + DECOMPOSITION_NOTE + to_markdown(decomposition)
    fields = fields.copy()
    fields.attrs.update(
        title="ensml per-point scores (mean over init times)", init_times=n_inits, weighting=weighting
    )
    files["scores.nc"] = fields
    return files


def write_files(folder: OutputFolder, files: dict[str, Content], prefix: str = "") -> None:
    """Write ``files`` (name → content) into ``folder`` under ``prefix`` (``"cases/"``): text and
    bytes as they are, datasets as CF netCDF (``history``: the folder's command)."""
    for name, content in files.items():
        if isinstance(content, xr.Dataset):
            folder.write_netcdf(content, prefix + name, history=folder.command)
        elif isinstance(content, str):
            folder.write_text(prefix + name, content)
        else:
            folder.write_bytes(prefix + name, content)
