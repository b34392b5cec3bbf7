"""netCDF-4 chunks read directly (:mod:`ensml.data.direct_read`): HDF5's chunk index listed by
h5py when the file is opened, then each chunk's bytes read with ``os.pread``, inflated by ISA-L
and unshuffled here, with no HDF5 call while reading (h5py is not safe to call from several
threads at once: two threads in it crashed HDF5)."""

from __future__ import annotations

import os
import weakref
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np
import xarray as xr

from ensml.data.direct_read import DirectChunks

try:  # ISA-L's inflate: about twice zlib's speed, same output
    from isal.isal_zlib import decompress as inflate
except ImportError:  # pragma: no cover - a declared dependency; zlib gives the same bytes
    from zlib import decompress as inflate


#: HDF5's filter ids: the only filters a chunk may have to be read here.
SHUFFLE, DEFLATE = 2, 1
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


__all__ = ["DEFLATE", "SHUFFLE", "NetcdfChunks", "unshuffle"]
