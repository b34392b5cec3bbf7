"""Training-sample order that depends only on (seed, epoch), so a resumed run replays it exactly.

A DataLoader built with ``shuffle=True`` draws each epoch's order from one generator seeded
when the loader is built: a run resumed at epoch 3 rebuilds the loader and replays epoch 0's
order, and the random member subsets drawn in worker processes follow the workers' RNG
history. Here the order of epoch ``e`` is a permutation seeded by ``seed + e`` (as torch's
``DistributedSampler``, whose replica split it keeps), and every index is yielded together with
its epoch, so a dataset can draw per-sample randomness from ``(seed, epoch, index)`` alone.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, NamedTuple

from torch.utils.data import Dataset, DistributedSampler, get_worker_info


class SampleKey(NamedTuple):
    """What a DataLoader asks a dataset for: a sample index and the epoch it is drawn in."""

    index: int
    epoch: int


class EpochSampler(DistributedSampler):
    """Shuffled sample order, a pure function of ``(seed, epoch)``; yields :class:`SampleKey`.

    Lightning calls :meth:`set_epoch` before every epoch (also after a resume, with the
    restored epoch) and, as this is a ``DistributedSampler``, does not replace it under DDP.

    Parameters
    ----------
    dataset
        The dataset (only its length is used).
    num_replicas, rank
        Data-parallel replicas and this process's replica (1 and 0 without data parallelism).
    seed
        Seed of the order; epoch ``e`` uses ``seed + e``.
    """

    def __init__(self, dataset: Dataset, num_replicas: int = 1, rank: int = 0, seed: int = 0) -> None:
        super().__init__(dataset, num_replicas=num_replicas, rank=rank, shuffle=True, seed=seed)
        self.iterated_epoch: int | None = None  # the epoch of the latest iteration

    def __iter__(self) -> Iterator[Any]:
        epoch = self.iterated_epoch = self.epoch
        return (SampleKey(int(i), epoch) for i in super().__iter__())

    @property
    def stale(self) -> bool:
        """Whether the latest iteration started before :meth:`set_epoch` gave the current epoch."""
        return self.iterated_epoch is not None and self.iterated_epoch != self.epoch


@dataclass(frozen=True)
class EpochPlan:
    """The sample indices one process reads in an epoch, in order: what a prefetcher reads ahead.

    Mirrors the DataLoader: the sampler's order (:class:`EpochSampler`'s for ``shuffle``, else
    0 … n-1) cut into batches, batch ``b`` going to worker ``b % num_workers`` (torch hands
    batches to its workers in turn). Called inside a DataLoader worker, it gives that worker's
    share. Picklable, so it travels to worker processes with the dataset.
    """

    length: int
    batch_size: int
    num_workers: int = 0
    shuffle: bool = True
    seed: int = 0
    num_replicas: int = 1
    rank: int = 0

    def __call__(self, epoch: int) -> list[int]:
        if self.shuffle:
            sampler = EpochSampler(range(self.length), self.num_replicas, self.rank, seed=self.seed)
            sampler.set_epoch(epoch)
            order = [key.index for key in sampler]
        else:
            order = list(range(self.length))
        if self.num_workers < 1:
            return order
        info = get_worker_info()
        worker = info.id if info is not None else 0
        batches = [order[i : i + self.batch_size] for i in range(0, len(order), self.batch_size)]
        return [i for b, batch in enumerate(batches) if b % self.num_workers == worker for i in batch]


def split_key(key: int | SampleKey | tuple[int, int]) -> tuple[int, int]:
    """``(index, epoch)`` of a dataset key: a plain index is epoch 0."""
    if isinstance(key, tuple):
        return int(key[0]), int(key[1])
    return int(key), 0


__all__ = ["EpochPlan", "EpochSampler", "SampleKey", "split_key"]
