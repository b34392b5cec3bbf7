"""Normalisation statistics, computed lazily with dask on the training split only."""

from __future__ import annotations

from collections.abc import Sequence

import dask
import numpy as np
import xarray as xr

from ensml.names import INIT_TIME, LATITUDE, LEAD_TIME, LEVEL, LONGITUDE, MEMBER


def compute_stats(
    forecast: xr.Dataset,
    train_inits: np.ndarray,
    variables: Sequence[str],
    levels: Sequence[float],
    input_leads: Sequence[np.timedelta64],
    target_leads: Sequence[np.timedelta64],
    max_inits: int = 256,
) -> dict[str, np.ndarray]:
    """Per-variable statistics of the training forecasts.

    Up to ``max_inits`` training init times, evenly spaced, are used: enough for stable
    climatologies, and bounded cost on long records.

    Returns
    -------
    dict
        ``clim_mean`` (V, D, H, W): mean over inits, input leads and members at each grid point;
        ``anom_std`` (V, D): std of the departures from ``clim_mean``;
        ``spread_scale`` (V, D): mean ensemble std (ddof 0) at the last target lead (the scale of
        the spread inputs); ``target_scale`` (T, V, D): the same at each of the T target leads
        (the scale of the outputs); ``minimum`` (V,): the smallest member value (what a family
        bounded at 0 is checked against). Units are those of each variable; V = variables,
        D = levels.
    """
    step = max(1, int(np.ceil(len(train_inits) / max_inits)))
    inits = np.asarray(train_inits)[::step]
    fc = forecast[list(variables)].sel({INIT_TIME: inits, LEVEL: list(levels)})
    inputs = fc.sel({LEAD_TIME: list(input_leads)})
    clim = inputs.mean([INIT_TIME, LEAD_TIME, MEMBER])
    anom_std = (inputs - clim).std([INIT_TIME, LEAD_TIME, MEMBER, LATITUDE, LONGITUDE])
    spread = fc.sel({LEAD_TIME: list(target_leads)}).std(MEMBER).mean([INIT_TIME, LATITUDE, LONGITUDE])
    minimum = fc.min([INIT_TIME, LEAD_TIME, MEMBER, LEVEL, LATITUDE, LONGITUDE])
    clim, anom_std, spread, minimum = dask.compute(clim, anom_std, spread, minimum)
    clim, anom_std, spread = xr.align(clim, anom_std, spread, join="exact")

    def stack(ds: xr.Dataset) -> np.ndarray:
        return np.stack([ds[v].values for v in variables]).astype(np.float32)

    target = stack(spread.transpose(LEAD_TIME, ...)).swapaxes(0, 1)  # (T, V, D)
    stats = {
        "clim_mean": stack(clim),
        "anom_std": stack(anom_std),
        "spread_scale": target[-1],
        "target_scale": target,
        "minimum": np.array([float(minimum[v]) for v in variables], dtype=np.float32),
    }
    # A constant field would divide by zero downstream; fall back to unit scale.
    for key in ("anom_std", "spread_scale", "target_scale"):
        stats[key] = np.where(stats[key] > 0, stats[key], 1.0).astype(np.float32)
    return stats
