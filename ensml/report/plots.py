"""Charts of the verification report (not maps: those go through :mod:`ensml.verify.maps`).

Each function takes tidy tables or DataArrays and returns PNG bytes rendered with the Agg
canvas (no pyplot, no display), one panel per variable and level.
"""

from __future__ import annotations

import io

import numpy as np
import pandas as pd
import xarray as xr

from ensml.names import LeadLike, format_lead
from ensml.verify.levels import field_name, rows_of
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


def _panels(df: pd.DataFrame) -> list[tuple[str, float]]:
    return list(dict.fromkeys(zip(df["variable"], df["level_hPa"])))


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


def skill_by_lead(df: pd.DataFrame) -> bytes:
    """CRPS skill over the raw ensemble (``skill_vs_raw_ensemble``) against ``lead_h``, per forecast.

    One panel per variable and level; the raw ensemble is the 0 line (its own skill), above it
    a forecast beats the raw ensemble at that lead.
    """
    from matplotlib.ticker import PercentFormatter

    panels = _panels(df)
    fig, axes = _figure(len(panels))
    for ax, (var, lev) in zip(axes, panels):
        sub = rows_of(df, var, lev)
        for name, g in sub.groupby("forecast", sort=False):
            g = g.sort_values("lead_h")
            style = "-o" if len(g) > 1 else "D"
            raw = str(name).startswith("raw ensemble")
            ax.plot(
                g["lead_h"], g["skill_vs_raw_ensemble"], style, color=_colour(str(name)), label=name,
                ms=5, lw=2.0 if raw else 1.5, zorder=3 if raw else 2,
            )  # fmt: skip
        ax.axhline(0.0, color="k", lw=0.8, ls=":")
        ax.set_title(f"{field_name(var, lev)}: CRPS skill vs raw ensemble", fontsize=10)
        ax.set_xlabel("lead time (h)")
        ax.set_ylabel("1 − CRPS / CRPS(raw ensemble)")
        ax.yaxis.set_major_formatter(PercentFormatter(1.0, decimals=0))
        ax.set_xticks(sorted(sub["lead_h"].unique()))
        ax.grid(alpha=0.3)
    axes[0].legend(fontsize=7)
    return _png(fig)


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
    names = list(dict.fromkeys(df["forecast"]))
    handles = [Line2D([], [], color=_colour(n), marker="o", label=n) for n in names]
    axes[-1].legend(handles=handles, fontsize=7, loc="lower right")
    return _png(fig)


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


__all__ = ["rank_histograms", "reliability_diagrams", "scores_by_lead", "skill_by_lead", "spread_skill"]
