"""Process grid for hybrid spatial × data parallelism, and how a field is cut into shards.

The world is ``data × lat × lon`` ranks. The spatial ranks of one replica are contiguous
(``rank = replica * n_spatial + lat_index * n_lon + lon_index``), so that on a multi-GPU node the
halo traffic stays between neighbouring devices. Every rank of a spatial group holds one
latitude/longitude slab of every sample of its replica; replicas see different samples.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import torch.distributed as dist

from ensml.errors import EnsmlError

LAT, LON = 3, 4  # tensor dims of (batch, channel, level, latitude, longitude)


class ProcessGrid:
    """Ranks of the world arranged as ``data × lat × lon`` with their process groups.

    Parameters
    ----------
    lat, lon
        Number of shards along latitude and longitude (1: not split).
    data
        Number of data-parallel replicas; by default ``world_size // (lat * lon)``.
    local
        A one-rank grid that ignores any process group (e.g. for tracing a model's costs).

    Creating a grid is collective (it creates process groups): every rank must construct the same
    grid in the same order. Without an initialised process group only ``lat = lon = data = 1`` works.
    """

    def __init__(self, lat: int = 1, lon: int = 1, data: int | None = None, local: bool = False) -> None:
        initialised = dist.is_available() and dist.is_initialized() and not local
        world = dist.get_world_size() if initialised else 1
        self.rank = dist.get_rank() if initialised else 0
        if lat < 1 or lon < 1:
            raise EnsmlError(f"spatial split must be positive, got lat={lat}, lon={lon}")
        n_spatial = lat * lon
        if data is None:
            data = world // n_spatial
        if data * n_spatial != world:
            raise EnsmlError(
                f"process grid data={data} × lat={lat} × lon={lon} does not match the world size {world}"
            )
        self.world_size, self.n_data, self.n_lat, self.n_lon = world, data, lat, lon
        self.n_spatial = n_spatial
        self.replica, self.spatial_rank = divmod(self.rank, n_spatial)
        self.lat_index, self.lon_index = divmod(self.spatial_rank, lon)
        self.spatial_group = self.data_group = self.p2p_group = None
        self._trusted = 0
        if initialised:
            # new_group is collective over the world: all ranks create all groups, in order.
            for r in range(data):
                g = dist.new_group(list(range(r * n_spatial, (r + 1) * n_spatial)))
                if r == self.replica:
                    self.spatial_group = g
            for s in range(n_spatial):
                g = dist.new_group(list(range(s, world, n_spatial)))
                if s == self.spatial_rank:
                    self.data_group = g
            # Halo messages use the default group with global ranks: on gloo a separate group
            # measured 2-4x slower per message, and send/recv never collide with collectives.

    def __repr__(self) -> str:
        return f"ProcessGrid(data={self.n_data}, lat={self.n_lat}, lon={self.n_lon}, rank={self.rank})"

    # -- topology ---------------------------------------------------------------------------
    def parts(self, dim: int) -> int:
        """Number of shards along tensor dim ``LAT`` or ``LON``."""
        return {LAT: self.n_lat, LON: self.n_lon}[dim]

    def index(self, dim: int) -> int:
        """This rank's shard index along ``LAT`` or ``LON``."""
        return {LAT: self.lat_index, LON: self.lon_index}[dim]

    def rank_of(self, lat_index: int, lon_index: int, replica: int | None = None) -> int:
        """Global rank of a spatial position (in this rank's replica by default)."""
        replica = self.replica if replica is None else replica
        return replica * self.n_spatial + lat_index * self.n_lon + lon_index

    def neighbour(self, dim: int, step: int, periodic: bool) -> int | None:
        """Global rank of the neighbour ``step`` (±1) shards away along ``dim``, or None at an edge."""
        n, i = self.parts(dim), self.index(dim) + step
        if not 0 <= i < n:
            if not periodic:
                return None
            i %= n
        return self.rank_of(i, self.lon_index) if dim == LAT else self.rank_of(self.lat_index, i)

    def is_first(self, dim: int) -> bool:
        return self.index(dim) == 0

    def is_last(self, dim: int) -> bool:
        return self.index(dim) == self.parts(dim) - 1

    # -- shape validation -------------------------------------------------------------------
    @property
    def trusted(self) -> bool:
        """True inside :meth:`shapes_checked`: layers skip their own collective shape checks."""
        return self._trusted > 0

    @contextlib.contextmanager
    def shapes_checked(self) -> Iterator[None]:
        """Declare that a caller validated all shards collectively (e.g. the whole U-Net up front)."""
        self._trusted += 1
        try:
            yield
        finally:
            self._trusted -= 1


def shard_sizes(n: int, parts: int, multiple: int = 1, pad: int = 0) -> list[int]:
    """Sizes of ``parts`` contiguous shards of ``n`` cells, as even as possible.

    The padded extent ``n + pad`` is cut into whole blocks of ``multiple`` cells (the first shards
    get one block more when they do not divide); the last shard then gives back ``pad`` cells. So
    every padded shard is a multiple of ``multiple`` (e.g. ``2**depth`` for a U-Net).
    """
    blocks, rest = divmod(n + pad, multiple)
    if rest:
        raise EnsmlError(f"padded size {n}+{pad} is not a multiple of {multiple}")
    if blocks < parts:
        raise EnsmlError(f"cannot cut {n} cells into {parts} shards of whole blocks of {multiple}")
    q, r = divmod(blocks, parts)
    sizes = [(q + (i < r)) * multiple for i in range(parts)]
    sizes[-1] -= pad
    if sizes[-1] < 1:
        raise EnsmlError(f"the last of {parts} shards of {n} cells would hold no real cells")
    return sizes


def shard_slice(sizes: list[int], index: int) -> slice:
    """Slice of shard ``index`` given all shard sizes."""
    start = sum(sizes[:index])
    return slice(start, start + sizes[index])
