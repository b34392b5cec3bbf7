"""Static inputs: where a grid point is, and fields of the surface that do not change.

A convolutional network is translation-equivariant: without being told where it is, it cannot
learn a bias that depends on latitude or on what lies under a point, which per-point EMOS learns
by construction. Two kinds of static channels tell it:

- **location**: ``sin`` and ``cos`` of latitude and of longitude (4 channels; the longitude pair
  is continuous across the date line);
- **user fields** (orography, land-sea mask, …) read from one netCDF/GRIB/zarr file on the
  forecast's grid, each standardised over the grid (mean 0, std 1).

The channels are ``(S, H, W)`` float32 arrays; the tasks repeat them along the level axis and,
for temporal networks, at every lead, and keep them in the checkpoint beside the normalisation
statistics, so ``ensml postprocess`` needs no static file.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np

from ensml.data.open import open_dataset
from ensml.errors import EnsmlError, exception_reason
from ensml.names import LATITUDE, LONGITUDE

#: Number of location channels (sin/cos of latitude and longitude).
N_LOCATION = 4


def location_channels(latitude: np.ndarray, longitude: np.ndarray) -> np.ndarray:
    """``(4, H, W)`` float32: sin(lat), cos(lat), sin(lon), cos(lon) on the grid (degrees in)."""
    lat = np.deg2rad(np.asarray(latitude, dtype=np.float64))[:, None]
    lon = np.deg2rad(np.asarray(longitude, dtype=np.float64))[None, :]
    shape = (lat.size, lon.size)
    parts = [np.sin(lat), np.cos(lat), np.sin(lon), np.cos(lon)]
    return np.stack([np.broadcast_to(p, shape) for p in parts]).astype(np.float32)


def read_static(
    path: str | Path, variables: Sequence[str], latitude: np.ndarray, longitude: np.ndarray
) -> np.ndarray:
    """The static ``variables`` of ``path`` on the given grid, standardised: ``(S, H, W)`` float32.

    Dimensions of size one besides latitude/longitude (a ``time`` or ``step`` of an ERA5
    orography file) are dropped. Raises :class:`EnsmlError`, naming the file and variable, if a
    variable is missing, has other dimensions, is on another grid or holds NaN/inf.
    """
    what = f"static file {path}"
    ds = open_dataset(path, "static file")
    fields = []
    for var in variables:
        if var not in ds.data_vars:
            found = ", ".join(map(str, ds.data_vars)) or "none"
            raise EnsmlError(f"{what} has no variable {var!r} (found: {found})")
        da = ds[var].squeeze([d for d in ds[var].dims if ds.sizes[d] == 1 and d not in (LATITUDE, LONGITUDE)])
        if set(da.dims) != {LATITUDE, LONGITUDE}:
            raise EnsmlError(
                f"{what}: {var!r} has dims {tuple(map(str, da.dims))}, a static field needs "
                "(latitude, longitude) alone"
            )
        for name, want in ((LATITUDE, latitude), (LONGITUDE, longitude)):
            have = np.asarray(da[name].values, dtype=np.float64)
            want = np.asarray(want, dtype=np.float64)
            if have.shape != want.shape or not np.allclose(have, want, atol=1e-6):
                raise EnsmlError(
                    f"{what}: {var!r} is on another grid than the forecast: {name} has {have.size} "
                    f"points [{have[0]:g} … {have[-1]:g}], the forecast {want.size} "
                    f"[{want[0]:g} … {want[-1]:g}]"
                )
        try:
            values = da.transpose(LATITUDE, LONGITUDE).values.astype(np.float64)
        except Exception as exc:  # corrupt data behind readable metadata
            raise EnsmlError(f"{what} cannot be read in {var!r} ({exception_reason(exc)})") from None
        if not np.isfinite(values).all():
            raise EnsmlError(f"{what}: {var!r} has NaN or infinite values (a static field must be complete)")
        std = values.std()
        fields.append((values - values.mean()) / (std if std > 0 else 1.0))
    ds.close()
    if not fields:
        return np.zeros((0, len(latitude), len(longitude)), dtype=np.float32)
    return np.stack(fields).astype(np.float32)


__all__ = ["N_LOCATION", "location_channels", "read_static"]
