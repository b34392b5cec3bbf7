"""Charts of ``evaluate`` that are not maps (those go through :mod:`ensml.verify.maps`).

Rendered with the Agg canvas (no pyplot, no display) and returned as PNG bytes, which
``evaluate`` writes atomically with its tables, as :func:`ensml.verify.maps.draw_maps` does.
"""

from __future__ import annotations

import io

import numpy as np
import pandas as pd

#: Line colours by the start of a forecast's name (others: orange).
COLOURS = {"raw ensemble": "k", "raw subset": "0.55", "post-processed": "tab:blue", "oracle": "tab:green"}


def _colour(name: str) -> str:
    return next((c for key, c in COLOURS.items() if name.startswith(key)), "tab:orange")


def reliability_diagram(rows: pd.DataFrame, title: str) -> bytes:
    """Observed frequency against forecast probability, one panel per lead, one line per forecast.

    ``rows``: reliability data of one variable, level and threshold (columns ``lead_h``,
    ``forecast``, ``forecast_probability``, ``observed_frequency``, ``count``, as
    ``reliability_<var>.csv``); empty bins are not drawn. The diagonal is perfect reliability;
    under each panel, the share of the points in each bin of the first forecast (the sharpness).
    """
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    leads = sorted(rows["lead_h"].unique())
    fig = Figure(figsize=(4.0 * len(leads), 4.6))
    FigureCanvasAgg(fig)
    grid = fig.add_gridspec(
        2,
        len(leads),
        height_ratios=[4, 1],
        left=0.12 / len(leads) ** 0.5,
        right=0.97,
        top=0.88,
        bottom=0.1,
        hspace=0.35,
        wspace=0.3,
    )
    for i, lead in enumerate(leads):
        ax = fig.add_subplot(grid[0, i])
        sharp = fig.add_subplot(grid[1, i], sharex=ax)
        ax.plot([0, 1], [0, 1], color="tab:red", ls="--", lw=1, label="perfect reliability")
        sub = rows[rows["lead_h"] == lead]
        for j, (name, g) in enumerate(sub.groupby("forecast", sort=False)):
            ok = g["count"].to_numpy() > 0
            ax.plot(
                g["forecast_probability"].to_numpy()[ok],
                g["observed_frequency"].to_numpy()[ok],
                "-o",
                color=_colour(name),
                ms=4,
                label=name,
            )
            if j == 0:
                share = g["count"].to_numpy() / max(float(np.nansum(g["count"])), 1.0)
                centres = (g["bin_lower"].to_numpy() + g["bin_upper"].to_numpy()) / 2
                width = float(np.median(g["bin_upper"] - g["bin_lower"]))
                sharp.bar(centres, share, width=0.9 * width, color=_colour(name))
        ax.set_xlim(0, 1)
        ax.set_ylim(0, 1)
        ax.set_title(f"+{lead:g} h", fontsize=9)
        if i == 0:
            ax.set_ylabel("observed frequency")
            sharp.set_ylabel("share", fontsize=8)
        ax.grid(alpha=0.3)
        sharp.set_xlabel("forecast probability")
        sharp.tick_params(labelsize=7)
        if i == 0:
            ax.legend(fontsize=7)
    fig.suptitle(title, fontsize=10)
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=110)
    return buf.getvalue()


__all__ = ["reliability_diagram"]
