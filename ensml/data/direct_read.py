"""netCDF-4 chunks read directly: a sample's decompression outside the GIL, in threads.

netCDF-C reads through HDF5, which is not thread-safe: xarray serialises every read of a
netCDF-4 file on one lock, so reader threads take turns and a cold epoch at 361 × 720 is one
core's zlib. :class:`DirectChunks` reads the same chunks without netCDF-C: when the file is
opened, h5py lists where each chunk of a variable is stored (HDF5's chunk index: offset, size,
filters skipped); a read then takes a chunk's bytes with ``os.pread`` and undoes its filters
here, deflate by ISA-L (``isal``, faster than zlib) and HDF5's byte shuffle by numpy, all with
the GIL released and no HDF5 call (h5py is not safe to call from several threads at once).
Reader threads then decompress at once, with no reader process to start and no arrays to send.

A variable is read this way only where that gives the very values xarray gives
(:meth:`DirectChunks.of` decides, variable by variable; the others are read through xarray as
before):

- one HDF5 (netCDF-4) file, opened without renames, whose variable has ensml's name and dims,
  floating-point values stored in chunks, no filter but shuffle and deflate, no
  ``scale_factor``/``add_offset``;
- every label the sample reads (init time, lead, member, level, latitude, longitude) found
  among the file's coordinates, which gives its position in the file;
- one field read both ways when the file is opened, bitwise equal (a unit conversion on
  open, such as precipitation in metres, shows there).

A chunk never written (the file's fill value) or holding the fill value makes that read go
through xarray, which then gives ensml's usual error.
"""

from __future__ import annotations

import itertools
import os
import weakref
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import xarray as xr

try:  # ISA-L's inflate: about twice zlib's speed, same output
    from isal.isal_zlib import decompress as inflate
except ImportError:  # pragma: no cover - a declared dependency; zlib gives the same bytes
    from zlib import decompress as inflate

#: HDF5's filter ids: the only filters a chunk may have to be read here.
SHUFFLE, DEFLATE = 2, 1
Position = int | slice | np.ndarray
#: Where a chunk is stored: (byte offset in the file, bytes, filters skipped as a bit mask).
Stored = tuple[int, int, int]


def unshuffle(data: bytes, itemsize: int) -> np.ndarray:
    """HDF5's shuffle undone: byte ``i`` of every element is stored in the ``i``-th block."""
    src = np.frombuffer(data, np.uint8)
    out = np.empty_like(src)
    n = src.size // itemsize
    body = out[: n * itemsize].reshape(n, itemsize)
    for i in range(itemsize):  # a strided copy per byte: no Python loop over elements
        body[:, i] = src[i * n : (i + 1) * n]
    out[n * itemsize :] = src[n * itemsize :]  # HDF5 leaves a partial element's bytes as they are
    return out


def as_slice(pos: np.ndarray) -> slice | np.ndarray:
    """Positions with a constant step as a slice (basic indexing, no copy of an index), else them."""
    if pos.size == 1:
        return slice(int(pos[0]), int(pos[0]) + 1)
    step = int(pos[1] - pos[0])
    if step and np.array_equal(np.diff(pos), np.full(pos.size - 1, step)):
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
        groups.append((cid * size, as_slice(where), as_slice(pos[where] - cid * size)))
    return groups


class DirectChunks:
    """The variables of one netCDF-4 file that read directly (see the module), from ``ds``'s
    positions: thread-safe, opened in the process that reads (never pickled)."""

    def __init__(self, path: Path, ds: xr.Dataset, variables: Sequence[str]) -> None:
        import h5py  # only where files are read this way

        self.path = path
        self._file_pos: dict[str, np.ndarray] = {}  # ds position -> file position, per dim
        self._filters: dict[str, list[int]] = {}
        self._fill: dict[str, float | None] = {}
        self._dims: dict[str, tuple[str, ...]] = {}
        self._shape: dict[str, tuple[int, ...]] = {}  # of a chunk
        self._dtype: dict[str, np.dtype] = {}
        self._stored: dict[str, dict[tuple[int, ...], Stored]] = {}
        with (
            h5py.File(path, "r") as h5,
            xr.open_dataset(path, mask_and_scale=False, decode_timedelta=True) as raw,
        ):
            base = h5.userblock_size  # HDF5's addresses start after the user block
            self.variables = tuple(v for v in variables if self._readable(h5, raw, ds, v, base))
        self._fd = os.open(path, os.O_RDONLY)
        self._close = weakref.finalize(self, os.close, self._fd)  # closed when this is forgotten
        self.variables = tuple(v for v in self.variables if self._same_field(ds, v))

    @classmethod
    def of(
        cls, files: Sequence[Path], formats: Sequence[str | None], renamed: bool, ds: xr.Dataset, variables
    ) -> DirectChunks | None:
        """The direct reads of ``ds``'s ``variables``, or None when none reads directly: ``files``
        must be one HDF5 file (``formats``: what it is) opened without renames."""
        if len(files) != 1 or formats[0] != "hdf5" or renamed:
            return None
        try:
            chunks = cls(files[0], ds, variables)
        except (ImportError, OSError, ValueError, KeyError):  # not an HDF5 file h5py reads
            return None
        if not chunks.variables:
            chunks.close()
            return None
        return chunks

    # -- what reads directly -------------------------------------------------------------------
    def _readable(self, h5: Any, raw: xr.Dataset, ds: xr.Dataset, var: str, base: int) -> bool:
        """Whether ``var`` is stored in a way read here, with every label of ``ds`` in the file
        (then its chunks are listed)."""
        if var not in raw.variables or var not in h5 or var not in ds.variables:
            return False
        dset, rv = h5[var], raw.variables[var]
        if (
            dset.chunks is None
            or dset.dtype.kind != "f"
            or set(rv.dims) != set(ds.variables[var].dims)
            or rv.dims != ds.variables[var].dims  # the file's order is the one read
            or {"scale_factor", "add_offset"} & set(rv.attrs)
        ):
            return False
        plist = dset.id.get_create_plist()
        filters = [plist.get_filter(i)[0] for i in range(plist.get_nfilters())]
        if not set(filters) <= {SHUFFLE, DEFLATE}:
            return False
        for dim in rv.dims:
            if dim in self._file_pos:
                continue
            pos = self._positions(raw, ds, dim)
            if pos is None:
                return False
            self._file_pos[dim] = pos
        fill = rv.attrs.get("_FillValue", rv.attrs.get("missing_value"))
        self._filters[var] = filters
        self._dims[var] = tuple(str(d) for d in rv.dims)
        self._shape[var], self._dtype[var] = tuple(dset.chunks), dset.dtype
        self._stored[var] = stored = {}

        def visit(info: Any) -> None:
            stored[tuple(info.chunk_offset)] = (base + info.byte_offset, info.size, info.filter_mask)

        dset.id.chunk_iter(visit)
        self._fill[var] = None if fill is None or np.isnan(fill) else float(np.asarray(fill).ravel()[0])
        return True

    @staticmethod
    def _positions(raw: xr.Dataset, ds: xr.Dataset, dim: str) -> np.ndarray | None:
        """The file position of each of ``ds``'s positions along ``dim``, found by label."""
        if dim in ds.indexes and dim in raw.indexes:
            pos = raw.indexes[dim].get_indexer(ds.indexes[dim])
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
        fill = self._fill[var]
        if fill is not None and (out == fill).any():
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

    def _chunk(self, var: str, origin: tuple[int, ...]) -> np.ndarray | None:
        """One chunk, its filters undone (None if it was never written)."""
        stored = self._stored[var].get(origin)
        if stored is None:  # never written: the fill value
            return None
        offset, size, skipped = stored
        data: bytes | np.ndarray = os.pread(self._fd, size, offset)
        if len(data) != size:  # the file was cut short since it was opened
            return None
        dtype, shape = self._dtype[var], self._shape[var]
        for i in reversed(range(len(self._filters[var]))):
            if skipped & (1 << i):  # the writer skipped this filter for this chunk
                continue
            if self._filters[var][i] == DEFLATE:
                data = inflate(data)
            else:
                data = unshuffle(data, dtype.itemsize)
        arr = np.frombuffer(data, dtype)
        return arr.reshape(shape) if arr.size == int(np.prod(shape)) else None

    def close(self) -> None:
        self._close()


def _outer(index: tuple[slice | np.ndarray, ...], shape: tuple[int, ...]) -> tuple[np.ndarray, ...]:
    """Slices and arrays as ``np.ix_`` arrays (numpy pairs several index arrays elementwise)."""
    return np.ix_(*(np.arange(n)[i] if isinstance(i, slice) else i for i, n in zip(index, shape)))


__all__ = ["DirectChunks", "as_slice", "by_chunk", "unshuffle"]
