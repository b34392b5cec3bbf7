"""Clairvoyant prefetching: the same samples, read ahead in the planned order, Belady eviction."""

from __future__ import annotations

import time

import numpy as np
import pytest
import torch

from ensml.data.datamodule import EnsembleDataModule
from ensml.data.prefetch import Prefetcher
from ensml.data.sampling import EpochPlan, EpochSampler
from ensml.errors import EnsmlError
from tests.conftest import TINY_PERIODS


def fake_read(log: list[int], size: int = 100, fail: int | None = None):
    def read(index: int) -> dict[str, np.ndarray]:
        log.append(index)
        if index == fail:
            raise EnsmlError(f"forecast x.nc cannot be read at sample {index}")
        return {"fc": np.full(size // 8, float(index))}

    return read


def test_values_follow_the_requests_and_the_budget_holds() -> None:
    log: list[int] = []
    pf = Prefetcher(fake_read(log), budget_bytes=250, workers=2, lookahead=4)
    sequence = [1, 2, 3, 1, 2, 4, 1, 5, 5, 2]
    pf.extend(sequence)
    for i in sequence:
        assert pf.get(i)["fc"][0] == i
        assert pf.cached_bytes <= 250
    pf.close()
    assert len(log) <= len(sequence)  # read ahead, never more than once per request


def test_eviction_is_belady_the_furthest_next_use_leaves() -> None:
    pf = Prefetcher(fake_read([]), budget_bytes=200, workers=1, lookahead=1)
    pf.close()  # drive the cache by hand
    pf.extend([7, 8, 9, 8, 7])
    with pf._cv:  # the consumer holds the lock when it admits
        pf._admit(7, {"fc": np.zeros(12)})  # 96 bytes each
        pf._admit(8, {"fc": np.zeros(12)})
        pf._pos = 2  # 7 and 8 consumed once; next uses: 8 at 3, 7 at 4
        pf._admit(9, {"fc": np.zeros(12)})  # used at 2: evicts 7, the one needed last
        assert sorted(pf._cache) == [8, 9]
        pf._pos = 3
        pf._admit(5, {"fc": np.zeros(12)})  # never planned: not cached
        assert sorted(pf._cache) == [8, 9]


def test_background_read_errors_reach_the_consumer_as_they_are() -> None:
    pf = Prefetcher(fake_read([], fail=3), budget_bytes=10_000, workers=2)
    pf.extend([1, 2, 3, 4])
    assert pf.get(1)["fc"][0] == 1 and pf.get(2)["fc"][0] == 2
    with pytest.raises(EnsmlError, match=r"^forecast x\.nc cannot be read at sample 3$"):
        pf.get(3)
    assert pf.get(4)["fc"][0] == 4
    pf.close()


def test_close_stops_the_threads() -> None:
    pf = Prefetcher(fake_read([]), budget_bytes=1000, workers=3)
    pf.extend(range(5))
    pf.close()
    assert not any(t.name.startswith("ensml-prefetch") and t.is_alive() for t in pf._threads)


@pytest.mark.parametrize(("budget", "workers"), [(-1, 1), (10, 0)])
def test_impossible_prefetch_options(budget, workers) -> None:
    with pytest.raises(EnsmlError, match="prefetch"):
        Prefetcher(fake_read([]), budget, workers)


def test_impossible_data_module_options(tiny_data) -> None:
    with pytest.raises(EnsmlError, match=r"^prefetch_workers and cache_mb must be >= 0, got -1 and 2048"):
        EnsembleDataModule(tiny_data["forecast"], prefetch_workers=-1)


def test_plan_matches_the_sampler_and_the_worker_split() -> None:
    sampler = EpochSampler(range(10), num_replicas=2, rank=1, seed=4)
    sampler.set_epoch(3)
    plan = EpochPlan(10, batch_size=2, seed=4, num_replicas=2, rank=1)
    assert plan(3) == [k.index for k in sampler]
    assert EpochPlan(7, batch_size=2, shuffle=False)(0) == list(range(7))


def batches(dm: EnsembleDataModule, epochs: int) -> list[dict[str, torch.Tensor]]:
    dm.setup("fit")
    loader = dm.train_dataloader()
    out = []
    for epoch in range(epochs):
        loader.sampler.set_epoch(epoch)
        out += list(loader)
    return out


@pytest.mark.slow
@pytest.mark.parametrize("sampling", ["first", "random"])
def test_batches_are_identical_with_and_without_prefetching(tiny_data, sampling) -> None:
    kw = dict(batch_size=4, member_sampling=sampling, seed=3, **TINY_PERIODS)
    plain = EnsembleDataModule(tiny_data["forecast"], tiny_data["analysis"], prefetch_workers=0, **kw)
    ahead = EnsembleDataModule(tiny_data["forecast"], tiny_data["analysis"], prefetch_workers=2, **kw)
    a, b = batches(plain, 2), batches(ahead, 2)
    assert len(a) == len(b) > 0
    for x, y in zip(a, b, strict=True):
        assert x.keys() == y.keys()
        for key in x:
            torch.testing.assert_close(x[key], y[key], rtol=0, atol=0)
    pf = ahead.train_set._prefetcher
    assert pf.reads == len(ahead.train_set)  # the second epoch came from the cache, read once each
    ahead.teardown("fit")
    assert not any(t.is_alive() for t in pf._threads)


def test_prefetching_overlaps_reads_with_the_consumer(tiny_data) -> None:
    dm = EnsembleDataModule(
        tiny_data["forecast"], tiny_data["analysis"], batch_size=1, prefetch_workers=1, **TINY_PERIODS
    )
    dm.setup("fit")
    it = iter(dm.train_dataloader())
    next(it)
    time.sleep(0.5)  # the model would be training: the reader goes ahead
    pf = dm.train_set._prefetcher
    assert pf.reads > 1
    dm.teardown("fit")
    assert not any(t.is_alive() for t in pf._threads) and dm.train_set._prefetcher is None


def test_an_epoch_cut_short_does_not_leave_the_plan_behind() -> None:
    log: list[int] = []
    pf = Prefetcher(fake_read(log), budget_bytes=10_000, workers=1, lookahead=2)
    pf.extend([0, 1, 2, 3], epoch=0)
    pf.extend([3, 2, 1, 0], epoch=1)
    assert pf.get(0, 0)["fc"][0] == 0  # epoch 0 stops after one sample (limit_train_batches)
    assert pf.get(3, 1)["fc"][0] == 3 and pf._pos == 5  # epoch 1 follows its own plan
    pf.close()
