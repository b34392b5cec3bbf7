"""The benchmark's map: where the best network loses to local EMOS (``crps_difference.png``).

One panel per variable (rows) and level (columns): the mean over the test split's init times of
the per-point CRPS difference, best network − local EMOS, at the last target lead, on a
diverging scale centred on 0 (red: the network scores worse there), in the units forecasters
read (:func:`ensml.verify.maps.display_units`). Hatched: points where the difference is
significant (:func:`ensml.scores.significance.pointwise_mean_test`, kept under a false discovery
rate of 10 % per panel by :func:`~ensml.scores.significance.false_discovery`). The best network
is the mixed model with the highest mean skill over local EMOS at that lead (the summary's
``mean_skill_vs_local_emos``: the lowest CRPS relative to local EMOS, averaged over variables
and levels, so that no variable's units dominate). Drawn by the one map helper,
:func:`ensml.verify.maps.draw_maps` (offline coastlines).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pandas as pd
import xarray as xr

from ensml.names import INIT_TIME, LATITUDE, LONGITUDE
from ensml.scores.significance import false_discovery, pointwise_mean_test
from ensml.verify.levels import at, field_name, levels_of
from ensml.verify.maps import Panel, display_units, draw_maps

#: The map's file in the benchmark's folder.
MAP_NAME = "crps_difference.png"
#: The false discovery rate of the hatching (Wilks 2016: about a 5 % field significance).
FDR = 0.1


def best_network(summary: pd.DataFrame, networks: Sequence[str]) -> str | None:
    """The network (its table name) with the highest ``mean_skill_vs_local_emos``; None when the
    summary has no such column or none of ``networks`` has a finite value in it."""
    if "mean_skill_vs_local_emos" not in summary:
        return None
    rows = summary[summary["model"].isin(networks)].dropna(subset=["mean_skill_vs_local_emos"])
    if rows.empty:
        return None
    return str(rows.loc[rows["mean_skill_vs_local_emos"].idxmax(), "model"])


def crps_difference_map(
    fields: dict[str, dict[str, xr.DataArray]],
    best: str,
    reference: str,
    levels: Sequence[float],
    lead_h: int,
    coastlines: bool = True,
) -> bytes:
    """PNG bytes of the map (see the module docstring) from the per-point CRPS
    ``fields[variable][name]`` (init_time, [level,] latitude, longitude) of ``best`` and
    ``reference``; ``coastlines`` False for the physics testbed's world without land."""
    panels = []
    for var, by_name in fields.items():
        diff = by_name[best] - by_name[reference]
        scale, _, units, label = display_units(var, "difference")
        row = []
        for lev in levels_of(diff, levels):
            d = at(diff, lev).transpose(INIT_TIME, LATITUDE, LONGITUDE) * scale
            mean = d.mean(INIT_TIME)
            significant = false_discovery(pointwise_mean_test(d.values), FDR)
            top = float(np.nanmax(np.abs(mean.values))) or 1.0
            row.append(
                Panel(
                    mean,
                    title=field_name(var, lev),
                    label=f"CRPS difference, {label}",
                    units=units,
                    cmap="RdBu_r",
                    vmin=-top,
                    vmax=top,
                    hatch=mean.copy(data=significant),
                    coastlines=coastlines,
                )
            )
        panels.append(row)
    title = (
        f"Mean CRPS of {best} minus {reference} at {lead_h} h\n"
        f"red: the network is worse; hatched: significant (false discovery rate {FDR:.0%})"
    )
    return draw_maps(panels, title)


__all__ = ["FDR", "MAP_NAME", "best_network", "crps_difference_map"]
