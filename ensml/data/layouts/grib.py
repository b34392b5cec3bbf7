"""Read GRIB ensembles with cfgrib into ensml's vocabulary.

cfgrib names members ``number``, initialisation ``time``, lead ``step`` and levels
``isobaricInhPa``; :func:`ensml.data.normalise.normalise` renames them. A file with a single step (an
analysis ensemble such as the ERA5 EDA, or one forecast step) carries ``step`` as a scalar: it is
made a length-1 ``lead_time`` dimension so that such files open as forecasts with one lead time,
``time`` becoming ``init_time``; a single-time file's scalar ``time`` likewise becomes a length-1
``init_time`` (and ``valid_time`` is derived as for every forecast). Index files are never
written (``indexpath=""``), so read-only data stays untouched.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Sequence
from pathlib import Path

import xarray as xr

from ensml.data.layouts.grib_merge import merge_hypercubes, prepared, without_control
from ensml.data.layouts.options import ReaderOptions
from ensml.data.normalise import normalise
from ensml.errors import EnsmlError, exception_reason
from ensml.logs import collected
from ensml.names import FORECAST_DIMS

#: Keys whose several values in one file ensml merges: control/perturbed members, level types.
MERGEABLE = {"dataType", "typeOfLevel"}


def read_grib(
    path: str | Path,
    chunks: dict | str | None = None,
    filter_by_keys: dict | None = None,
    *,
    drop_control: bool = False,
) -> xr.Dataset:
    """Open one GRIB file with cfgrib, cfgrib's names kept, ``step`` made a dimension.

    A file that holds several hypercubes (which ``xr.open_dataset`` refuses) is opened per
    hypercube (``cfgrib.open_datasets``) and merged, as operational files need:

    - control and perturbed members (``dataType`` cf/pf) become one ``number`` dimension, the
      control first (ECMWF numbers it 0); ``drop_control`` leaves the perturbed members only;
    - pressure-level and single-level variables (``typeOfLevel`` surface, heightAboveGround,
      meanSea, …) side by side: the single-level ones keep no level dimension (surface
      variables, :mod:`ensml.data.surface`).

    ``filter_by_keys`` (e.g. ``{"dataType": "pf"}``, ``{"shortName": "t"}``) selects messages
    first, in either case.

    Raises
    ------
    EnsmlError
        If the file is missing, cfgrib cannot read it, the hypercubes do not merge, a member
        number appears twice (a duplicated control), or the filter selects nothing.
    """
    path = Path(path)
    if not path.is_file():
        raise EnsmlError(f"GRIB file {path} does not exist")
    kwargs = {"indexpath": ""}
    if filter_by_keys:
        kwargs["filter_by_keys"] = dict(filter_by_keys)
    # cfgrib logs (with a traceback) and skips what it cannot place: a damaged message, a
    # variable whose coordinates clash with the others'. Both become ensml's own report.
    with collected("cfgrib", _reported) as records:
        try:
            ds = xr.open_dataset(path, engine="cfgrib", backend_kwargs=kwargs, chunks=chunks, cache=False)
            if drop_control:
                ds = without_control([ds], path)[0]
        except Exception as exc:  # cfgrib raises DatasetBuildError, ValueError, eccodes errors ...
            if isinstance(exc, EnsmlError):
                raise
            split_by = set(re.findall(r"filter_by_keys=\{'(\w+)'", str(exc)))
            if not str(exc).startswith("multiple values for unique key") or not split_by <= MERGEABLE:
                raise EnsmlError(f"GRIB file {path} cannot be read ({_one_line(exc)})") from None
            ds = merge_hypercubes(path, kwargs, chunks, drop_control, hint=_one_line(exc))
    if not ds.data_vars:
        raise EnsmlError(f"GRIB file {path} has no messages matching filter_by_keys={filter_by_keys}")
    damaged = [r for r in records if r.getMessage().startswith("skipping corrupted")]
    if damaged:
        reason = exception_reason(damaged[0].exc_info[1]) if damaged[0].exc_info else "unreadable"
        raise EnsmlError(
            f"GRIB file {path} is damaged: {len(damaged)} message(s) cannot be read ({reason}); "
            "it may be truncated or overwritten, nothing of it is used"
        )
    for name, why in _skipped_variables(records).items():
        ds.attrs[SKIPPED_PREFIX + name] = why
    # A single step, time or pressure level: a length-1 dimension; single-level markers
    # (surface, heightAboveGround …) dropped: such variables are surface variables.
    ds = prepared(ds, expand=("step", "time", "isobaricInhPa"))
    cfgrib_order = ("time", "step", "number", "isobaricInhPa", "latitude", "longitude")
    return ds.transpose(*[d for d in cfgrib_order if d in ds.dims], ...)


def _reported(record: logging.LogRecord) -> bool:
    """cfgrib's records that ensml reports itself: skipped messages and variables."""
    return record.getMessage().startswith(("skipping corrupted", "skipping variable"))


def _skipped_variables(records: list[logging.LogRecord]) -> dict[str, str]:
    """``{shortName: why}`` of the variables cfgrib left out because their coordinates clash."""
    skipped = {}
    for record in records:
        if record.getMessage().startswith("skipping variable") and len(record.args or ()) == 2:
            exc = record.exc_info[1] if record.exc_info else None
            key = re.search(r"key='(\w+)'", str(exc)) if exc is not None else None
            why = f"its {key.group(1)!r} coordinate differs from the other variables'" if key else "clash"
            skipped[str(record.args[1])] = why
    return skipped


#: ``attrs[SKIPPED_PREFIX + name]``: why cfgrib left variable ``name`` out of the dataset.
SKIPPED_PREFIX = "ensml_skipped_"


def check_not_skipped(ds: xr.Dataset, var: str, path: str | Path) -> None:
    """Raise if cfgrib left ``var`` out of ``ds`` (its coordinates clash with the others')."""
    why = ds.attrs.get(SKIPPED_PREFIX + var)
    if why is not None:
        raise EnsmlError(
            f"GRIB file {path}: variable {var!r} cannot be read beside the others ({why}); "
            "read it from a file of its own or with "
            f"ensml.data.layouts.grib.read_grib(path, filter_by_keys={{'shortName': {var!r}}})"
        )


def _one_line(exc: Exception) -> str:
    """cfgrib's message on one line, whole (its hypercube hint lists the filters to use)."""
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    if lines and lines[0].startswith("multiple values for unique key") and len(lines) > 1:
        options = ", ".join(line.removeprefix("filter_by_keys=") for line in lines[1:])
        return (
            "it holds several hypercubes; split it (e.g. grib_copy -w dataType=pf) or read one with "
            f"ensml.data.layouts.grib.read_grib(path, filter_by_keys=...), e.g. {options}"
        )
    return "; ".join(lines) or exception_reason(exc)


def open_grib(
    path: str | Path, variables: Sequence[str] | None = None, chunks: dict | str | None = None
) -> xr.Dataset:
    """Open a GRIB ensemble normalised to ensml's names, dims in forecast order where present."""
    ds = normalise(read_grib(path, chunks))
    if variables:
        missing = [v for v in variables if v not in ds.data_vars]
        if missing:
            check_not_skipped(ds, missing[0], path)
            found = ", ".join(map(str, ds.data_vars))
            raise EnsmlError(f"GRIB file {path} has no variable {missing[0]!r} (found: {found})")
        ds = ds[list(variables)]
    order = [d for d in FORECAST_DIMS if d in ds.dims]
    return ds.transpose(*order, ...)


def read(path: Path, what: str, chunks: dict | str | None, options: ReaderOptions) -> xr.Dataset:
    """A GRIB file through cfgrib (:func:`read_grib`), never writing index files next to the data."""
    return read_grib(path, chunks, options.filter_by_keys, drop_control=options.drop_control)


__all__ = ["check_not_skipped", "open_grib", "read", "read_grib"]
