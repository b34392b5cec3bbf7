"""Write CF netCDF4 files safely: to a temporary name, renamed only when complete.

Every file ensml writes goes through :func:`write_netcdf`, so that a crash or an interrupt
never leaves a half-written file that looks finished, and every output carries the same
provenance attributes (``Conventions``, ``source``, ``history``).
"""

from __future__ import annotations

import os
import re
import shutil
import uuid
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
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


TMP_SUFFIX = ".tmp"


def temporary_name(path: Path) -> Path:
    """The hidden temporary sibling ``.<name>.<random>.tmp`` that ``path`` is written to first."""
    return path.with_name(f".{path.name}.{uuid.uuid4().hex[:12]}{TMP_SUFFIX}")


_TEMPORARY = re.compile(r"^\..+\.[0-9a-f]{12}" + re.escape(TMP_SUFFIX) + "$")


def remove_temporaries(folder: str | os.PathLike[str]) -> list[Path]:
    """Remove what interrupted writes left under ``folder`` (the names of :func:`temporary_name`).

    Call it only while no other writer uses the folder (e.g. under its lock). Returns the paths
    removed.
    """
    found = [p for p in Path(folder).rglob(".*" + TMP_SUFFIX) if _TEMPORARY.match(p.name)]
    for p in sorted(found, key=lambda p: len(p.parts), reverse=True):
        if p.is_dir():
            shutil.rmtree(p, ignore_errors=True)
        else:
            p.unlink(missing_ok=True)
    return found


@contextmanager
def atomic_path(path: str | os.PathLike[str]) -> Iterator[Path]:
    """Yield a temporary path beside ``path``; on success rename it to ``path`` (atomic on POSIX).

    On any failure, including ``KeyboardInterrupt``, the temporary (a file or a folder, such as a
    zarr store) is removed and ``path`` is left as it was. An existing ``path`` is replaced.
    """
    path = Path(path)
    tmp = temporary_name(path)
    try:
        yield tmp
        if tmp.is_dir() and path.is_dir():
            # os.replace cannot replace a non-empty folder: move the old one aside first.
            old = temporary_name(path)
            os.replace(path, old)
            os.replace(tmp, path)
            shutil.rmtree(old, ignore_errors=True)
        else:
            os.replace(tmp, path)
    finally:
        # Gone after a successful replace; removed after any failure.
        if tmp.is_dir():
            shutil.rmtree(tmp, ignore_errors=True)
        else:
            tmp.unlink(missing_ok=True)


def global_attrs(attrs: Mapping[str, Any], history: str | None = None) -> dict[str, Any]:
    """``attrs`` with the CF globals every ensml output carries.

    ``Conventions = "CF-1.8"``, ``source`` (kept if given, else ``"ensml <version>"``) and a
    ``history`` line ``"<UTC ISO time> ensml <version>: <history>"`` put in front of any
    existing history (newest first, as NCO does). Booleans and None become text (netCDF
    attributes cannot hold them).
    """
    out = dict(attrs)
    stamp = datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    line = f"{stamp} ensml {__version__}: {history or 'written'}"
    out["history"] = f"{line}\n{out['history']}" if out.get("history") else line
    out["Conventions"] = CONVENTIONS
    out.setdefault("source", f"ensml {__version__}")
    return {k: (str(v) if isinstance(v, bool | type(None)) else v) for k, v in out.items()}


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
        The dataset. It is not modified; the globals of :func:`global_attrs` are added to a
        shallow copy.
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
    out.attrs = global_attrs(ds.attrs, history)

    try:
        with atomic_path(path) as tmp:
            out.to_netcdf(tmp, engine="netcdf4", format="NETCDF4", encoding=enc)
    except OSError as err:
        raise EnsmlError(f"cannot write {path}: {err}") from err
    return path
