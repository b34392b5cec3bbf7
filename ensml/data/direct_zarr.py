"""zarr v3 chunks read directly (:mod:`ensml.data.direct_read`): the array's metadata through
zarr's own API, then a chunk's file (in a sharded array, the shard's index and the inner chunk's
bytes) read with ``os.pread`` and decompressed by numcodecs' zstd, outside zarr's one event loop."""

from __future__ import annotations

import os
import warnings
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np
import xarray as xr

from ensml.data.direct_read import DirectChunks


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


__all__ = ["ZarrChunks"]
