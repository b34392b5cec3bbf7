"""Exact cell-area latitude weights (as WeatherBench2)."""

from __future__ import annotations

from typing import Any

import numpy as np
import xarray as xr

from ensml.errors import EnsmlError
from ensml.names import LATITUDE

__all__ = ["latitude_weights"]


def latitude_weights(latitude: Any, *, dim: str = LATITUDE) -> xr.DataArray:
    r"""Area weights of latitude cells, normalised to mean 1.

    A cell reaches half-way to its neighbours (the outer cells as far again as half their
    inner spacing), clipped to ±90°; its area on the sphere is proportional to

    .. math:: w_j = \sin\varphi_j^{\mathrm{upper}} - \sin\varphi_j^{\mathrm{lower}},

    then ``w / mean(w)``. On a regular grid with pole points (90 → −90) the pole cells are
    half-width caps, as in WeatherBench2 (Rasp et al. 2024, ``get_lat_weights``). Both
    latitude orders give the same weight per latitude.

    Parameters
    ----------
    latitude
        Latitudes in degrees north: a 1-D array or DataArray, or a Dataset/DataArray
        that has a ``dim`` coordinate. Strictly monotonic, within [−90, 90].
    dim
        Name of the latitude dimension.

    Returns
    -------
    xr.DataArray
        Weights (dimensionless, mean 1) along ``dim``, with the latitude coordinate.
    """
    if isinstance(latitude, (xr.DataArray, xr.Dataset)) and dim in latitude.coords:
        lat = np.asarray(latitude[dim].values, dtype=np.float64)
    elif isinstance(latitude, xr.Dataset):
        raise EnsmlError(f"latitude_weights: dataset has no '{dim}' coordinate")
    else:
        lat = np.asarray(latitude, dtype=np.float64)
    if lat.ndim != 1 or lat.size == 0:
        raise EnsmlError(f"latitude_weights: latitude must be a non-empty 1-D array, got shape {lat.shape}")
    if not np.all(np.isfinite(lat)) or np.any(np.abs(lat) > 90):
        raise EnsmlError("latitude_weights: latitudes must be finite and within [-90, 90] degrees")
    if lat.size == 1:
        w = np.ones(1)
    else:
        step = np.diff(lat)
        if not (np.all(step > 0) or np.all(step < 0)):
            raise EnsmlError("latitude_weights: latitudes must be strictly increasing or decreasing")
        asc = lat if step[0] > 0 else lat[::-1]
        mid = 0.5 * (asc[1:] + asc[:-1])
        edges = np.concatenate(
            [[asc[0] - 0.5 * (asc[1] - asc[0])], mid, [asc[-1] + 0.5 * (asc[-1] - asc[-2])]]
        )
        edges = np.deg2rad(np.clip(edges, -90.0, 90.0))
        w = np.sin(edges[1:]) - np.sin(edges[:-1])
        if step[0] < 0:
            w = w[::-1]
        w = w / w.mean()
    return xr.DataArray(w, dims=[dim], coords={dim: lat}, name="latitude_weight", attrs={"units": "1"})
