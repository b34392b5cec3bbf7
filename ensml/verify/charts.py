"""Charts of ``evaluate`` that are not maps (those go through :mod:`ensml.verify.maps`).

Rendered with the Agg canvas (no pyplot, no display) and returned as PNG bytes, which
``evaluate`` writes atomically with its tables, as :func:`ensml.verify.maps.draw_maps` does.
"""

from __future__ import annotations

import io

import numpy as np
import pandas as pd

from ensml.times import LeadLike, format_lead, parse_lead

#: Line colours by the start of a forecast's name (others: orange).
COLOURS = {
    "raw ensemble": "k",
    "raw subset": "0.55",
    "post-processed": "tab:blue",
    "generated": "tab:purple",
    "oracle": "tab:green",
}


#: Colours of the forecasts :data:`COLOURS` does not name, in the order they come.
OTHERS = ("tab:orange", "tab:red", "tab:purple", "tab:brown", "tab:pink", "tab:olive", "tab:cyan")


def _colour(name: str) -> str:
    return next((c for key, c in COLOURS.items() if name.startswith(key)), "tab:orange")


def _colours(names: list[str]) -> dict[str, str]:
    """A distinct colour per forecast: :data:`COLOURS` by the start of its name, then :data:`OTHERS`."""
    known = {name: next((c for key, c in COLOURS.items() if name.startswith(key)), None) for name in names}
    free = iter(c for c in OTHERS if c not in known.values())
    return {name: colour or next(free, "0.3") for name, colour in known.items()}


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


def rank_histogram_chart(rows: pd.DataFrame, title: str) -> bytes:
    """Rank histograms, a panel per pre-rank function, a line of relative frequencies per
    forecast (ranks scaled to [0, 1], so ensembles of any size share the axes; 1 is flat).

    ``rows``: ``rank_histograms.csv`` rows of one variable, level, lead and region (columns
    ``forecast``, ``prerank``, ``rank``, ``count``).
    """
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    methods = list(dict.fromkeys(rows["prerank"]))
    colours = _colours(list(dict.fromkeys(rows["forecast"])))
    fig = Figure(figsize=(4.2 * max(len(methods), 1), 3.6))
    FigureCanvasAgg(fig)
    for i, method in enumerate(methods):
        ax = fig.add_subplot(1, len(methods), i + 1)
        ax.axhline(1.0, color="tab:red", ls="--", lw=1, label="flat")
        for name, g in rows[rows["prerank"] == method].groupby("forecast", sort=False):
            counts = g["count"].to_numpy(dtype=float)
            if counts.sum() == 0:
                continue
            position = (g["rank"].to_numpy() + 0.5) / counts.size
            ax.step(position, counts / counts.mean(), where="mid", color=colours[name], label=name)
        ax.set_title(method.replace("_", " "), fontsize=9)
        ax.set_xlabel("rank of the truth among the members (scaled)")
        if i == 0:
            ax.set_ylabel("frequency / flat")
            ax.legend(fontsize=7)
        ax.grid(alpha=0.3)
    fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=110)
    return buf.getvalue()


def station_skill_map(
    rows: pd.DataFrame, forecast: str, reference: str, title: str, coast: bool = True
) -> bytes:
    """The CRPS skill of ``forecast`` over ``reference`` at each station, a map per lead.

    ``rows``: per-station rows of one variable and level (``stations.csv``: ``station``,
    ``latitude``, ``longitude``, ``lead_h``, ``forecast``, ``crps``). Each station is a dot
    coloured by ``1 - crps / crps_reference`` (blue: better than the reference, red: worse; the
    colour scale symmetric about 0 and capped at the 95th percentile of |skill|), over the
    shipped coastlines (``coast``) on a plate carrée map of the stations' extent.
    """
    import cartopy.crs as ccrs
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    from ensml.verify.maps import coastlines

    keys = ["station", "lead_h"]
    own = rows[rows["forecast"] == forecast].set_index(keys)
    ref = rows[rows["forecast"] == reference].set_index(keys)["crps"]
    table = own.assign(skill=1.0 - own["crps"] / ref.reindex(own.index)).reset_index()
    leads = sorted(table["lead_h"].unique())
    finite = np.abs(table["skill"].to_numpy(dtype=float))
    finite = finite[np.isfinite(finite)]
    limit = float(np.percentile(finite, 95)) if finite.size else 1.0
    limit = limit if limit > 0 else 1.0
    lon = ((table["longitude"].to_numpy(dtype=float) + 180.0) % 360.0) - 180.0
    lat = table["latitude"].to_numpy(dtype=float)
    pad = 5.0
    extent = [
        max(lon.min() - pad, -180),
        min(lon.max() + pad, 180),
        max(lat.min() - pad, -90),
        min(lat.max() + pad, 90),
    ]
    fig = Figure(figsize=(5.2 * len(leads), 3.6))
    FigureCanvasAgg(fig)
    proj = ccrs.PlateCarree()
    for i, lead in enumerate(leads):
        ax = fig.add_subplot(1, len(leads), i + 1, projection=proj)
        ax.set_extent(extent, crs=proj)
        if coast:
            ax.add_geometries([coastlines()], crs=proj, facecolor="none", edgecolor="0.4", linewidth=0.6)
        one = table[table["lead_h"] == lead]
        dots = ax.scatter(
            ((one["longitude"].to_numpy(dtype=float) + 180.0) % 360.0) - 180.0,
            one["latitude"].to_numpy(dtype=float),
            c=one["skill"].to_numpy(dtype=float),
            cmap="RdBu",
            vmin=-limit,
            vmax=limit,
            s=14,
            edgecolors="0.2",
            linewidths=0.3,
            transform=proj,
        )
        better = float(np.mean(one["skill"] > 0)) if len(one) else float("nan")
        ax.set_title(f"+{lead:g} h: better at {better:.0%} of {len(one)} stations", fontsize=9)
        bar = fig.colorbar(dots, ax=ax, orientation="horizontal", fraction=0.05, pad=0.06)
        bar.set_label(f"CRPS skill over {reference}", fontsize=8)
        bar.ax.tick_params(labelsize=7)
    fig.suptitle(title, fontsize=10)
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=110)
    return buf.getvalue()


def station_plume(products, observations, station: str, var: str, lead: LeadLike, title: str = "") -> bytes:
    """One station's forecast plume at one ``lead`` against what it observed: the predictive median,
    the central 50 % and 90 % intervals (the products' quantiles nearest 0.05, 0.25, 0.75 and
    0.95) by valid time, and the observations as dots.

    ``products``: a station products dataset of ``ensml postprocess`` (``<var>_quantile``);
    ``observations``: the stations' observations (:func:`ensml.data.stations.read_observations`).
    """
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    lead = parse_lead(lead)
    q = products[f"{var}_quantile"].sel(station=station).sel(lead_time=lead)
    levels = q["quantile"].values
    valid = products["init_time"].values + lead

    def at(level: float) -> np.ndarray:
        return q.isel(quantile=int(np.argmin(np.abs(levels - level)))).values

    obs = observations[var].sel(station=station).reindex(time=valid).values
    fig = Figure(figsize=(8.0, 3.4))
    FigureCanvasAgg(fig)
    ax = fig.add_subplot(1, 1, 1)
    ax.fill_between(valid, at(0.05), at(0.95), color="tab:blue", alpha=0.18, lw=0, label="90 % interval")
    ax.fill_between(valid, at(0.25), at(0.75), color="tab:blue", alpha=0.35, lw=0, label="50 % interval")
    ax.plot(valid, at(0.5), color="tab:blue", lw=1.2, label="median")
    ax.plot(valid, obs, "o", color="k", ms=2.5, label="observed")
    units = products[f"{var}_quantile"].attrs.get("units", "")
    ax.set_ylabel(f"{var} ({units})" if units else var)
    ax.set_title(title or f"{var} at {station}, +{format_lead(lead)}", fontsize=10)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7, ncol=4, loc="upper left")
    fig.autofmt_xdate()
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=110)
    return buf.getvalue()


__all__ = ["reliability_diagram", "station_plume", "station_skill_map"]
