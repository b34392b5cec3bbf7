"""Charts of the verification report (not maps: those go through :mod:`ensml.verify.maps`).

Each function takes tidy tables or DataArrays and returns PNG bytes rendered with the Agg
canvas (no pyplot, no display), one panel per variable and level.
"""

from __future__ import annotations

import io

import numpy as np
import pandas as pd
import xarray as xr

from ensml.times import LeadLike, format_lead
from ensml.verify.levels import field_name, is_surface, rows_of
from ensml.verify.maps import display_units

COLOURS = {"raw ensemble": "k", "raw subset": "0.55", "post-processed": "tab:blue", "oracle": "tab:green"}


def _figure(n: int, height: float = 3.2):
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(4.2 * n, height), layout="constrained")
    FigureCanvasAgg(fig)
    return fig, [fig.add_subplot(1, n, i + 1) for i in range(n)]


def _png(fig) -> bytes:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=110)
    return buf.getvalue()


def _colour(name: str) -> str:
    return next((c for key, c in COLOURS.items() if name.startswith(key)), "tab:orange")


def _panels(df: pd.DataFrame) -> list[tuple[str, float | None]]:
    """The (variable, level) of each panel, in the order of the rows; a surface variable's NaN
    level as ``None`` (NaN keys would be told apart: one panel per row)."""
    return list(
        dict.fromkeys(
            (v, None if is_surface(lev) else lev) for v, lev in zip(df["variable"], df["level_hPa"])
        )
    )


def scores_by_lead(df: pd.DataFrame, column: str, ylabel: str) -> bytes:
    """Lines of ``column`` against ``lead_h`` per forecast (rows: variable, level_hPa, forecast)."""
    panels = _panels(df)
    fig, axes = _figure(len(panels))
    for ax, (var, lev) in zip(axes, panels):
        scale, _, units, label = display_units(var, "difference")
        sub = rows_of(df, var, lev)
        for name, g in sub.groupby("forecast", sort=False):
            g = g.sort_values("lead_h")
            style = "-o" if len(g) > 1 else "D"
            ax.plot(g["lead_h"], g[column] * scale, style, color=_colour(str(name)), label=name, ms=5)
        ax.set_title(f"{field_name(var, lev)}: {ylabel}", fontsize=10)
        ax.set_xlabel("lead time (h)")
        ax.set_ylabel(f"{ylabel} of {label} ({units})")
        ax.set_xticks(sorted(sub["lead_h"].unique()))
        ax.grid(alpha=0.3)
    axes[0].legend(fontsize=7)
    return _png(fig)


def skill_by_lead(df: pd.DataFrame, tests: pd.DataFrame | None = None) -> bytes:
    """CRPS skill over the raw ensemble (``skill_vs_raw_ensemble``) against ``lead_h``, per forecast.

    One panel per variable and level; the raw ensemble is the 0 line (its own skill), above it
    a forecast beats the raw ensemble at that lead. Where the rows hold ``skill_low`` /
    ``skill_high`` (evaluate's 95 % interval: in ``df``, or merged from evaluate's table
    ``tests`` by :func:`with_skill_tests`), each forecast's interval is a shaded band around its
    curve (error bars at a lead on its own); with ``dm_p``, markers are filled where the
    Diebold-Mariano test against the raw ensemble gives p < 0.05 and open elsewhere. A table
    without those columns (an older evaluate's) is drawn without bands, all markers filled.
    """
    from matplotlib.ticker import PercentFormatter

    if tests is not None:
        df = with_skill_tests(df, tests)
    panels = _panels(df)
    fig, axes = _figure(len(panels))
    for ax, (var, lev) in zip(axes, panels):
        sub = rows_of(df, var, lev)
        for name, g in sub.groupby("forecast", sort=False):
            g = g.sort_values("lead_h")
            raw, c = str(name).startswith("raw ensemble"), _colour(str(name))
            tested = "dm_p" in g and not raw
            ax.plot(
                g["lead_h"],
                g["skill_vs_raw_ensemble"],
                "-o" if len(g) > 1 else "D",
                color=c,
                label=name,
                ms=5,
                lw=2.0 if raw else 1.5,
                zorder=3 if raw else 2,
                mfc="white" if tested else c,
            )
            if tested:
                sig = g[g["dm_p"] < DM_LEVEL]
                ax.plot(
                    sig["lead_h"],
                    sig["skill_vs_raw_ensemble"],
                    "o" if len(g) > 1 else "D",
                    color=c,
                    ms=5,
                    zorder=2.5,
                )
            if not raw and all(col in g for col in INTERVAL):
                _interval(ax, g, c)
        ax.axhline(0.0, color="k", lw=0.8, ls=":")
        ax.set_title(f"{field_name(var, lev)}: CRPS skill vs raw ensemble", fontsize=10)
        ax.set_xlabel("lead time (h)")
        ax.set_ylabel("1 − CRPS / CRPS(raw ensemble)")
        ax.yaxis.set_major_formatter(PercentFormatter(1.0, decimals=0))
        ax.set_xticks(sorted(sub["lead_h"].unique()))
        ax.grid(alpha=0.3)
    axes[0].legend(fontsize=7)
    return _png(fig)


#: The columns of the skill interval, and the DM p-value below which a marker is filled.
INTERVAL = ("skill_low", "skill_high")
DM_LEVEL = 0.05


def _interval(ax, g: pd.DataFrame, colour: str) -> None:
    """``g``'s skill interval (rows sorted by lead): a band over each run of consecutive leads
    that have one, an error bar at a lead with one on its own (leads without: nothing)."""
    has = (g["skill_low"].notna() & g["skill_high"].notna()).to_numpy()
    run = np.cumsum(np.r_[True, has[1:] != has[:-1]])  # one number per run of has / has not
    for r in np.unique(run[has]):
        part = g[run == r]
        x, lo, hi = part["lead_h"].to_numpy(), part["skill_low"].to_numpy(), part["skill_high"].to_numpy()
        if len(part) > 1:
            ax.fill_between(x, lo, hi, color=colour, alpha=0.18, lw=0, zorder=1)
        else:
            mid = part["skill_vs_raw_ensemble"].to_numpy()
            ax.errorbar(x, mid, yerr=[mid - lo, hi - mid], fmt="none", ecolor=colour, capsize=3, zorder=1)


def with_skill_tests(by_lead: pd.DataFrame, tests: pd.DataFrame) -> pd.DataFrame:
    """``by_lead`` with the interval and DM columns of evaluate's table ``tests`` (``skill_low``,
    ``skill_high``, ``dm_p``, those it has) of the same variable, level, lead and forecast name;
    NaN where ``tests`` has no such row (a lead or forecast evaluate did not score)."""
    cols = [c for c in (*INTERVAL, "dm_p") if c in tests]
    if not cols:
        return by_lead
    keys = ["variable", "_lev", "lead_h", "forecast"]
    # level_hPa is NaN for a surface variable: merge on a key that matches NaN with NaN
    right = tests.assign(_lev=tests["level_hPa"].fillna(-1.0))[keys + cols].drop_duplicates(keys)
    left = by_lead.drop(columns=[c for c in cols if c in by_lead])
    merged = left.assign(_lev=left["level_hPa"].fillna(-1.0)).merge(right, on=keys, how="left")
    return merged.drop(columns="_lev").set_axis(by_lead.index)


def spread_skill(df: pd.DataFrame) -> bytes:
    """Ensemble spread (solid) and ensemble-mean RMSE (dashed) against lead time; SSR at the end."""
    from matplotlib.lines import Line2D

    panels = _panels(df)
    fig, axes = _figure(len(panels), height=3.4)
    for ax, (var, lev) in zip(axes, panels):
        scale, _, units, label = display_units(var, "difference")
        sub = rows_of(df, var, lev)
        notes = []
        for name, g in sub.groupby("forecast", sort=False):
            g = g.sort_values("lead_h")
            c = _colour(str(name))
            ax.plot(g["lead_h"], g["spread"] * scale, "-o", color=c, ms=4)
            ax.plot(g["lead_h"], g["rmse"] * scale, "--s", color=c, ms=4, mfc="none")
            notes.append((c, f"{str(name).split(' (')[0]}: SSR {g['ssr'].iloc[-1]:.2f}"))
        for i, (c, text) in enumerate(notes):
            ax.text(0.02, 0.97 - 0.08 * i, text, transform=ax.transAxes, fontsize=7, color=c, va="top")
        ax.set_title(f"{field_name(var, lev)}: spread (solid) and RMSE (dashed)", fontsize=10)
        ax.set_xlabel("lead time (h)")
        ax.set_ylabel(f"{label} ({units})")
        ax.set_xticks(sorted(sub["lead_h"].unique()))
        ax.grid(alpha=0.3)
    by_colour: dict[str, list[str]] = {}
    for name in dict.fromkeys(df["forecast"]):
        by_colour.setdefault(_colour(str(name)), []).append(str(name))
    handles = [Line2D([], [], color=c, marker="o", label=_one_label(ns)) for c, ns in by_colour.items()]
    axes[-1].legend(handles=handles, fontsize=7, loc="lower right")
    return _png(fig)


def _one_label(names: list[str]) -> str:
    """One legend entry for the forecasts of one colour: a source in several families (one per
    variable) as ``post-processed (csg0, truncnormal, Gaussian)``."""
    source = names[0].split(" (")[0]
    if len(names) == 1 or not all(n.startswith(f"{source} (") and n.endswith(")") for n in names):
        return ", ".join(names)
    return f"{source} ({', '.join(n[len(source) + 2 : -1] for n in names)})"


def rank_histograms(hists: dict[tuple[str, float], xr.DataArray], lead: LeadLike) -> bytes:
    """Bars of the relative frequency of each rank at ``lead``; the dashed line is a flat histogram."""
    fig, axes = _figure(len(hists))
    for ax, ((var, lev), h) in zip(axes, hists.items()):
        freq = h.values / h.values.sum()
        ax.bar(np.arange(freq.size), freq, color="0.4", width=0.85)
        ax.axhline(1.0 / freq.size, color="tab:red", ls="--", lw=1, label="flat (calibrated)")
        ax.set_title(f"{field_name(var, lev)} at +{format_lead(lead)}: rank histogram", fontsize=10)
        ax.set_xlabel("rank of the analysis among the members")
        ax.set_ylabel("relative frequency (area-weighted)")
        ax.set_xticks(np.arange(freq.size))
    axes[0].legend(fontsize=7)
    return _png(fig)


def reliability_diagrams(rel: dict[tuple[str, float], dict[str, xr.Dataset]], event: str) -> bytes:
    """Observed frequency against forecast probability per forecast; the diagonal is perfect."""
    fig, axes = _figure(len(rel), height=3.8)
    for ax, ((var, lev), sources) in zip(axes, rel.items()):
        ax.plot([0, 1], [0, 1], color="tab:red", ls="--", lw=1, label="perfect reliability")
        for name, ds in sources.items():
            ok = ds["count"].values > 0
            ax.plot(
                ds["forecast_probability"].values[ok],
                ds["observed_frequency"].values[ok],
                "-o",
                color=_colour(name),
                ms=4,
                label=name,
            )
        ax.set_xlim(0, 1)
        ax.set_ylim(0, 1)
        ax.set_aspect("equal")
        ax.set_title(f"{field_name(var, lev)}: {event}", fontsize=9)
        ax.set_xlabel("forecast probability")
        ax.set_ylabel("observed frequency")
        ax.grid(alpha=0.3)
    axes[0].legend(fontsize=7)
    return _png(fig)


__all__ = [
    "rank_histograms",
    "reliability_diagrams",
    "scores_by_lead",
    "skill_by_lead",
    "spread_skill",
    "with_skill_tests",
]
