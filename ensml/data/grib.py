"""Read GRIB files with cfgrib, read-only, into ensml's vocabulary.

cfgrib writes an ``.idx`` index next to a GRIB file unless told not to; shared data are
read-only, so ensml always opens GRIB with ``indexpath=""`` (no index file). The dataset then
goes through :func:`ensml.data.io.normalise` (``number`` → ``member``, ``isobaricInhPa`` →
``level``, ``step`` → ``lead_time``, latitude north → south, longitude in [0, 360)).
"""

from __future__ import annotations

from pathlib import Path

import xarray as xr

from ensml.data.io import normalise
from ensml.errors import EnsmlError


def open_grib(
    path: str | Path,
    what: str = "GRIB",
    filter_by_keys: dict | None = None,
    variables: list[str] | None = None,
) -> xr.Dataset:
    """Open one GRIB file lazily (cfgrib, no index file) and normalise its names.

    Parameters
    ----------
    path
        The GRIB file (edition 1 or 2).
    what
        What the file is, for error messages (``"forecast"``, ``"analysis"`` …).
    filter_by_keys
        cfgrib's ``filter_by_keys`` (e.g. ``{"dataType": "pf"}``) for files that hold more than
        one hypercube.
    variables
        Variables that must be present (an :class:`EnsmlError` names the missing ones).
    """
    path = Path(path)
    if not path.is_file():
        raise EnsmlError(f"{what} file {path} does not exist")
    kwargs: dict = {"indexpath": ""}
    if filter_by_keys:
        kwargs["filter_by_keys"] = dict(filter_by_keys)
    try:
        ds = xr.open_dataset(path, engine="cfgrib", backend_kwargs=kwargs)
    except Exception as exc:  # cfgrib raises DatasetBuildError, EOFError, eccodes errors ...
        reason = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        hint = " (pass filter_by_keys to pick one hypercube)" if "multiple values" in reason else ""
        raise EnsmlError(f"{what} file {path} cannot be read as GRIB ({reason}){hint}") from None
    ds = normalise(ds)
    missing = [v for v in variables or [] if v not in ds.data_vars]
    if missing:
        found = ", ".join(map(str, ds.data_vars)) or "none"
        raise EnsmlError(f"{what} file {path} has no variable(s) {', '.join(missing)} (found: {found})")
    return ds


__all__ = ["open_grib"]
