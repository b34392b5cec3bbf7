"""Chunks read directly: a sample's decompression outside the GIL, in reader threads.

netCDF-C reads through HDF5, which is not thread-safe: xarray serialises every read of a
netCDF-4 file on one lock, so reader threads take turns and a cold epoch at 361 × 720 is one
core's zlib. zarr decompresses in threads, but drives every read of a process from one event
loop, which keeps the cores of a loader's threads half idle. :class:`DirectChunks` reads the same
chunks itself, with the file's own library only to find them:

- **netCDF-4** (:class:`~ensml.data.direct_netcdf.NetcdfChunks`): when the file is opened,
  h5py lists where each chunk of a variable is stored (HDF5's chunk index: offset, size, filters
  skipped); a read takes a chunk's bytes with ``os.pread`` and undoes its filters, deflate by
  ISA-L (``isal``, faster than zlib) and HDF5's byte shuffle by numpy, with no HDF5 call (h5py
  is not safe to call from several threads at once);
- **zarr v3** (:class:`~ensml.data.direct_zarr.ZarrChunks`): the array's metadata through
  zarr's own API; a read takes a chunk's file (or, in a sharded array, the shard's index and
  then the inner chunk's bytes) and decompresses it with numcodecs' zstd.

Both release the GIL while they decompress, so reader threads decompress side by side, with no
reader process to start and no arrays to send.

A variable is read this way only where that gives the very values xarray gives
(:class:`DirectChunks` decides, variable by variable, once the file's format has chosen the
class; the others are read through xarray as before):

- one netCDF-4 file or zarr v3 store on a local disk, opened without renames, whose variable
  has ensml's name and dims, floating-point values stored in chunks, no filter but shuffle and
  deflate (netCDF-4) or no codec but bytes, zstd and sharding (zarr), no
  ``scale_factor``/``add_offset``;
- every label the sample reads (init time, lead, member, level, latitude, longitude) found
  among the file's coordinates, which gives its position in the file;
- one field read both ways when the file is opened, bitwise equal (a unit conversion on
  open, such as precipitation in metres, shows there).

A chunk never written (the fill value) or holding the fill value makes that read go through
xarray, which then gives ensml's usual error.
"""

from __future__ import annotations

import itertools
import os
from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import xarray as xr

from ensml.names import LONGITUDE

Position = int | slice | np.ndarray


def index_slice(index: Sequence[int]) -> slice | np.ndarray:
    """Evenly spaced positions as a slice, in either direction (a file reads slices faster than
    index arrays, and basic indexing copies no index); other positions as they are."""
    pos = np.asarray(index)
    step = int(pos[1] - pos[0]) if pos.size > 1 else 1
    if step and np.array_equal(pos, pos[0] + step * np.arange(pos.size)):
        stop = int(pos[-1]) + step
        return slice(int(pos[0]), stop if stop >= 0 else None, step)
    return pos


def by_chunk(pos: np.ndarray, size: int) -> list[tuple[int, slice | np.ndarray, slice | np.ndarray]]:
    """File positions along one dim grouped by chunk: ``(chunk origin, where in the output, where
    in the chunk)`` for each chunk they touch, in the order they first appear."""
    ids = pos // size
    groups = []
    for cid in dict.fromkeys(ids.tolist()):
        where = np.flatnonzero(ids == cid)
        groups.append((cid * size, index_slice(where), index_slice(pos[where] - cid * size)))
    return groups


class DirectChunks(ABC):
    """The variables of one file that read directly (see the module), from ``ds``'s positions:
    thread-safe, opened in the process that reads (never pickled). A format's class finds and
    decodes the chunks (:meth:`_layout`, :meth:`_chunk`); what is read is decided here."""

    def __init__(self, path: Path, ds: xr.Dataset, variables: Sequence[str]) -> None:
        self.path = Path(path)
        self._file_pos: dict[str, np.ndarray] = {}  # ds position -> file position, per dim
        self._fill: dict[str, np.ndarray] = {}  # the values xarray masks (NaN aside)
        self._dims: dict[str, tuple[str, ...]] = {}
        self._shape: dict[str, tuple[int, ...]] = {}  # of a chunk
        self._dtype: dict[str, np.dtype] = {}
        with self._open_raw() as raw:
            self.variables = tuple(v for v in variables if self._readable(raw, ds, v))
        self.variables = tuple(v for v in self.variables if self._same_field(ds, v))

    @classmethod
    def of(cls, path: Path, ds: xr.Dataset, variables: Sequence[str]) -> DirectChunks | None:
        """The direct reads of ``ds``'s ``variables`` in the file at ``path``, or None when none
        reads directly (the caller knows the file is of this class's format)."""
        if not hasattr(os, "pread"):  # POSIX only
            return None
        try:
            chunks = cls(path, ds, variables)
        except Exception:  # a file these reads do not understand is read through xarray
            return None
        if not chunks.variables:
            chunks.close()
            return None
        return chunks

    # -- the format's part ----------------------------------------------------------------------
    @abstractmethod
    def _open_raw(self) -> Any:
        """A context manager giving the file as xarray opens it, undecoded values."""

    @abstractmethod
    def _layout(self, raw: xr.Dataset, var: str) -> bool:
        """Whether ``var`` is stored in a way read here (then its chunk shape and dtype are set)."""

    @abstractmethod
    def _chunk(self, var: str, origin: tuple[int, ...]) -> np.ndarray | None:
        """The chunk at ``origin`` (its first element's position), decoded; None if never written."""

    @abstractmethod
    def close(self) -> None:
        """Close what the reads hold open."""

    # -- what reads directly -------------------------------------------------------------------
    def _readable(self, raw: xr.Dataset, ds: xr.Dataset, var: str) -> bool:
        """Whether ``var`` reads directly, with every label of ``ds`` in the file."""
        if var not in raw.variables or var not in ds.variables:
            return False
        rv = raw.variables[var]
        if (
            rv.dtype.kind != "f"
            or rv.dims != ds.variables[var].dims  # the file's order is the one read
            or {"scale_factor", "add_offset"} & set(rv.attrs)
            or not self._layout(raw, var)
        ):
            return False
        for dim in rv.dims:
            if dim in self._file_pos:
                continue
            pos = self._positions(raw, ds, dim)
            if pos is None:
                return False
            self._file_pos[dim] = pos
        marks = [rv.attrs.get(k, rv.encoding.get(k)) for k in ("_FillValue", "missing_value")]
        fills = np.concatenate([np.asarray(m, np.float64).ravel() for m in marks if m is not None] or [[]])
        self._fill[var] = fills[~np.isnan(fills)]
        self._dims[var] = tuple(str(d) for d in rv.dims)
        return True

    @staticmethod
    def _positions(raw: xr.Dataset, ds: xr.Dataset, dim: str) -> np.ndarray | None:
        """The file position of each of ``ds``'s positions along ``dim``, found by label."""
        if dim in ds.indexes and dim in raw.indexes:
            labels = raw.indexes[dim]
            # ensml's longitudes are in [0, 360), as normalise makes them; a file's may start at -180
            if dim == LONGITUDE and labels.dtype.kind == "f":
                labels = pd.Index(labels.values % 360.0)
            pos = labels.get_indexer(ds.indexes[dim]) if labels.is_unique else np.array([-1])
            return pos if (pos >= 0).all() else None
        if dim not in ds.indexes and dim not in raw.indexes and ds.sizes[dim] == raw.sizes[dim]:
            return np.arange(raw.sizes[dim])  # no labels on either side: the same positions
        return None

    def _same_field(self, ds: xr.Dataset, var: str) -> bool:
        """Whether one field (position 0 of every dim but the last two) reads the same both ways."""
        dims = ds.variables[var].dims
        at = {d: 0 for d in dims[:-2]}
        try:
            mine = self.read(var, at, dims[-2:])
            theirs = ds.variables[var].isel(at).values
        except Exception:  # whatever fails here is read through xarray instead
            return False
        return (
            mine is not None
            and mine.shape == theirs.shape
            and mine.dtype == theirs.dtype
            and np.array_equal(
                np.ascontiguousarray(mine).view(np.uint8), np.ascontiguousarray(theirs).view(np.uint8)
            )
        )

    # -- reads -----------------------------------------------------------------------------------
    def read(self, var: str, at: Mapping[str, Position], dims: Sequence[str]) -> np.ndarray | None:
        """``ds.variables[var].isel(at).transpose(*dims).values``, read directly; None where it
        must be read through xarray (a chunk not written, or the fill value in the data)."""
        file_dims = self._dims[var]
        pos, dropped = [], []
        for i, dim in enumerate(file_dims):
            p = at.get(dim, slice(None))
            if isinstance(p, int | np.integer):
                dropped.append(i)
                p = [int(p)]
            pos.append(np.atleast_1d(self._file_pos[dim][p]))
        out = self._hyperslab(var, pos)
        if out is None:
            return None
        if self._fill[var].size and np.isin(out, self._fill[var]).any():  # xarray's NaN says so
            return None
        out = out.squeeze(axis=tuple(dropped)) if dropped else out
        kept = [d for i, d in enumerate(file_dims) if i not in dropped]
        return out.transpose([kept.index(d) for d in dims])

    def _hyperslab(self, var: str, pos: list[np.ndarray]) -> np.ndarray | None:
        """The file's values at the outer product of ``pos`` (file positions, one array per dim)."""
        out = np.empty([p.size for p in pos], self._dtype[var])
        for parts in itertools.product(*(by_chunk(p, c) for p, c in zip(pos, self._shape[var]))):
            chunk = self._chunk(var, tuple(origin for origin, _, _ in parts))
            if chunk is None:
                return None
            into, take = tuple(part[1] for part in parts), tuple(part[2] for part in parts)
            if sum(isinstance(i, np.ndarray) for i in into) > 1:  # numpy pairs several index arrays
                into = _outer(into, out.shape)
            if sum(isinstance(i, np.ndarray) for i in take) > 1:
                take = _outer(take, chunk.shape)
            out[into] = chunk[take]
        return out


def _outer(index: tuple[slice | np.ndarray, ...], shape: tuple[int, ...]) -> tuple[np.ndarray, ...]:
    """Slices and arrays as ``np.ix_`` arrays (numpy pairs several index arrays elementwise)."""
    return np.ix_(*(np.arange(n)[i] if isinstance(i, slice) else i for i, n in zip(index, shape)))


__all__ = ["DirectChunks", "Position", "by_chunk", "index_slice"]
