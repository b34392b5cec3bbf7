"""Chunks read directly: a sample's decompression outside the GIL, in reader threads.

netCDF-C reads through HDF5, which is not thread-safe: xarray serialises every read of a
netCDF-4 file on one lock, so reader threads take turns and a cold epoch at 361 × 720 is one
core's zlib. zarr decompresses in threads, but drives every read of a process from one event
loop, which keeps the cores of a loader's threads half idle. :class:`DirectChunks` reads the same
chunks itself, with the file's own library only to find them:

- **netCDF-4** (:class:`NetcdfChunks`): when the file is opened, h5py lists where each chunk of a
  variable is stored (HDF5's chunk index: offset, size, filters skipped); a read takes a chunk's
  bytes with ``os.pread`` and undoes its filters here, deflate by ISA-L (``isal``, faster than
  zlib) and HDF5's byte shuffle by numpy, with no HDF5 call (h5py is not safe to call from
  several threads at once);
- **zarr v3** (:class:`ZarrChunks`): the array's metadata through zarr's own API; a read takes a
  chunk's file (or, in a sharded array, the shard's index and then the inner chunk's bytes) and
  decompresses it with numcodecs' zstd.

Both release the GIL while they decompress, so reader threads decompress side by side, with no
reader process to start and no arrays to send.

A variable is read this way only where that gives the very values xarray gives
(:meth:`DirectChunks.of` decides, variable by variable; the others are read through xarray as
before):

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
import warnings
import weakref
from abc import ABC, abstractmethod
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import xarray as xr

from ensml.names import LONGITUDE

try:  # ISA-L's inflate: about twice zlib's speed, same output
    from isal.isal_zlib import decompress as inflate
except ImportError:  # pragma: no cover - a declared dependency; zlib gives the same bytes
    from zlib import decompress as inflate

#: HDF5's filter ids: the only filters a chunk may have to be read here.
SHUFFLE, DEFLATE = 2, 1
Position = int | slice | np.ndarray
#: Where each chunk of a variable is stored, on the grid of its chunks: byte offset in the file,
#: bytes (0: never written) and filters skipped (a bit mask), as three arrays of that grid's
#: shape (about 20 bytes a chunk, however many chunks a file holds).
Stored = tuple[np.ndarray, np.ndarray, np.ndarray]


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

    @staticmethod
    def of(
        files: Sequence[Path], formats: Sequence[str | None], renamed: bool, ds: xr.Dataset, variables
    ) -> DirectChunks | None:
        """The direct reads of ``ds``'s ``variables``, or None when none reads directly: ``files``
        must be one netCDF-4 file or zarr store (``formats``: what it is) opened without renames."""
        kinds: dict[str | None, type[DirectChunks]] = {"hdf5": NetcdfChunks, "zarr": ZarrChunks}
        if len(files) != 1 or formats[0] not in kinds or renamed or not hasattr(os, "pread"):
            return None  # (os.pread: POSIX only)
        try:
            chunks = kinds[formats[0]](files[0], ds, variables)
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
            if (
                dim == LONGITUDE and labels.dtype.kind == "f"
            ):  # ensml's are in [0, 360), as normalise makes them
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


class NetcdfChunks(DirectChunks):
    """A netCDF-4 file's chunks: listed by h5py when opened, read with ``os.pread``, inflated by
    ISA-L and unshuffled here (no HDF5 call while reading)."""

    def __init__(self, path: Path, ds: xr.Dataset, variables: Sequence[str]) -> None:
        self._filters: dict[str, list[int]] = {}
        self._stored: dict[str, Stored] = {}
        self._fd = os.open(path, os.O_RDONLY)
        self._close = weakref.finalize(self, os.close, self._fd)  # closed when this is forgotten
        super().__init__(path, ds, variables)

    def close(self) -> None:
        self._close()

    @contextmanager
    def _open_raw(self) -> Iterator[xr.Dataset]:
        import h5py  # only where files are read this way

        with (
            h5py.File(self.path, "r") as self._h5,
            xr.open_dataset(self.path, mask_and_scale=False, decode_timedelta=True) as raw,
        ):
            yield raw
        del self._h5  # no h5py object outlives the opening

    def _layout(self, raw: xr.Dataset, var: str) -> bool:
        if var not in self._h5:
            return False
        dset = self._h5[var]
        if dset.chunks is None:
            return False
        plist = dset.id.get_create_plist()
        filters = [plist.get_filter(i)[0] for i in range(plist.get_nfilters())]
        if not set(filters) <= {SHUFFLE, DEFLATE}:
            return False
        self._filters[var] = filters
        self._shape[var], self._dtype[var] = tuple(dset.chunks), dset.dtype
        grid = tuple(-(-n // c) for n, c in zip(dset.shape, dset.chunks))
        offsets, sizes, skipped = (
            np.zeros(grid, np.uint64),
            np.zeros(grid, np.uint64),
            np.zeros(grid, np.uint32),
        )
        base = self._h5.userblock_size  # HDF5's addresses start after the user block

        def visit(info: Any) -> None:
            at = tuple(o // c for o, c in zip(info.chunk_offset, dset.chunks))
            offsets[at], sizes[at], skipped[at] = base + info.byte_offset, info.size, info.filter_mask

        dset.id.chunk_iter(visit)
        self._stored[var] = (offsets, sizes, skipped)
        return True

    def _chunk(self, var: str, origin: tuple[int, ...]) -> np.ndarray | None:
        offsets, sizes, masks = self._stored[var]
        at = tuple(o // c for o, c in zip(origin, self._shape[var]))
        size, offset, skipped = int(sizes[at]), int(offsets[at]), int(masks[at])
        if not size:  # never written: the fill value
            return None
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


class ZarrChunks(DirectChunks):
    """A zarr v3 store's chunks on a local disk: a chunk's file (or the part of its shard the
    shard's index points to) read with ``os.pread``, decompressed by numcodecs' zstd."""

    def __init__(self, path: Path, ds: xr.Dataset, variables: Sequence[str]) -> None:
        self._codec: dict[str, Any] = {}  # the zstd codec, or None for raw bytes
        self._inner: dict[str, tuple[int, ...] | None] = {}  # a shard's chunks, if sharded
        self._outer: dict[str, tuple[int, ...]] = {}  # a file's chunk (a shard, if sharded)
        self._index_at_end: dict[str, bool] = {}
        self._checksum: dict[str, bool] = {}  # a shard's index ends with its crc32c
        self._separator: dict[str, str] = {}
        super().__init__(path, ds, variables)

    def close(self) -> None:
        """Nothing to close: a read opens its chunk's file and closes it."""

    @contextmanager
    def _open_raw(self) -> Iterator[xr.Dataset]:
        with warnings.catch_warnings():  # a store without consolidated metadata is fine
            warnings.simplefilter("ignore")
            raw = xr.open_zarr(self.path, mask_and_scale=False, decode_timedelta=True, chunks=None)
        with raw:
            yield raw

    def _layout(self, raw: xr.Dataset, var: str) -> bool:
        import zarr
        from numcodecs import Zstd

        meta = zarr.open_array(self.path / var, mode="r").metadata.to_dict()
        if meta.get("zarr_format") != 3 or meta["chunk_grid"]["name"] != "regular":
            return False
        encoding = meta["chunk_key_encoding"]
        if encoding["name"] != "default":
            return False
        codecs, inner = list(meta["codecs"]), None
        if codecs and codecs[0]["name"] == "sharding_indexed":
            if len(codecs) != 1:
                return False
            conf = codecs[0]["configuration"]
            index_codecs = [c["name"] for c in conf["index_codecs"]]
            if index_codecs not in (["bytes"], ["bytes", "crc32c"]) or not _little(conf["index_codecs"][0]):
                return False
            inner, codecs = tuple(conf["chunk_shape"]), list(conf["codecs"])
            self._index_at_end[var] = conf.get("index_location", "end") == "end"
            self._checksum[var] = index_codecs[-1] == "crc32c"
        names = [c["name"] for c in codecs]
        if names not in (["bytes"], ["bytes", "zstd"]) or not _little(codecs[0]):
            return False
        self._codec[var] = Zstd() if "zstd" in names else None
        self._inner[var] = inner
        self._separator[var] = encoding.get("configuration", {}).get("separator", "/")
        outer = tuple(meta["chunk_grid"]["configuration"]["chunk_shape"])
        self._shape[var], self._outer[var] = inner or outer, outer
        self._dtype[var] = np.dtype(raw.variables[var].dtype).newbyteorder("<")
        return True

    def _chunk(self, var: str, origin: tuple[int, ...]) -> np.ndarray | None:
        outer, inner = self._outer[var], self._inner[var]
        key = self._separator[var].join(["c", *(str(o // n) for o, n in zip(origin, outer))])
        try:
            fd = os.open(self.path / var / key, os.O_RDONLY)
        except FileNotFoundError:  # never written: the fill value
            return None
        try:
            if inner is None:
                data = os.read(fd, os.fstat(fd).st_size)
            else:
                data = self._inner_chunk(fd, var, origin, outer, inner)
                if data is None:
                    return None
        finally:
            os.close(fd)
        codec = self._codec[var]
        arr = np.frombuffer(codec.decode(data) if codec is not None else data, self._dtype[var])
        shape = self._shape[var]
        return arr.reshape(shape) if arr.size == int(np.prod(shape)) else None

    def _inner_chunk(
        self, fd: int, var: str, origin: tuple[int, ...], outer: tuple[int, ...], inner: tuple[int, ...]
    ) -> bytes | None:
        """The stored bytes of the inner chunk at ``origin`` in the shard open as ``fd``."""
        per = tuple(o // i for o, i in zip(outer, inner))  # inner chunks along each dim
        n = int(np.prod(per))
        size = 16 * n + (4 if self._checksum[var] else 0)
        at = os.fstat(fd).st_size - size if self._index_at_end[var] else 0
        index = np.frombuffer(os.pread(fd, size, at)[: 16 * n], "<u8").reshape(*per, 2)
        offset, nbytes = index[tuple((o % m) // i for o, m, i in zip(origin, outer, inner))]
        if offset == nbytes == np.uint64(2**64 - 1):  # an inner chunk never written
            return None
        data = os.pread(fd, int(nbytes), int(offset))
        return data if len(data) == int(nbytes) else None


def _little(codec: Mapping) -> bool:
    """Whether a ``bytes`` codec stores little-endian values (or bytes, which have no order)."""
    return codec.get("configuration", {}).get("endian", "little") == "little"


def _outer(index: tuple[slice | np.ndarray, ...], shape: tuple[int, ...]) -> tuple[np.ndarray, ...]:
    """Slices and arrays as ``np.ix_`` arrays (numpy pairs several index arrays elementwise)."""
    return np.ix_(*(np.arange(n)[i] if isinstance(i, slice) else i for i, n in zip(index, shape)))


__all__ = ["DirectChunks", "NetcdfChunks", "ZarrChunks", "by_chunk", "index_slice", "unshuffle"]
