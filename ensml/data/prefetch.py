"""Clairvoyant prefetching: read samples ahead in the order training will ask for them.

Training order is a pure function of ``(seed, epoch)`` (:class:`~ensml.data.sampling.EpochSampler`),
so the sequence of sample indices a process will read in this and the next epochs is known
before they are asked for (Dryden et al., "Clairvoyant prefetching for distributed machine
learning I/O", SC'21). :class:`Prefetcher` keeps that sequence and, in background threads,
reads the next samples of it into a bounded in-memory cache while the model trains on the
current one. Eviction is clairvoyant too (Belady): when the cache is full, the sample whose next
use is furthest in the future leaves, and a sample is not read ahead at all if every cached one
is needed sooner. Samples that fit stay cached across epochs, so an epoch whose samples all
fit reads nothing from disk.

The reads are the dataset's own (:meth:`SampleReader.staged <ensml.data.sample_read.SampleReader.staged>`,
made in this process or in reader processes, :mod:`ensml.data.staging`), so what the model sees
does not change by a bit; an error in a background read is raised when that sample is asked for,
as the same one-line error as without prefetching.
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Callable, Iterable, Mapping

import numpy as np

from ensml.errors import EnsmlError

Blocks = Mapping[str, np.ndarray]


def blocks_bytes(blocks: Blocks) -> int:
    return int(sum(b.nbytes for b in blocks.values()))


class Prefetcher:
    """A bounded, clairvoyant read-ahead cache of samples.

    Parameters
    ----------
    read
        ``read(index) -> blocks``: the arrays of one sample, read from disk.
    budget_bytes
        Memory the cached samples may take.
    workers
        Background threads (≥ 1), each calling ``read``: as many reads under way at once.
    lookahead
        How many positions of the planned sequence, past the current one, may be read ahead.
    """

    def __init__(
        self, read: Callable[[int], Blocks], budget_bytes: int, workers: int = 1, lookahead: int = 64
    ):
        if budget_bytes < 0:
            raise EnsmlError(f"prefetch cache budget must be >= 0 bytes, got {budget_bytes}")
        if workers < 1 or lookahead < 1:
            raise EnsmlError(f"prefetch needs workers >= 1 and lookahead >= 1, got {workers} and {lookahead}")
        self._read = read
        self.budget = int(budget_bytes)
        self.lookahead = int(lookahead)
        self._cv = threading.Condition()
        self._sequence: list[int] = []  # planned reads, in order
        self._uses: dict[int, deque[int]] = {}  # index -> its future positions in _sequence
        self._pos = 0  # position of the next read the consumer will make
        self._cache: dict[int, Blocks] = {}
        self._bytes = 0
        self._inflight: set[int] = set()
        self._errors: dict[int, BaseException] = {}
        self._closed = False
        self._epoch_start: dict[int, int] = {}
        self._epoch: int | None = None
        self.reads = 0  # disk reads made (background and synchronous)
        self._threads = [
            threading.Thread(target=self._work, name=f"ensml-prefetch-{i}", daemon=True)
            for i in range(workers)
        ]
        for t in self._threads:
            t.start()

    # -- plan --------------------------------------------------------------------------------
    def extend(self, indices: Iterable[int], epoch: int | None = None) -> None:
        """Append planned reads (e.g. the next epoch's order) to the sequence.

        ``epoch`` marks where that epoch's reads start: a request of a new epoch jumps there, so
        an epoch cut short (``limit_train_batches``) does not leave the plan behind.
        """
        with self._cv:
            if epoch is not None:
                self._epoch_start[epoch] = len(self._sequence)
            for i in indices:
                self._uses.setdefault(int(i), deque()).append(len(self._sequence))
                self._sequence.append(int(i))
            self._cv.notify_all()

    @property
    def planned(self) -> int:
        """Planned reads not yet consumed."""
        return len(self._sequence) - self._pos

    def _next_use(self, index: int) -> float:
        uses = self._uses.get(index)
        while uses and uses[0] < self._pos:
            uses.popleft()
        return uses[0] if uses else float("inf")

    # -- consumer ------------------------------------------------------------------------------
    def get(self, index: int, epoch: int | None = None) -> Blocks:
        """The blocks of sample ``index``: from the cache, waiting for a read under way, or read now.

        A request that follows the plan advances it; one that does not (another order) is
        served without disturbing it. The first request of a planned ``epoch`` moves the plan
        to that epoch's start.
        """
        with self._cv:
            if epoch is not None and epoch != self._epoch:
                self._epoch = epoch
                self._pos = max(self._pos, self._epoch_start.get(epoch, self._pos))
            planned = self._pos < len(self._sequence) and self._sequence[self._pos] == index
            if planned:
                self._pos += 1
                self._cv.notify_all()
            while index in self._inflight:
                self._cv.wait()
            if index in self._errors:
                raise self._errors.pop(index)
            blocks = self._cache.get(index)
            if blocks is not None:
                if self._next_use(index) == float("inf"):  # not needed again: free the room
                    self._evict(index)
                return blocks
        blocks = self._read(index)  # not read ahead (cache full of sooner needs, or unplanned)
        with self._cv:
            self.reads += 1
            self._admit(index, blocks)
        return blocks

    # -- cache ---------------------------------------------------------------------------------
    def _evict(self, index: int) -> None:
        self._bytes -= blocks_bytes(self._cache.pop(index))

    def _make_room(self, size: int, next_use: float) -> bool:
        """Evict samples used later than ``next_use`` until ``size`` bytes fit; False if they cannot."""
        if size > self.budget:
            return False
        while self._bytes + size > self.budget:
            victim = max(self._cache, key=self._next_use, default=None)
            if victim is None or self._next_use(victim) <= next_use:
                return False
            self._evict(victim)
        return True

    def _admit(self, index: int, blocks: Blocks) -> None:
        next_use = self._next_use(index)
        if (
            index not in self._cache
            and next_use != float("inf")
            and self._make_room(blocks_bytes(blocks), next_use)
        ):
            self._cache[index] = blocks
            self._bytes += blocks_bytes(blocks)
        self._cv.notify_all()

    @property
    def cached_bytes(self) -> int:
        return self._bytes

    # -- background readers ------------------------------------------------------------------------
    def _candidate(self) -> int | None:
        """The next planned sample worth reading ahead, or None."""
        end = min(len(self._sequence), self._pos + self.lookahead)
        for p in range(self._pos, end):
            index = self._sequence[p]
            if index in self._cache or index in self._inflight or index in self._errors:
                continue
            # Room only by evicting samples needed later than this one (Belady).
            victims_ok = self._bytes < self.budget or any(self._next_use(i) > p for i in self._cache)
            return index if victims_ok else None
        return None

    def _work(self) -> None:
        while True:
            with self._cv:
                index = self._candidate()
                while index is None and not self._closed:
                    self._cv.wait()
                    index = self._candidate()
                if self._closed:
                    return
                self._inflight.add(index)
            try:
                blocks = self._read(index)
            except BaseException as exc:  # handed to the consumer of this sample
                with self._cv:
                    self._inflight.discard(index)
                    self._errors[index] = exc
                    self._cv.notify_all()
                continue
            with self._cv:
                self.reads += 1
                self._inflight.discard(index)
                self._admit(index, blocks)

    def close(self) -> None:
        """Stop the reader threads (reads under way finish first)."""
        with self._cv:
            self._closed = True
            self._cv.notify_all()
        for t in self._threads:
            t.join()


__all__ = ["Prefetcher", "blocks_bytes"]
