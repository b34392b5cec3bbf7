"""What a path holds, recognised by content (signatures), not by its name.

netCDF classic files start with ``CDF\\x01|\\x02|\\x05``; netCDF-4 files are HDF5, whose
signature lies at byte 0 (or 512, 1024, 2048, … when a user block precedes it); a GRIB message
starts with ``GRIB`` and its edition (1 or 2) at byte 7, possibly after a bulletin header; a
zarr store is a folder with zarr metadata (``.zgroup``/``.zattrs``/``.zarray`` for v2,
``zarr.json`` for v3); an anemoi dataset is a zarr store with anemoi's arrays and attributes
(:func:`ensml.data.layouts.anemoi.is_anemoi`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from ensml.data.layouts.anemoi import is_anemoi

Format = Literal["netcdf3", "hdf5", "grib", "zarr", "anemoi"]

NETCDF3_SIGNATURES = (b"CDF\x01", b"CDF\x02", b"CDF\x05")
HDF5_SIGNATURE = b"\x89HDF\r\n\x1a\n"
HDF5_OFFSETS = (0, 512, 1024, 2048, 4096)
GRIB_SEARCH_BYTES = 1024  # a WMO bulletin header may precede the first message
ZARR_METADATA = (".zgroup", ".zattrs", ".zarray", ".zmetadata", "zarr.json")


def detect_format(path: str | Path) -> Format | None:
    """The format of ``path`` by content, or None when no signature matches."""
    path = Path(path)
    if path.is_dir():
        if not any((path / name).is_file() for name in ZARR_METADATA):
            return None
        return "anemoi" if is_anemoi(path) else "zarr"
    with path.open("rb") as f:
        head = f.read(max(HDF5_OFFSETS) + len(HDF5_SIGNATURE))
    if head[:4] in NETCDF3_SIGNATURES:
        return "netcdf3"
    if any(head[o : o + len(HDF5_SIGNATURE)] == HDF5_SIGNATURE for o in HDF5_OFFSETS):
        return "hdf5"
    at = head.find(b"GRIB", 0, GRIB_SEARCH_BYTES)
    if at >= 0 and head[at + 7 : at + 8] in (b"\x01", b"\x02"):
        return "grib"
    return None


def unknown_format(path: str | Path) -> str:
    """Why ``path`` is not a file ensml reads, for an error message (no trailing period)."""
    path = Path(path)
    if path.is_dir():
        return "is a folder but not a zarr store (no .zgroup, .zarray or zarr.json in it)"
    size = path.stat().st_size
    if size == 0:
        return "is empty (0 bytes)"
    with path.open("rb") as f:
        head = f.read(8)
    return (
        f"is not a netCDF, HDF5, GRIB or zarr file (it starts with {head!r}; "
        f"{size} bytes, recognised by content, not by name)"
    )


__all__ = ["Format", "detect_format", "unknown_format"]
