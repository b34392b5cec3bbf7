"""Small anemoi datasets made by ``anemoi-datasets create`` itself, offline, from the real GRIB
sample ``cfgrib/era5-levels-members.grib`` (ERA5's ensemble of data assimilations: 10 members,
4 dates 12 h apart, t and z on 850 and 500 hPa, a 3° global grid).

* :func:`regular`: a recipe with a ``grib`` source: the grid stays regular (61 × 120 cells);
  the same with a date declared missing.
* :func:`cells`: a reduced latitude/longitude grid (no pole rows; every 4th longitude poleward of
  60°, every 2nd poleward of 30°, all of them nearer the equator: 4260 cells), written as a
  netCDF of cells with a ``cell_area`` field (the exact area of each cell: its latitude band times
  its longitude width, the outer rows reaching the poles) and read by a recipe with a ``netcdf``
  source, as anemoi reads unstructured grids.

Used by ``tests/data/test_anemoi.py`` (in the anemoi environment: ``make env-anemoi``).
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import xarray as xr
import yaml

GRIB = "cfgrib/era5-levels-members.grib"
SMOKE = Path(__file__).resolve().parents[2] / "configs" / "smoke.yaml"
DATES = {"start": "2017-01-01T00:00:00", "end": "2017-01-02T12:00:00", "frequency": "12h"}
#: Every how many longitudes a row of the reduced grid keeps, by |latitude| (degrees).
STRIDES = ((60.0, 4), (30.0, 2), (-1.0, 1))


def create(recipe: dict, out: Path) -> Path:
    """``anemoi-datasets create`` of ``recipe`` into ``out`` (a subprocess of this Python)."""
    out = out.resolve()
    path = out.with_suffix(".yaml")
    path.write_text(yaml.safe_dump(recipe))
    cmd = [str(Path(sys.executable).parent / "anemoi-datasets"), "create", str(path), str(out)]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=300, cwd=out.parent)
    if done.returncode:
        raise RuntimeError(f"anemoi-datasets create failed: {done.stderr[-3000:]}")
    return out


def regular(real: Path, folder: Path, missing: list[str] | None = None) -> Path:
    """The GRIB sample as an anemoi dataset, by a recipe with a ``grib`` source (with the dates
    ``missing`` declared missing: anemoi loads nothing for them)."""
    source = {"grib": {"path": str(real / GRIB), "param": ["t", "z"], "levelist": [850, 500]}}
    dates = {**DATES, "missing": missing} if missing else DATES
    return create(
        {"dates": dates, "input": source}, folder / ("missing.zarr" if missing else "era5-eda.zarr")
    )


def reduced_cells(latitude: np.ndarray, longitude: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(row index, column index, exact area in steradians) of each cell of the reduced grid."""
    rows, cols, areas = [], [], []
    inner = latitude[np.abs(latitude) < 90]
    for i, lat in enumerate(latitude):
        if abs(lat) == 90:
            continue
        stride = next(s for bound, s in STRIDES if abs(lat) > bound)
        upper = 90.0 if lat == inner.max() else lat + 1.5
        lower = -90.0 if lat == inner.min() else lat - 1.5
        band = np.sin(np.deg2rad(upper)) - np.sin(np.deg2rad(lower))
        for j in range(0, longitude.size, stride):
            rows.append(i)
            cols.append(j)
            areas.append(band * np.deg2rad(3.0 * stride))
    return np.asarray(rows), np.asarray(cols), np.asarray(areas)


def cells(real: Path, folder: Path) -> tuple[Path, Path]:
    """(anemoi dataset, the netCDF of cells it was made from) on the reduced grid."""
    grib = xr.open_dataset(real / GRIB, engine="cfgrib", backend_kwargs={"indexpath": ""})
    rows, cols, areas = reduced_cells(grib.latitude.values, grib.longitude.values)
    out = xr.Dataset(
        coords={
            "time": grib.time.values,
            "number": grib.number.values,
            "level": ("level", grib.isobaricInhPa.values, {"standard_name": "air_pressure", "units": "hPa"}),
            "latitude": ("values", grib.latitude.values[rows]),
            "longitude": ("values", grib.longitude.values[cols]),
        }
    )
    for name in ("t", "z"):  # cfgrib: (number, time, isobaricInhPa, latitude, longitude)
        field = grib[name].values[..., rows, cols]
        out[name] = (("number", "time", "level", "values"), field, {"units": grib[name].attrs["units"]})
    shape = (out.sizes["number"], out.sizes["time"], rows.size)
    out["cell_area"] = (("number", "time", "values"), np.broadcast_to(areas, shape).astype(np.float32))
    out = out.transpose("time", "number", "level", "values")
    source = folder / "cells.nc"
    out.to_netcdf(source)
    recipe = {"dates": DATES, "input": {"netcdf": {"path": str(source)}}}
    return create(recipe, folder / "cells.zarr"), source
