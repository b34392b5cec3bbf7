"""The generative benchmark's table, page and figures (:mod:`ensml.experiments.benchmark_generative`).

:func:`table_rows` scores every method of every cell as fields (:mod:`ensml.verify.multivariate`)
beside its per-point CRPS; :func:`page` writes ``benchmark.md`` with the verdicts of the
generated-members issue's three targets, reported as they come out:

* the generated members beat ECC-Q on the variogram score with an interval above zero;
* their per-point CRPS stays within 2 % of the best parametric network's;
* their rank histograms of area means are flatter than ECC-Q's.

:func:`figures` draws, per variable, the truth beside four generated and four ECC-Q members of one
test init (``members_<var>.png``) and the rank histograms of every method
(``rank_histograms_<var>.png``).
"""

from __future__ import annotations

import io
from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np
import pandas as pd
import xarray as xr

from ensml.data.weights import latitude_weights
from ensml.experiments.benchmark_generative_members import ECC
from ensml.names import INIT_TIME, LATITUDE, LONGITUDE, MEMBER
from ensml.scores import crps_ensemble_array
from ensml.scores.significance import forecast_horizon
from ensml.times import hours_of
from ensml.verify.charts import rank_histogram_chart
from ensml.verify.multivariate import FieldScores, compare, field_scores
from ensml.verify.tables import p_value, to_markdown

if TYPE_CHECKING:
    from ensml.experiments.benchmark_generative_cells import Cell

#: The per-point CRPS target: within this fraction of the parametric network's.
CRPS_TOLERANCE = 0.02
#: The dims of a field of the test period.
FIELD = (INIT_TIME, LATITUDE, LONGITUDE)
#: Members drawn in the figure of each method.
SHOWN_MEMBERS = 4


def table_rows(
    cells: Sequence[Cell], inits: np.ndarray, parametric: str, reference: str = ECC
) -> tuple[list[dict], list[dict[str, FieldScores]]]:
    """A row per cell and method: the per-point CRPS (the parametric network's closed form, in a
    row named ``parametric``; of each set of members the standard ensemble CRPS, what a user
    scoring those N members sees, and the fair CRPS, the unbiased CRPS of the distribution that
    draws them, which ``crps_vs_parametric`` compares with the closed form) and the whole-field
    scores with their skill over ``reference``; the parametric network's own row has its CRPS only.

    The fair CRPS is unbiased for members that are random draws (the raw ensemble, the Gaussian
    copula, the generated and the oracle's members); ECC-Q's and the Schaake shuffle's are the
    margins' quantiles, not draws, and their fair CRPS lies below their margins' CRPS.

    Also returns each cell's whole-field scores by method (for :func:`figures`)."""
    rows, by_cell = [], []
    for cell in cells:
        weights = latitude_weights(cell.truth[LATITUDE].values)
        h = forecast_horizon(cell.lead, inits)
        scored = {name: field_scores(x, cell.truth, weights) for name, x in cell.members.items()}
        by_cell.append(scored)
        where = {
            "lead_h": hours_of(cell.lead),
            "variable": cell.var,
            "level_hPa": cell.level,
            "draws": cell.draws,
        }
        parametric_crps = _area_mean(cell.parametric_crps, weights)
        rows.append({**where, "forecast": parametric, "crps": parametric_crps})
        truth = cell.truth.transpose(INIT_TIME, LATITUDE, LONGITUDE).values
        for row in compare(scored, h, reference):
            x = cell.members[row["forecast"]].transpose(INIT_TIME, MEMBER, LATITUDE, LONGITUDE).values
            crps = {
                key: _area_mean(
                    xr.DataArray(crps_ensemble_array(x, truth, axis=1, fair=fair), dims=FIELD), weights
                )
                for key, fair in (("crps", False), ("crps_fair", True))
            }
            rows.append(
                {**where, **row, **crps, "crps_vs_parametric": crps["crps_fair"] / parametric_crps - 1.0}
            )
    return rows, by_cell


def _area_mean(x: xr.DataArray, weights: xr.DataArray) -> float:
    """The area-weighted mean of ``x`` (init, lat, lon) over everything (weights of mean 1)."""
    w = weights.values[None, :, None]
    return float((x.transpose(INIT_TIME, LATITUDE, LONGITUDE).values * w).mean())


def verdicts(table: pd.DataFrame, generative: str) -> list[str]:
    """The issue's three targets, one line each, met or not, with the cells that decide it."""
    gen = table[table["forecast"] == generative].set_index(["lead_h", "variable", "level_hPa"])
    ecc = table[table["forecast"] == ECC].set_index(["lead_h", "variable", "level_hPa"])

    def cell(key: tuple) -> str:
        lead, var, level = key
        return f"{var}{'' if pd.isna(level) else f'{level:g}'} +{lead:g} h"

    def line(what: str, ok: pd.Series, detail: pd.Series) -> str:
        verdict = "met" if bool(ok.all()) else f"not met ({int((~ok).sum())} of {ok.size} fields)"
        shown = "; ".join(f"{cell(k)}: {v}" for k, v in detail.items())
        return f"- {what}: **{verdict}** ({shown})"

    vs = gen["variogram_skill_low"] > 0
    vs_detail = gen.apply(
        lambda r: (
            f"{100 * r.variogram_skill:+.1f} % [{100 * r.variogram_skill_low:+.1f}, "
            f"{100 * r.variogram_skill_high:+.1f}]"
        ),
        axis=1,
    )
    crps = gen["crps_vs_parametric"] <= CRPS_TOLERANCE
    crps_detail = gen["crps_vs_parametric"].map(lambda v: f"{100 * v:+.1f} %")
    flat = gen["area_mean_flatness"] < ecc["area_mean_flatness"].reindex(gen.index)
    flat_detail = pd.Series(
        [
            f"{g:.2f} vs {e:.2f}"
            for g, e in zip(gen["area_mean_flatness"], ecc["area_mean_flatness"].reindex(gen.index))
        ],
        index=gen.index,
    )
    return [
        line("variogram score better than ECC-Q's, 95 % interval above 0", vs, vs_detail),
        line(
            f"per-point CRPS within {100 * CRPS_TOLERANCE:g} % of the parametric network's", crps, crps_detail
        ),
        line("rank histograms of area means flatter than ECC-Q's", flat, flat_detail),
    ]


#: Columns of ``benchmark.md``'s tables, as shown.
SHOWN = {
    "forecast": "forecast",
    "members": "members",
    "crps": "CRPS",
    "crps_fair": "fair CRPS",
    "crps_vs_parametric": "fair CRPS vs parametric",
    "energy": "ES",
    "energy_skill": "ES skill",
    "variogram": "VS",
    "variogram_skill": "VS skill",
    "variogram_dm_p": "VS DM p",
    "area_mean_flatness": "area-mean flatness",
    "band_depth_flatness": "band-depth flatness",
    "flatness_if_calibrated": "flat if calibrated",
    "spectrum_error": "spectrum error",
    "fit_s": "fit s",
}


def page(table: pd.DataFrame, kind: str, generative: str, parametric: str) -> str:
    """``benchmark.md``: per count of members (``draws``), the verdicts, then a table per lead,
    variable and level."""
    data = (
        "the synthetic data (oracle members: the generator's true joint distribution)"
        if kind == "synth"
        else ("the physics testbed (its truth run as the analysis; no oracle)")
    )
    lines = [
        f"# Generated members: {generative} against two-step methods on {data}",
        "",
        f"Every method but the raw ones has the section's count of members per init; the two-step methods "
        f"share the margins of {parametric}. Skills are over {ECC} with as many members, with 95 % "
        "moving-block bootstrap intervals over init times; "
        "CRPS: the parametric network's closed form; of each set of members the standard ensemble CRPS "
        "(what scoring these members gives) and the fair one (unbiased for the distribution that draws "
        "them: the raw, copula, generated and oracle members; ECC-Q's and the Schaake shuffle's are "
        "quantiles, whose fair CRPS lies below their margins'). The standard ensemble scores of N random "
        "draws carry a sampling term of order 1/N that quantile members do not; the generator can draw "
        "any N.",
        "",
    ]
    shown = _shown(table)
    for draws, block in table.groupby("draws", sort=False):
        lines += [f"## {draws:g} members a method", "", "### Targets", "", *verdicts(block, generative), ""]
        for (lead, var, level), rows in shown[table["draws"] == draws].groupby(
            ["lead_h", "variable", "level_hPa"], dropna=False, sort=True
        ):
            title = f"### {var}{'' if pd.isna(level) else f' {level:g} hPa'}, +{lead:g} h"
            cols = [c for c in SHOWN if c in rows]
            lines += [title, "", to_markdown(rows[cols].rename(columns=SHOWN)), ""]
    lines += [
        "ES, VS: energy and variogram (p = 0.5) scores of the whole field, lower is better. Flatness of "
        "the rank histograms: 0 is flat; a calibrated ensemble of that size shows about the "
        "'flat if calibrated' column on these init times. Spectrum error: mean |ln| of the members' "
        "zonal power spectrum over the truth's at wavenumbers ≥ 1.",
    ]
    return "\n".join(lines) + "\n"


def _shown(table: pd.DataFrame) -> pd.DataFrame:
    """``table`` with every column as ``benchmark.md`` shows it."""
    shown = table.copy()
    for col in ("crps", "crps_fair", "energy", "variogram"):
        shown[col] = shown[col].map(lambda v: "" if pd.isna(v) else f"{v:.4g}")
    for col in ("area_mean_flatness", "band_depth_flatness", "flatness_if_calibrated", "spectrum_error"):
        shown[col] = shown[col].map(lambda v: "" if pd.isna(v) else f"{v:.2f}")
    shown["variogram_dm_p"] = shown["variogram_dm_p"].map(lambda v: "" if pd.isna(v) else p_value(v))
    shown["members"] = shown["members"].map(lambda v: "" if pd.isna(v) else f"{int(v)}")
    if "fit_s" in shown:
        shown["fit_s"] = shown["fit_s"].map(lambda v: "" if pd.isna(v) else f"{v:.0f}")
    for col in ("crps_vs_parametric", "energy_skill", "variogram_skill"):
        low, high = f"{col}_low", f"{col}_high"
        shown[col] = [
            ""
            if pd.isna(v)
            else f"{100 * v:+.1f}%"
            + (
                f" [{100 * lo:+.1f}, {100 * hi:+.1f}]"
                if low in shown and pd.notna(lo) and pd.notna(hi)
                else ""
            )
            for v, lo, hi in zip(
                shown[col], shown.get(low, shown[col] * np.nan), shown.get(high, shown[col] * np.nan)
            )
        ]
    return shown


def figures(
    cells: Sequence[Cell], generative: str, scored: Sequence[dict[str, FieldScores]]
) -> dict[str, bytes]:
    """``members_<var>.png`` and ``rank_histograms_<var>.png`` of each variable (its first level,
    the last lead); ``scored``: each cell's whole-field scores (:func:`table_rows`)."""
    out = {}
    for var in dict.fromkeys(c.var for c in cells):
        own = [i for i, c in enumerate(cells) if c.var == var]
        last = max(cells[i].lead for i in own)
        i = next(i for i in own if cells[i].lead == last)
        cell = cells[i]
        out[f"members_{var}.png"] = _members_figure(cell, generative)
        rows = []
        for name, x in cell.members.items():
            for method, r in scored[i][name].ranks.items():
                counts = np.bincount(r[r > 0] - 1, minlength=x.sizes[MEMBER] + 1)
                rows += [
                    {"forecast": name, "prerank": method, "rank": i, "count": int(c)}
                    for i, c in enumerate(counts)
                ]
        level = "" if cell.level is None else f" {cell.level:g} hPa"
        title = f"{var}{level} +{hours_of(last):g} h: rank histograms"
        out[f"rank_histograms_{var}.png"] = rank_histogram_chart(pd.DataFrame(rows), title)
    return out


def _members_figure(cell: Cell, generative: str) -> bytes:
    """The truth of the first test init beside four members of the generator and of ECC-Q, each
    as its departure from the raw ensemble's mean (one reference for all: the structure shows)."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    first = {INIT_TIME: 0}
    reference = next(iter(cell.members.values())).isel(first).mean(MEMBER)  # the raw ensemble's mean
    truth = cell.truth.isel(first) - reference
    rows = [(generative, cell.members[generative]), (ECC, cell.members[ECC])]
    fig = Figure(figsize=(3.0 * (SHOWN_MEMBERS + 1), 2.0 * len(rows) + 0.8))
    FigureCanvasAgg(fig)
    span = float(np.nanpercentile(np.abs(truth.values), 99)) or 1.0
    lat, lon = truth[LATITUDE].values, truth[LONGITUDE].values
    extent = [float(lon.min()), float(lon.max()), float(lat.min()), float(lat.max())]
    image = None
    for i, (name, x) in enumerate(rows):
        shown = min(SHOWN_MEMBERS, x.sizes[MEMBER])
        panels = [("analysis (truth)", truth)]
        panels += [
            (f"{name}: member {m + 1}", x.isel({**first, MEMBER: m}) - reference) for m in range(shown)
        ]
        for j, (title, field) in enumerate(panels):
            ax = fig.add_subplot(len(rows), SHOWN_MEMBERS + 1, i * (SHOWN_MEMBERS + 1) + j + 1)
            image = ax.imshow(
                field.transpose(LATITUDE, LONGITUDE).values,
                origin="upper" if lat[0] > lat[-1] else "lower",
                extent=extent,
                vmin=-span,
                vmax=span,
                cmap="RdBu_r",
                aspect="auto",
            )
            ax.set_title(title, fontsize=8)
            ax.tick_params(labelsize=6)
    fig.colorbar(image, ax=fig.axes, shrink=0.8, label=f"{cell.var} − raw ensemble mean")
    level = "" if cell.level is None else f" {cell.level:g} hPa"
    when = str(cell.truth[INIT_TIME].values[0])[:10]
    fig.suptitle(
        f"{cell.var}{level} +{hours_of(cell.lead):g} h, init {when}: departures from the raw mean",
        fontsize=10,
    )
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=100)
    return buf.getvalue()


__all__ = ["CRPS_TOLERANCE", "figures", "page", "table_rows", "verdicts"]
