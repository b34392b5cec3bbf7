"""Open forecast ensembles and analyses lazily, in ensml's vocabulary, and check them.

The one entry point for reading: :func:`open_forecast`, :func:`open_analysis`, :func:`open_dataset`
and :func:`load_dataset`. Each file is read by the reader of its format
(:func:`ensml.data.layouts.read_file`), several files are combined by their layout (by
coordinates, members in separate files, or files split by date), and the result is normalised
(:func:`ensml.data.normalise.normalise`) and checked: grid, dims, and time coordinates.

:func:`open_inputs` is the one way every verb opens what it reads: a forecast and its analysis,
checked against what the verb asks (variables, levels, leads, members, grid) and with the init
times the analysis verifies (:meth:`Inputs.verified`). Training (the data module), evaluation (the
frame), the station frame and post-processing (each unit's forecast file) all start there.
"""

from __future__ import annotations

import errno
import glob
import os
import stat
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import xarray as xr

from ensml.data.grid import check_grid, check_same_grid, horizontal_dims
from ensml.data.layouts import read_file
from ensml.data.layouts.ens10 import combine_files
from ensml.data.layouts.formats import detect_format, unknown_format
from ensml.data.layouts.grib import check_not_skipped
from ensml.data.layouts.members import has_member_field, member_files, stack_members
from ensml.data.layouts.options import ReaderOptions, as_reader
from ensml.data.normalise import normalised, one_run_as_ensemble
from ensml.data.surface import check_same_surface
from ensml.errors import EnsmlError, exception_reason
from ensml.names import ANALYSIS_DIMS, FORECAST_DIMS, INIT_TIME, LEAD_TIME, LEVEL, MEMBER, SPATIAL_DIMS, TIME
from ensml.times import LeadLike, format_leads, parse_leads

PathLike = str | Path


def expand_paths(paths: PathLike | Sequence[PathLike], what: str) -> list[Path]:
    """The files named by ``paths`` (paths or globs), each checked to be a file or a zarr store.

    A path names that file when it exists, even if its name holds glob characters (``fc[1].nc``);
    otherwise a name with ``*``, ``?`` or ``[`` is a glob (``**`` spans folders), in sorted order.

    Raises
    ------
    EnsmlError
        No file matches, or a path is not a file ensml can read, saying what it is: missing, a
        broken link or a link loop, a FIFO, a device or a socket, a folder that is no zarr store.
    """
    items = [paths] if isinstance(paths, str | Path) else list(paths)
    out: list[Path] = []
    for item in items:
        pattern = str(item)
        if any(c in pattern for c in "*?[") and not os.path.lexists(pattern):
            out.extend(Path(p) for p in sorted(glob.glob(pattern, recursive=True)))
        else:
            out.append(Path(item))
    if not out:
        raise EnsmlError(f"no {what} files match {paths!r}")
    for p in out:
        reason = _not_readable(p)
        if reason:
            raise EnsmlError(f"{what} file {p} {reason}")
    return out


def _not_readable(path: Path) -> str | None:
    """Why ``path`` is not a file or zarr store (None if it is one), without opening it: opening
    a FIFO would wait for a writer, and a device would read forever."""
    try:
        mode = path.stat().st_mode
    except OSError as err:
        if err.errno == errno.ELOOP:
            return "is a symbolic-link loop (a link that leads back to itself)"
        if err.errno == errno.ENOENT and os.path.islink(path):
            return f"is a broken symbolic link (to {os.readlink(path)}, which does not exist)"
        if err.errno == errno.ENOENT:
            return "does not exist"
        return f"cannot be read ({err.strerror})"
    if stat.S_ISREG(mode):
        return None
    if stat.S_ISDIR(mode):
        if detect_format(path) in ("zarr", "anemoi"):
            return None
        return f"{unknown_format(path)}; give files or a glob such as {path}/*.nc"
    if stat.S_ISFIFO(mode):
        return "is a FIFO (named pipe), not a file"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "is a device, not a file"
    if stat.S_ISSOCK(mode):
        return "is a socket, not a file"
    return "is not a regular file"


def _open(
    paths: list[Path], what: str, chunks: dict | str | None, reader: ReaderOptions | None = None
) -> xr.Dataset:
    if len(paths) == 1:
        return read_file(paths[0], what, chunks, reader)
    fast_error = None
    if reader is None and not any(detect_format(p) in ("grib", "anemoi") for p in paths):
        try:
            return xr.open_mfdataset(paths, combine="by_coords", chunks=chunks or {}, parallel=False)
        except Exception as exc:  # any failure of the fast path: the slow one below says which file
            fast_error = exc
    # File by file, naming the culprit (the first unreadable one raises); then by coordinates,
    # or by init date for files split by date in any order (ensml.data.layouts.ens10).
    try:
        parts = [normalised(read_file(p, what, chunks, reader), p, what) for p in paths]
        return combine_files(parts, paths, what)
    except EnsmlError as exc:
        if fast_error is None:
            raise
        raise exc from fast_error  # open_mfdataset's own error, kept behind the one line


def _open_sources(
    paths: PathLike | Sequence[PathLike], what: str, chunks: dict | str | None, reader: ReaderOptions | None
) -> tuple[xr.Dataset, Path | PathLike | Sequence[PathLike]]:
    """The dataset of ``paths`` (members in separate files when a path holds ``{member}``)."""
    if not has_member_field(paths):
        files = expand_paths(paths, what)
        return _open(files, what, chunks, reader), files[0] if len(files) == 1 else paths
    if not isinstance(paths, str | Path):
        raise EnsmlError(f"{what}: a path with {{member}} must be given alone, got {list(paths)}")
    by_member = member_files(str(paths), lambda pattern: expand_paths(pattern, what))
    parts = {
        n: normalised(_open(files, what, chunks, reader), files[0], what) for n, files in by_member.items()
    }
    return stack_members(parts, by_member, what), paths


def _check_vars(
    ds: xr.Dataset, variables: Sequence[str] | None, dims: Sequence[str], path: str, what: str
) -> None:
    found = sorted(str(v) for v in ds.data_vars)
    horizontal = horizontal_dims(ds)
    if horizontal is not None and horizontal != SPATIAL_DIMS:  # a projected grid: its own dims
        dims = [d for d in dims if d not in SPATIAL_DIMS] + list(horizontal)
    for var in variables or []:
        if var not in ds.data_vars:
            check_not_skipped(ds, var, path)
            raise EnsmlError(
                f"{what} file {path} has no variable {var!r} (found: {', '.join(found) or 'none'})"
            )
        # A surface (single-level) variable has every dim but level (see ensml.data.surface).
        want = [d for d in dims if d != LEVEL] if LEVEL not in ds[var].dims else dims
        missing = [d for d in want if d not in ds[var].dims]
        extra = [str(d) for d in ds[var].dims if d not in want]
        if missing or extra:
            wrong = f"missing {', '.join(missing)}" if missing else f"unexpected {', '.join(extra)}"
            raise EnsmlError(
                f"{what} file {path}: variable {var!r} has dims {ds[var].dims}, {wrong} "
                f"(expected {', '.join(dims)})"
            )


def _check_kind(ds: xr.Dataset, path: str, what: str) -> None:
    """Raise if a forecast is an analysis (no lead time) or an analysis a forecast (init and
    lead times): the file given in the other's place."""
    dims = ", ".join(map(str, ds.dims)) or "none"
    if what == "forecast" and LEAD_TIME not in ds.dims:
        if TIME in ds.dims and INIT_TIME not in ds.dims:
            raise EnsmlError(
                f"forecast file {path} is an analysis (dims {dims}: no {LEAD_TIME} or {MEMBER} "
                f"dimension); give a forecast ensemble here ({', '.join(FORECAST_DIMS)})"
            )
        raise EnsmlError(f"forecast file {path} has no {LEAD_TIME} dimension (dims {dims}): not a forecast")
    if what == "analysis" and (LEAD_TIME in ds.dims or INIT_TIME in ds.dims):
        raise EnsmlError(
            f"analysis file {path} is a forecast (dims {dims}); give the verifying analysis here "
            f"({', '.join(ANALYSIS_DIMS)})"
        )


def _check_index(ds: xr.Dataset, dims: Sequence[str], path: str, what: str) -> None:
    """Raise naming the first repeated or out-of-order value of a time coordinate.

    A repeated init time (a date written twice) is ambiguous; times out of order are refused too,
    as ensml's splits, leads and outputs assume increasing time; a file with no init time (or no
    analysis time) has nothing any verb could use.
    """
    for dim in dims:
        index = ds.indexes.get(dim)
        if index is None:
            continue
        if dim in (INIT_TIME, TIME) and len(index) == 0:
            raise EnsmlError(f"{what} file {path} holds no {dim} (the dimension is empty): nothing to read")
        if not index.is_unique:
            repeated = index[index.duplicated()]
            first = str(repeated[0])
            raise EnsmlError(
                f"{what} file {path} has {len(repeated)} repeated {dim} value(s), e.g. {first} "
                f"(each {dim} must appear once)"
            )
        if dim in (INIT_TIME, TIME, LEAD_TIME) and not index.is_monotonic_increasing:
            i = int(np.flatnonzero(index[1:] < index[:-1])[0])
            raise EnsmlError(
                f"{what} file {path}: {dim} is not in increasing order ({index[i + 1]} comes after "
                f"{index[i]}); sort the file by {dim}"
            )


def _open_checked(
    paths: PathLike | Sequence[PathLike],
    variables: Sequence[str] | None,
    chunks: dict | str | None,
    what: str,
    dims: Sequence[str],
    reader: ReaderOptions | dict | None = None,
) -> xr.Dataset:
    ds, name = _open_sources(paths, what, chunks, as_reader(reader) if reader else None)
    ds = normalised(ds, name, what)
    ds = one_run_as_ensemble(ds) if what == "forecast" else ds
    _check_kind(ds, str(name), what)
    check_grid(ds, variables or list(ds.data_vars), str(name), what)
    _check_vars(ds, variables, dims, str(name), what)
    _check_index(ds, dims, str(name), what)
    return ds[list(variables)] if variables else ds


def open_forecast(
    paths: PathLike | Sequence[PathLike],
    variables: Sequence[str] | None = None,
    chunks: dict | str | None = None,
    reader: ReaderOptions | dict | None = None,
) -> xr.Dataset:
    """Open ensemble forecast file(s) lazily with dims (init_time, lead_time, member, level, lat, lon).

    ``paths``: a file, a glob or a list of them (netCDF, GRIB, zarr; files split by date in any
    order, as ENS-10's, are concatenated by init time), or a path with ``{member}`` for members
    in separate files. ``reader``: :class:`~ensml.data.layouts.options.ReaderOptions` (GRIB filters,
    control member, renames).
    """
    return _open_checked(paths, variables, chunks, "forecast", FORECAST_DIMS, reader)


def open_analysis(
    paths: PathLike | Sequence[PathLike],
    variables: Sequence[str] | None = None,
    chunks: dict | str | None = None,
    reader: ReaderOptions | dict | None = None,
) -> xr.Dataset:
    """Open verifying analysis file(s) lazily with dims (time, level, latitude, longitude)."""
    return _open_checked(paths, variables, chunks, "analysis", ANALYSIS_DIMS, reader)


def open_dataset(paths: PathLike | Sequence[PathLike], what: str) -> xr.Dataset:
    """Open any other ensml file (predictions, oracle) lazily, in ensml's vocabulary."""
    files = expand_paths(paths, what)
    return normalised(_open(files, what, None), files[0] if len(files) == 1 else paths, what)


def load_dataset(
    paths: PathLike | Sequence[PathLike], what: str, select: Callable[[xr.Dataset], xr.Dataset] | None = None
) -> xr.Dataset:
    """Read ``select(file)`` of every file into memory, one file at a time, and combine them.

    For many small files of which a part is needed in memory (e.g. ``ensml postprocess``
    outputs): each file is opened once and closed, where a lazy multi-file dataset reopens files
    for every variable once there are more than xarray's file cache holds (128).
    """
    files = expand_paths(paths, what)
    parts = []
    for path in files:
        with read_file(path, what, None) as ds:
            one = normalised(ds, path, what)
            try:
                parts.append((select(one) if select else one).load())
            except EnsmlError:
                raise
            except Exception as exc:  # corrupt data behind readable metadata (HDF5, zarr, GRIB)
                reason = exception_reason(exc)
                raise EnsmlError(f"{what} file {path} cannot be read ({reason})") from None
    if len(parts) == 1:
        return parts[0]
    try:
        return xr.combine_by_coords(parts, combine_attrs="drop_conflicts")
    except (ValueError, TypeError, KeyError) as exc:  # the parts are loaded: only xarray's own
        raise EnsmlError(f"{what} files {files[0]} … {files[-1]} do not combine ({exc})") from None


def check_levels(ds: xr.Dataset, levels: Sequence[float], name: str) -> None:
    """Raise unless every requested pressure level is in ``ds``."""
    have = [float(v) for v in np.atleast_1d(ds[LEVEL].values)] if LEVEL in ds.coords else []
    missing = [lev for lev in levels if float(lev) not in have]
    if missing:
        raise EnsmlError(f"{name} has no level(s) {missing} hPa (found: {have})")


def check_lead_times(ds: xr.Dataset, leads: LeadLike | Sequence[LeadLike], name: str) -> None:
    """Raise unless every lead time in ``leads`` (hours or durations: :func:`parse_leads`) is in ``ds``."""
    have = parse_leads(np.atleast_1d(ds[LEAD_TIME].values))
    wanted = parse_leads(leads)
    missing = wanted[~np.isin(wanted, have)]
    if missing.size:
        raise EnsmlError(f"{name} has no lead time(s) {format_leads(missing)} (found: {format_leads(have)})")


def check_members(ds: xr.Dataset, k: int, name: str) -> int:
    """Return the number of members M, raising if fewer than ``k``."""
    m = ds.sizes.get(MEMBER, 0)
    if k < 1 or k > m:
        raise EnsmlError(f"cannot take a subset of k={k} members: {name} has {m} members")
    return m


@dataclass(frozen=True)
class Inputs:
    """A forecast and its analysis, opened lazily and checked together (see :func:`open_inputs`)."""

    forecast: xr.Dataset  # the variables asked
    analysis: xr.Dataset | None  # the same variables on the forecast's grid; None when not given
    variables: list[str]
    levels: list[float]  # hPa, of the variables on levels: those asked, else every forecast level
    members: int  # M, the forecast's members
    names: tuple[str, str]  # how messages name the forecast and the analysis

    @property
    def on_levels(self) -> bool:
        """Whether a variable has a level dim (the levels apply to those only)."""
        return any(LEVEL in self.forecast[v].dims for v in self.variables)

    def verified(self, inits: np.ndarray, leads: LeadLike | Sequence[LeadLike]) -> np.ndarray:
        """Those of ``inits`` whose valid time ``init + lead`` the analysis holds at every lead of
        ``leads`` (one set of init times for every lead), in their order; all without an analysis."""
        inits = np.asarray(inits)
        if self.analysis is None:
            return inits
        have = self.analysis[TIME].values.astype("datetime64[ns]")
        keep = np.ones(inits.shape, dtype=bool)
        for lead in parse_leads(leads):
            keep &= np.isin(inits + lead, have)
        return inits[keep]


def open_inputs(
    forecast: PathLike | Sequence[PathLike],
    analysis: PathLike | Sequence[PathLike] | xr.Dataset | None = None,
    *,
    variables: Sequence[str] | None = None,
    levels: Sequence[float] | None = None,
    leads: LeadLike | Sequence[LeadLike] | None = None,
    k: int | None = None,
    names: tuple[str, str] | None = None,
    chunks: dict | str | None = None,
    reader: ReaderOptions | dict | None = None,
    analysis_reader: ReaderOptions | dict | None = None,
    check: Callable[[xr.Dataset, str], None] | None = None,
    align_levels: bool = False,
) -> Inputs:
    """Open a forecast (and its analysis) lazily and check them against what a verb asks.

    In this order: the forecast (:func:`open_forecast`; ``check`` then sees it first, e.g. a
    checkpoint's grid and surface variables), its lead times and members, the analysis on its
    grid, the levels of both (for the variables on levels) and the same surface variables in
    both. The init times the analysis verifies are then :meth:`Inputs.verified`.

    Parameters
    ----------
    forecast, analysis
        Paths or globs (:func:`open_forecast`, :func:`open_analysis`); the analysis may also be
        a dataset already opened that way (a cached one), or ``None`` for a forecast alone.
    variables
        The variables to read (default: every forecast variable).
    levels
        Pressure levels (hPa) both must hold (default: every forecast level).
    leads
        Lead times (hours or durations) the forecast must hold; ``None`` checks none here.
    k
        The member subset the forecast must hold at least; ``None`` checks none here.
    names
        How messages name the forecast and the analysis (default ``forecast <paths>``,
        ``analysis <paths>``).
    chunks, reader, analysis_reader
        As :func:`open_forecast` and :func:`open_analysis` take them.
    check
        A further check of the opened forecast, called with it and its name.
    align_levels
        Where one file holds a level of one as a dim and the other as a scalar coordinate (a GRIB
        file of one pressure level), give it as a dim in both (for readers of these datasets, not
        for those that reopen the files).

    Raises
    ------
    EnsmlError
        One line naming the file and what it lacks: a variable, level, lead time or members,
        another grid, a variable on levels in one file and at the surface in the other.
    """
    fc_name, an_name = names or (f"forecast {forecast}", f"analysis {analysis}")
    fc = open_forecast(forecast, variables, chunks, reader)
    variables = list(variables) if variables else [str(v) for v in fc.data_vars]
    if check is not None:
        check(fc, fc_name)
    if leads is not None:
        check_lead_times(fc, leads, fc_name)
    members = check_members(fc, k, fc_name) if k is not None else fc.sizes.get(MEMBER, 0)
    an, aligned = None, False
    if analysis is not None:
        an = (
            analysis
            if isinstance(analysis, xr.Dataset)
            else open_analysis(analysis, variables, chunks, analysis_reader)
        )
        # A file of one pressure level (its level a scalar) tells no surface field from a field
        # on its level: aligned, the same-surface check below cannot apply.
        scalar = (LEVEL in fc.dims) != (LEVEL in an.dims) and all(LEVEL in ds.coords for ds in (fc, an))
        aligned = align_levels and scalar
        if aligned:
            fc, an = _level_as_dim(fc, an)
        check_same_grid(fc, an, fc_name, an_name)
    all_levels = [float(x) for x in np.atleast_1d(fc[LEVEL].values)] if LEVEL in fc.coords else []
    asked = list(levels) if levels is not None else all_levels
    inputs = Inputs(fc, an, variables, [float(x) for x in asked], members, (fc_name, an_name))
    for ds, name in ((fc, fc_name), (an, an_name)) if inputs.on_levels else ():
        if ds is not None:
            check_levels(ds, asked, name)  # the levels as asked: messages show them so
    if an is not None and not aligned:
        check_same_surface(fc, an, variables, fc_name, an_name)
    return inputs


def _level_as_dim(fc: xr.Dataset, an: xr.Dataset) -> tuple[xr.Dataset, xr.Dataset]:
    """Forecast and analysis with a level of one as a dim in both where one of them has it as a
    dim and the other as a scalar coordinate (a GRIB file of one pressure level)."""
    dims = [LEVEL in ds.dims for ds in (fc, an)]
    if any(dims) and not all(dims):
        fc, an = (ds if has or LEVEL not in ds.coords else _with_level(ds) for ds, has in zip((fc, an), dims))
    return fc, an


def _with_level(ds: xr.Dataset) -> xr.Dataset:
    """``ds`` with its scalar level as a dim of length 1 of the variables that have none."""
    level = ds[LEVEL]
    out = ds.drop_vars(LEVEL)
    for name, var in ds.data_vars.items():
        out[name] = var.drop_vars(LEVEL).expand_dims({LEVEL: [level.values.item()]}, axis=-3)
    return out.assign_coords({LEVEL: out[LEVEL].assign_attrs(level.attrs)})


__all__ = [
    "Inputs",
    "check_lead_times",
    "check_levels",
    "check_members",
    "expand_paths",
    "load_dataset",
    "open_analysis",
    "open_dataset",
    "open_forecast",
    "open_inputs",
]
