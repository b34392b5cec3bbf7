"""How to read the files of one source: GRIB filters, the control member, variable renames.

Settable in the data YAML (``reader:``) and passed to every open of the files.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import xarray as xr

from ensml.errors import EnsmlError, exception_reason


@dataclass(frozen=True)
class ReaderOptions:
    """How to read the files of one source (forecast or analysis).

    Parameters
    ----------
    filter_by_keys
        GRIB only: keep the messages with these key values (cfgrib's ``filter_by_keys``), e.g.
        ``{dataType: pf}``, ``{typeOfLevel: isobaricInhPa}``, ``{shortName: t}``.
    drop_control
        GRIB only: leave out the control forecast (``dataType=cf``), keeping the perturbed
        members.
    rename
        Variable renames applied on open, ``{name in the file: name in ensml}``, e.g.
        ``{2t: t2m}`` or ``{temperature: t}``.
    anemoi
        Anemoi datasets only: options of anemoi-datasets' own ``open_dataset`` (``select``,
        ``members``, ``start``, ``end``, ``frequency``, ``area``, …), e.g. ``{select: [t_850,
        z_500], members: [0]}`` (:mod:`ensml.data.layouts.anemoi`).
    """

    filter_by_keys: dict[str, Any] = field(default_factory=dict)
    drop_control: bool = False
    rename: dict[str, str] = field(default_factory=dict)
    anemoi: dict[str, Any] = field(default_factory=dict)

    def check_format(self, kind: str, path: object, what: str) -> None:
        """Raise if an option does not apply to a file of format ``kind`` (anemoi's options to
        another file; GRIB's to an anemoi dataset are refused by its reader, which says what to use)."""
        if self.anemoi and kind != "anemoi":
            raise EnsmlError(
                f"{what} file {path}: reader.anemoi applies to anemoi datasets only, and this is a "
                f"{kind} file; leave reader.anemoi out"
            )

    def apply_rename(self, ds: xr.Dataset, path: object, what: str) -> xr.Dataset:
        """``ds`` with the renames applied; a source name missing from ``ds`` is an error."""
        if not self.rename:
            return ds
        missing = [k for k in self.rename if k not in ds.variables]
        if missing:
            found = ", ".join(map(str, ds.data_vars)) or "none"
            raise EnsmlError(
                f"{what} file {path}: reader.rename names {missing[0]!r}, which it lacks (found: {found})"
            )
        return ds.rename(self.rename)


def as_reader(options: ReaderOptions | dict | None) -> ReaderOptions:
    """``options`` as :class:`ReaderOptions` (a mapping from YAML, or None for the defaults)."""
    if options is None:
        return ReaderOptions()
    if isinstance(options, ReaderOptions):
        return options
    try:
        return ReaderOptions(**dict(options))
    except TypeError as exc:
        raise EnsmlError(
            f"reader options must be filter_by_keys, drop_control, rename, anemoi ({exception_reason(exc)})"
        ) from None


__all__ = ["ReaderOptions", "as_reader"]
