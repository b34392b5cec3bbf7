"""One forecast on a map beside the truth, with the spread that EMOS calibrates (the physics
testbed's figure, drawn by its notebook and for the README).

The K-member subset at one lead is calibrated by EMOS (:func:`ensml.train.emos.fit_emos`, local
when at least :data:`LOCAL_MIN_INITS` training inits exist, else global) fitted on every init
but the one shown, then the last init is drawn in four panels: the truth (the verifying
analysis), the calibrated mean with the truth's contours, the calibrated mean's absolute error
and the calibrated spread σ on the error's scale, so that where the forecast is uncertain can be
compared with where it went wrong. Data are read and aligned by the one frame builder.
"""

from __future__ import annotations

import numpy as np
import torch
import xarray as xr

from ensml.data.frame import build_frame
from ensml.data.subset import Subset
from ensml.data.weights import latitude_weights
from ensml.errors import EnsmlError
from ensml.names import DEFAULT_K, INIT_TIME, LATITUDE, LEVEL, LONGITUDE, MEMBER
from ensml.times import format_lead, parse_lead
from ensml.train.emos import fit_emos
from ensml.verify.maps import Panel, display_units, draw_maps

#: Fewer training inits than this give a global EMOS (a per-point fit needs a sample per point).
LOCAL_MIN_INITS = 30


def forecast_map(
    forecast: str,
    analysis: str,
    *,
    variable: str = "z",
    level: float = 500,
    lead: int | str = 48,
    k: int = DEFAULT_K,
    coastlines: bool = True,
) -> bytes:
    """PNG bytes of the figure (see the module docstring) for the last init of ``forecast``;
    ``coastlines`` False for a world without land (the physics testbed).

    Raises
    ------
    EnsmlError
        Fewer than 3 init times, or ``k`` above the ensemble size.
    """
    lead_ns = parse_lead(lead)
    frame = build_frame(forecast, analysis, variables=[variable], levels=[level], leads=[lead_ns], note=False)
    at = frame.at(lead_ns)
    ens = at.forecast[variable].sel({LEVEL: level}).transpose(INIT_TIME, MEMBER, LATITUDE, LONGITUDE)
    obs = at.analysis[variable].sel({LEVEL: level}).transpose(INIT_TIME, LATITUDE, LONGITUDE)
    if ens.sizes[INIT_TIME] < 3 or not 2 <= k <= ens.sizes[MEMBER]:
        raise EnsmlError(
            f"forecast_map needs at least 3 init times and 2 <= k <= {ens.sizes[MEMBER]} members, "
            f"got {ens.sizes[INIT_TIME]} inits and k={k}"
        )
    sub = Subset.first(k).take(ens)

    def tensor(a: xr.DataArray) -> torch.Tensor:  # (N, H, W) -> (N, V=1, D=1, H, W)
        return torch.as_tensor(a.values, dtype=torch.float32)[:, None, None]

    mean, std, y = tensor(sub.mean(MEMBER)), tensor(sub.std(MEMBER, ddof=1)), tensor(obs)
    mode = "local" if len(y) - 1 >= LOCAL_MIN_INITS else "global"
    weights = torch.as_tensor(latitude_weights(obs).values, dtype=torch.float32)  # the one area weighting
    emos = fit_emos(mean[:-1], std[:-1], y[:-1], mode=mode, weights=weights)
    with torch.no_grad():
        mu, sigma = (t[-1, 0, 0].numpy() for t in emos(mean[-1:], std[-1:]))
    truth = obs.isel({INIT_TIME: -1})
    return _draw(
        truth, truth.copy(data=mu), truth.copy(data=sigma), variable, level, lead_ns, k, mode, coastlines
    )


def _draw(
    truth, mu, sigma, variable: str, level: float, lead_ns, k: int, mode: str, coastlines: bool
) -> bytes:
    scale, offset, units, label = display_units(variable, "field")
    d_scale, _, d_units, d_label = display_units(variable, "difference")
    field = (truth * scale + offset, mu * scale + offset)
    lo, hi = (float(min(f.min() for f in field)), float(max(f.max() for f in field)))
    error, spread = abs(mu - truth) * d_scale, sigma * d_scale
    top = float(max(error.max(), spread.max()))
    name = f"{label} {level:g} hPa"
    panels = [
        [
            Panel(field[0], f"truth: {name}", label, units, "viridis", lo, hi),
            Panel(
                field[1],
                f"EMOS mean of {k} members (contours: truth)",
                label,
                units,
                "viridis",
                lo,
                hi,
                contour=field[0],
            ),
        ],
        [
            Panel(error, "|EMOS mean − truth|", d_label, d_units, "magma_r", 0.0, top),
            Panel(spread, f"calibrated spread σ ({mode} EMOS)", d_label, d_units, "magma_r", 0.0, top),
        ],
    ]
    for panel in (p for row in panels for p in row):
        panel.coastlines = coastlines
    init = np.datetime_as_string(truth[INIT_TIME].values, unit="h")
    return draw_maps(panels, f"Forecast from {init} at {format_lead(lead_ns)} against the truth")


__all__ = ["forecast_map"]
