"""The torch Dataset of ensemble samples: a member subset as input, spread and analysis as targets.

The reading itself is :class:`~ensml.data.sample_read.SampleReader`'s (no torch there, so that
reader processes start fast); each process opens the files itself on first use, so HDF5 handles
are never shared across a fork.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np
import torch

from ensml.data.layouts.options import ReaderOptions
from ensml.data.prefetch import Prefetcher
from ensml.data.sample_read import (
    ANALYSIS_SAMPLE_DIMS,
    FORECAST_SAMPLE_DIMS,
    FORECAST_TARGET_DIMS,
    MemberSampling,
    SampleReader,
    SampleSpec,
    by_field,
    index_slice,
    member_fields,
    member_moments,
    read_block,
    select,
    subset_moments,
)
from ensml.data.sampling import EpochPlan, SampleKey, split_key
from ensml.data.staging import PrefetchReaders, Readers
from ensml.data.subset import Subset
from ensml.errors import EnsmlError
from ensml.times import LeadLike, parse_leads


def check_leads(
    input_leads: LeadLike | Sequence[LeadLike], target_leads: LeadLike | Sequence[LeadLike]
) -> tuple[np.ndarray, np.ndarray]:
    """The input and target leads of a sample as ``timedelta64[ns]`` arrays, checked.

    Raises
    ------
    EnsmlError
        When a lead cannot be parsed, the input leads repeat one, or the target leads are not
        distinct leads among the input leads.
    """
    inputs, targets = parse_leads(input_leads), parse_leads(target_leads)
    if inputs.size == 0 or np.unique(inputs).size != inputs.size:
        raise EnsmlError(f"input_leads must be distinct lead times, got {_shown(input_leads)}")
    if targets.size == 0 or np.unique(targets).size != targets.size or not np.isin(targets, inputs).all():
        raise EnsmlError(
            f"target_leads={_shown(target_leads)} must be distinct lead(s) among "
            f"input_leads {_shown(input_leads)}"
        )
    return inputs, targets


def _shown(leads: LeadLike | Sequence[LeadLike]) -> str:
    """Leads as given (hours), for messages: ``[0, 24, 48]``."""
    return str(list(leads) if isinstance(leads, list | tuple) else leads)


class EnsembleSamples(torch.utils.data.Dataset):
    """Samples of one split, one per init time.

    Each item is a dict of float32 tensors in physical units:

    - ``mean_k``, ``std_k`` (V, L, D, H, W): mean and std (ddof 1) of the K-member subset;
    - ``std_m`` (F, D, H, W): std (ddof 0) of all M members at the target leads;
    - ``analysis_init`` (V, D, H, W), ``obs`` (F, D, H, W): the analysis at initialisation and at
      the target valid times (only when an analysis is given);

    where ``F = T × V`` fields, lead-major (field ``f`` is variable ``f % V`` at the ``f // V``-th
    target lead): with one target lead, ``(V, D, H, W)``.
    - ``index``: the position of the init time in :attr:`init_times`.

    Items are indexed by a plain index or by a :class:`~ensml.data.sampling.SampleKey`
    ``(index, epoch)``.

    Parameters
    ----------
    member_sampling
        ``"first"``: members 0 … K-1 (the research's choice); ``"random"``: a fresh random subset
        per sample and epoch, a function of ``(seed, epoch, index)`` only (the epoch comes with
        the key, see :class:`~ensml.data.sampling.EpochSampler`), so it does not depend on which
        process reads the sample or on what it drew before: a resumed run draws the same.
    slab
        ``(latitude, longitude)`` index slices: read only this part of the grid from disk (the
        rank's shard in spatial-parallel training); H and W are then the slab's sizes.
    targets
        Read the targets (``std_m``, ``obs``). Without them only the inputs are read, so an
        analysis is needed at initialisation only, as for a new forecast.
    cache_mb
        Memory (MiB, per process) for keeping what was read from disk, so later epochs skip
        the read and decompression; samples beyond the budget are read each time.
    seed
        Seed of the random member subsets.
    reader, analysis_reader
        How to read the forecast and analysis files (:class:`~ensml.data.layouts.options.ReaderOptions`).
    """

    def __init__(
        self,
        forecast: str | Path | Sequence[str | Path],
        analysis: str | Path | Sequence[str | Path] | None,
        init_times: np.ndarray,
        spec: SampleSpec,
        member_sampling: MemberSampling = "first",
        slab: tuple[slice, slice] | None = None,
        targets: bool = True,
        cache_mb: float = 0.0,
        seed: int = 0,
        reader: ReaderOptions | dict | None = None,
        analysis_reader: ReaderOptions | dict | None = None,
    ) -> None:
        self.reader = SampleReader(
            forecast, analysis, init_times, spec, member_sampling, slab, targets, reader, analysis_reader
        )
        self.init_times = self.reader.init_times
        self.spec = spec
        self.member_sampling = member_sampling
        self.slab = slab
        self.targets = targets
        self.cache_bytes = int(cache_mb * 2**20)
        self.seed = int(seed)
        # Clairvoyant prefetching (set by the data module): plan(epoch) is this process's read order,
        # read ahead by prefetch_workers readers, threads or processes (ensml.data.staging).
        self.plan: EpochPlan | None = None
        self.prefetch_workers = 0
        self.prefetch_readers: PrefetchReaders = "auto"
        self._prefetcher: Prefetcher | None = None
        self._readers: Readers | None = None
        self._planned: set[int] = set()
        self._cache: dict[int, dict[str, np.ndarray]] = {}
        self._cached_bytes = 0

    def __len__(self) -> int:
        return len(self.init_times)

    def __getstate__(self) -> dict:
        # Never ship open files, threads or reader processes to worker processes.
        state = {**self.__dict__, "_cache": {}, "_cached_bytes": 0}
        return {**state, "_prefetcher": None, "_readers": None, "_planned": set()}

    def members_for(self, index: int, epoch: int = 0) -> np.ndarray:
        """Indices of the K members used for sample ``index`` in ``epoch``."""
        k, m = self.spec.k, self.spec.members
        if self.member_sampling == "first":
            return np.array(Subset.first(k).members)
        rng = np.random.default_rng([self.seed, epoch, index])
        return np.sort(rng.permutation(m)[:k])

    def _blocks(self, index: int) -> dict[str, np.ndarray]:
        """The staged arrays of sample ``index``, from the cache or from disk."""
        if index in self._cache:
            return self._cache[index]
        blocks = self.reader.staged(index)
        size = sum(b.nbytes for b in blocks.values())
        if self._cached_bytes + size <= self.cache_bytes:
            self._cache[index] = blocks
            self._cached_bytes += size
        return blocks

    def stage(self) -> None:
        """Start prefetching (its threads, and reader processes if any) before the first request:
        a reader process takes a second or two to start. Needs :attr:`plan` and prefetch_workers."""
        if self._prefetcher is None:
            # A DataLoader worker is itself one of several reading processes: threads there;
            # without a cache nothing is read ahead, so a reader process would never be used.
            worker = torch.utils.data.get_worker_info() is not None
            mode = "threads" if worker or not self.cache_bytes else self.prefetch_readers
            self._readers = Readers(self.reader, self.prefetch_workers, mode)
            lookahead = max(8, 2 * self.plan.batch_size)  # reads ahead stop soon after the consumer
            self._prefetcher = Prefetcher(self._readers, self.cache_bytes, self.prefetch_workers, lookahead)

    def _prefetched(self, index: int, epoch: int) -> dict[str, np.ndarray]:
        """Sample ``index`` through the clairvoyant prefetcher (:mod:`ensml.data.prefetch`)."""
        self.stage()
        for e in (epoch, epoch + 1):  # this epoch's order and the next one's, planned once
            if e not in self._planned:
                self._planned.add(e)
                self._prefetcher.extend(self.plan(e), epoch=e)
        return self._prefetcher.get(index, epoch)

    def close(self) -> None:
        """Stop prefetching (the reads under way finish first) and the reader processes; the
        cache is kept."""
        if self._prefetcher is not None:
            self._prefetcher.close()
            self._prefetcher, self._planned = None, set()
        if self._readers is not None:
            self._readers.close()
            self._readers = None

    def __getitem__(self, key: int | SampleKey) -> dict[str, torch.Tensor]:
        index, epoch = split_key(key)
        if self.plan is not None and self.prefetch_workers > 0:
            blocks = self._prefetched(index, epoch)
        else:
            blocks = self._blocks(index)
        if "mean_k" in blocks:  # members 0 ... K-1 only, reduced by the reader
            item = {"mean_k": blocks["mean_k"], "std_k": blocks["std_k"]}
        else:
            fc = blocks["fc"]
            item = subset_moments(fc, self.members_for(index, epoch), self.spec.k)
            if self.targets:
                fields = member_fields(fc[:, index_slice(self.spec.target_indices)])
                item["std_m"] = by_field(member_moments(fields)[1])
        keys = ("std_m", "analysis_init", "obs") if self.targets else ("analysis_init",)
        item.update({key: blocks[key] for key in keys if key in blocks})
        return to_tensors(item, index)


def to_tensors(item: dict[str, np.ndarray], index: int) -> dict[str, torch.Tensor]:
    """A sample dict of contiguous float32 tensors, with its ``index``."""
    out = {key: torch.from_numpy(np.ascontiguousarray(val, dtype=np.float32)) for key, val in item.items()}
    out["index"] = torch.tensor(index)
    return out


__all__ = [
    "ANALYSIS_SAMPLE_DIMS",
    "FORECAST_SAMPLE_DIMS",
    "FORECAST_TARGET_DIMS",
    "EnsembleSamples",
    "MemberSampling",
    "SampleSpec",
    "by_field",
    "check_leads",
    "index_slice",
    "read_block",
    "select",
    "subset_moments",
    "to_tensors",
]
