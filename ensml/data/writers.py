"""Write CF netCDF4 files safely: to a temporary name, renamed only when complete.

Every file ensml writes goes through :func:`write_netcdf`, so that a crash or an interrupt
never leaves a half-written file that looks finished, and every output carries the same
provenance attributes (``Conventions``, ``source``, ``history``).
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Mapping
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import xarray as xr

from ensml import __version__
from ensml.errors import EnsmlError

CONVENTIONS = "CF-1.8"
# Lossless compression for data variables unless the caller says otherwise. Level 1 is
# several times faster than the usual 4 and within a few percent of its size on model fields.
DEFAULT_COMPRESSION: dict[str, Any] = {"zlib": True, "complevel": 1, "shuffle": True}


def _default_encoding(ds: xr.Dataset, encoding: Mapping[str, Mapping[str, Any]]) -> dict[str, dict]:
    """Per-variable encoding: compression for numeric data variables, no fill value on coordinates."""
    out: dict[str, dict] = {}
    for name, var in ds.variables.items():
        enc: dict[str, Any] = {}
        if name in ds.data_vars and var.dtype.kind in "iufb" and var.ndim > 0:
            enc.update(DEFAULT_COMPRESSION)
        if name in ds.coords and var.dtype.kind == "f" and "_FillValue" not in var.encoding:
            enc["_FillValue"] = None  # CF: coordinate variables must not have missing values
        enc.update(encoding.get(str(name), {}))
        if enc:
            out[str(name)] = enc
    unknown = sorted(set(encoding) - {str(n) for n in ds.variables})
    if unknown:
        raise EnsmlError(f"netCDF encoding names variables not in the dataset: {', '.join(unknown)}")
    return out


def write_netcdf(
    ds: xr.Dataset,
    path: str | os.PathLike[str],
    encoding: Mapping[str, Mapping[str, Any]] | None = None,
    *,
    history: str | None = None,
) -> Path:
    """Write ``ds`` as CF netCDF4 to ``path`` atomically.

    The data go to a hidden temporary file in the same directory, which is renamed to
    ``path`` only after a complete write (``os.replace``, atomic on POSIX); on any failure,
    including ``KeyboardInterrupt``, the temporary file is removed and ``path`` is left as it
    was. An existing ``path`` is replaced.

    Parameters
    ----------
    ds
        The dataset. It is not modified; global attributes are added to a shallow copy:
        ``Conventions = "CF-1.8"``, ``source`` (kept if ``ds`` has one, else ``"ensml <version>"``)
        and a ``history`` line ``"<UTC ISO time> ensml <version>: <history>"`` put in front of
        any existing history (newest first, as NCO does).
    path
        Output file. Its directory must exist.
    encoding
        Per-variable netCDF encoding, as for :meth:`xarray.Dataset.to_netcdf`; merged over the
        defaults: zlib level 1 with shuffle for numeric data variables, and no ``_FillValue`` on
        floating-point coordinates.
    history
        What produced the file (for example the command line); default ``"written"``.

    Returns
    -------
    Path
        The path written.

    Raises
    ------
    EnsmlError
        When the directory does not exist or the file cannot be written (permissions, disk
        full), or when ``encoding`` names variables that ``ds`` lacks.
    """
    path = Path(path)
    if not path.parent.is_dir():
        raise EnsmlError(f"cannot write {path}: directory {path.parent} does not exist")
    if path.is_dir():
        raise EnsmlError(f"cannot write {path}: it is a directory")
    enc = _default_encoding(ds, encoding or {})

    out = ds.copy(deep=False)
    attrs = dict(ds.attrs)
    stamp = datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    line = f"{stamp} ensml {__version__}: {history or 'written'}"
    attrs["history"] = f"{line}\n{attrs['history']}" if attrs.get("history") else line
    attrs["Conventions"] = CONVENTIONS
    attrs.setdefault("source", f"ensml {__version__}")
    # netCDF attributes cannot hold booleans or None; store them as text.
    out.attrs = {k: (str(v) if isinstance(v, bool | type(None)) else v) for k, v in attrs.items()}

    tmp = path.with_name(f".{path.name}.{uuid.uuid4().hex[:12]}.tmp")
    try:
        out.to_netcdf(tmp, engine="netcdf4", format="NETCDF4", encoding=enc)
        os.replace(tmp, path)
    except OSError as err:
        raise EnsmlError(f"cannot write {path}: {err}") from err
    finally:
        # Gone after a successful replace; removed after any failure.
        tmp.unlink(missing_ok=True)
    return path
