"""Reader processes (ensml.data.staging): the same bits as reads in this process and as naive reads.

Each sample read through a reader process is compared with an independent reference: plain
xarray reads of the file (``ds[v].sel(init_time=t).values``) and numpy moments of the first K
members, in netCDF and in zarr, as the benchmark's naive reader computes them.
"""

from __future__ import annotations

import time
import warnings
from pathlib import Path

import numpy as np
import pytest
import torch
import xarray as xr

from ensml.data import staging
from ensml.data.datamodule import EnsembleDataModule
from ensml.data.sample_read import SampleReader, SampleSpec
from ensml.data.samples import EnsembleSamples
from ensml.data.sampling import EpochPlan
from ensml.data.staging import Readers
from ensml.data.synth.generate import synth
from ensml.errors import EnsmlError

SPEC = SampleSpec(("z", "t"), (500.0, 850.0), (0, 24, 48), (24, 48), 5, 10)
KW = dict(n_lat=8, n_lon=16, start="2017-01-01", end="2017-01-21", every_days=2, seed=3)
PERIODS = {
    "train_period": ["2017-01-01", "2017-01-11"],
    "val_period": ["2017-01-12", "2017-01-15"],
    "test_period": ["2017-01-16", "2017-01-19"],
}
pytestmark = [
    pytest.mark.timeout(120),
    pytest.mark.filterwarnings("ignore:Failed to open Zarr store with consolidated metadata"),
]


@pytest.fixture(scope="module", params=["netcdf", "zarr"])
def files(request, tmp_path_factory) -> dict[str, Path]:
    return synth(tmp_path_factory.mktemp(request.param), format=request.param, **KW)


def inits(files: dict[str, Path]) -> np.ndarray:
    with xr.open_dataset(files["forecast"]) as fc:
        return fc["init_time"].values[:-1]  # the last one's 48 h analysis is past the data


def naive(files: dict[str, Path], init: np.datetime64) -> dict[str, np.ndarray]:
    """One sample from plain xarray reads and numpy: the independent reference."""
    with xr.open_dataset(files["forecast"]) as fc, xr.open_dataset(files["analysis"]) as an:
        x = np.stack([fc[v].sel(init_time=init).values for v in SPEC.variables])  # (V, L, M, D, H, W)
        sub = x[:, :, : SPEC.k]
        at = [an[v].sel(time=init).values for v in SPEC.variables]
        obs = [an[v].sel(time=init + lead).values for lead in SPEC.target_leads for v in SPEC.variables]
    spread = x[:, 1:].std(axis=2)  # the target leads 24 and 48 h: (V, T, D, H, W)
    return {
        "mean_k": sub.mean(axis=2),
        "std_k": sub.std(axis=2, ddof=1),
        "std_m": np.concatenate([spread[:, 0], spread[:, 1]]),  # lead-major fields
        "analysis_init": np.stack(at),
        "obs": np.stack(obs),
    }


def reader(files: dict[str, Path], sampling: str = "first") -> SampleReader:
    return SampleReader(files["forecast"], files["analysis"], inits(files), SPEC, sampling)


@pytest.mark.slow
def test_samples_from_reader_processes_equal_naive_reads(files) -> None:
    readers = Readers(reader(files), processes=3, mode="processes")
    try:
        got = {i: readers(i) for i in range(len(inits(files)))}  # here and in the 2 processes
        assert readers.processes == 2
    finally:
        readers.close()
    for i, init in enumerate(inits(files)):
        want = naive(files, init)
        assert got[i].keys() == want.keys()
        for key, value in want.items():
            assert got[i][key].dtype == np.float32
            np.testing.assert_array_equal(got[i][key], value, err_msg=f"sample {i} {key}")


@pytest.mark.slow
@pytest.mark.parametrize("sampling", ["first", "random"])
def test_batches_are_identical_whoever_reads(files, sampling) -> None:
    """Reader processes, reader threads, and no prefetching at all: the same batches, bit for bit."""

    def batches(**options) -> list[dict[str, torch.Tensor]]:
        kw = dict(batch_size=2, member_sampling=sampling, seed=5, check_finite=False, **PERIODS)
        dm = EnsembleDataModule(files["forecast"], files["analysis"], **kw, **options)
        dm.setup("fit")
        loader = dm.train_dataloader()
        out = []
        for epoch in range(2):
            loader.sampler.set_epoch(epoch)
            out += list(loader)
        processes = dm.train_set._readers.processes if dm.train_set._readers else 0
        dm.teardown("fit")
        return out, processes

    plain, _ = batches(prefetch_workers=0)
    threads, _ = batches(prefetch_workers=2, prefetch_readers="threads")
    procs, started = batches(prefetch_workers=3, prefetch_readers="processes")
    assert started == 2 and len(plain) == len(threads) == len(procs) > 0
    for a, b, c in zip(plain, threads, procs, strict=True):
        assert a.keys() == b.keys() == c.keys()
        for key in a:
            torch.testing.assert_close(b[key], a[key], rtol=0, atol=0)
            torch.testing.assert_close(c[key], a[key], rtol=0, atol=0)


@pytest.mark.slow
def test_a_read_error_in_a_reader_process_is_the_same_one_line_error(files, tmp_path) -> None:
    with xr.open_dataset(files["forecast"]) as src:
        fc = src.load()
    fc["t"][{"init_time": 2, "member": 0, "lead_time": 1}] = np.nan
    fc.to_netcdf(tmp_path / "holes.nc")
    holes = SampleReader(tmp_path / "holes.nc", files["analysis"], inits(files), SPEC)
    with pytest.raises(EnsmlError) as here:
        holes.staged(2)
    readers = Readers(holes, processes=2, mode="processes")
    try:
        proc = _ready_process(readers)
        with pytest.raises(EnsmlError) as there:
            proc.read(2)
        assert str(there.value) == str(here.value)
        assert "has NaN or infinite values in t at" in str(there.value)
        assert proc.read(1).keys() == holes.staged(1).keys()  # the process keeps serving
    finally:
        readers.close()


def _ready_process(readers: Readers) -> staging.ReaderProcess:
    """The first reader process, once it is ready (within a minute)."""
    proc, start = readers._all[0], time.monotonic()
    while not proc.poll():
        assert time.monotonic() - start < 60, "the reader process did not start"
        time.sleep(0.05)
    return proc


@pytest.mark.slow
def test_a_reader_process_that_dies_is_replaced_by_reads_here(files) -> None:
    readers = Readers(reader(files), processes=2, mode="processes")
    try:
        proc = _ready_process(readers)
        proc.process.kill()
        proc.process.wait()
        readers._here_busy = True  # so that the next read goes to the (dead) process
        with pytest.warns(RuntimeWarning, match=r"^ensml: a reader process .*; reading in this process$"):
            got = readers(0)
        np.testing.assert_array_equal(got["mean_k"], naive(files, inits(files)[0])["mean_k"])
        assert readers.processes == 0
    finally:
        readers.close()


@pytest.mark.slow
def test_auto_starts_processes_only_for_large_samples(files, tmp_path, monkeypatch) -> None:
    small = reader(files)
    # 2 variables x (5 members x 3 leads + 5 x 2 target leads + 3 analysis fields) x 2 levels x 8 x 16
    assert small.sample_bytes() == 2 * (15 + 10 + 3) * 2 * 8 * 16 * 4
    fast = Readers(small, processes=2, mode="auto")
    fast(0)
    assert fast.processes == 0
    fast.close()
    monkeypatch.setattr(staging, "LARGE_SAMPLE_BYTES", small.sample_bytes() - 1)
    # zarr decompresses in its own threads, and netCDF-4 files are read chunk by chunk in reader
    # threads (ensml.data.direct_read): no process for them; a netCDF-3 forecast gets processes
    assert small.threads_decompress()
    threads = Readers(reader(files), processes=3, mode="auto")
    threads(0)
    assert threads.processes == 0
    threads.close()
    if Path(files["forecast"]).suffix == ".zarr":
        return
    with xr.open_dataset(files["forecast"]) as fc:
        fc.load().to_netcdf(tmp_path / "classic.nc", format="NETCDF3_64BIT")
    classic = SampleReader(tmp_path / "classic.nc", files["analysis"], inits(files), SPEC)
    assert not classic.threads_decompress()
    slow = Readers(classic, processes=3, mode="auto")
    try:
        assert slow.processes == 2
        procs = list(slow._all)
    finally:
        slow.close()
    assert all(p.process.poll() is not None for p in procs)


@pytest.mark.slow
def test_close_ends_the_reader_processes(files) -> None:
    readers = Readers(reader(files), processes=3, mode="processes")
    procs = list(readers._all)
    _ready_process(readers)
    readers.close()
    assert len(procs) == 2 and all(p.process.poll() is not None for p in procs)
    assert readers(0)["mean_k"].shape == (2, 3, 2, 8, 16)  # after close: reads here


def test_threads_mode_and_single_readers_start_no_process(files) -> None:
    for processes, mode in ((4, "threads"), (1, "processes"), (1, "auto")):
        readers = Readers(reader(files), processes=processes, mode=mode)
        readers(0)
        assert readers.processes == 0 and not readers._all
        readers.close()


def test_the_dataset_ships_no_readers_and_starts_none_without_a_cache(files) -> None:
    ds = EnsembleSamples(files["forecast"], files["analysis"], inits(files), SPEC)
    assert ds.prefetch_readers == "auto"
    state = ds.__getstate__()
    assert state["_readers"] is None and state["_prefetcher"] is None
    ds.plan, ds.prefetch_workers, ds.prefetch_readers = EpochPlan(len(ds), 2), 2, "processes"
    ds.stage()  # cache_mb 0 (the test split): nothing is read ahead, so no process to start
    assert ds._readers.processes == 0
    ds.close()


@pytest.mark.parametrize(
    ("options", "message"),
    [
        (
            {"prefetch_readers": "fibres"},
            "data.prefetch_readers must be one of auto, processes, threads, got 'fibres'",
        ),
        (
            {"prefetch_readers": "processes", "prefetch_workers": 2, "num_workers": 2},
            "data.prefetch_readers=processes cannot run inside DataLoader workers (data.num_workers=2): "
            "set prefetch_readers to auto or threads, or num_workers to 0",
        ),
    ],
)
def test_impossible_reader_options(files, options, message) -> None:
    with pytest.raises(EnsmlError) as err:
        EnsembleDataModule(files["forecast"], files["analysis"], **options)
    assert str(err.value) == message


def test_processes_with_workers_but_no_prefetching_is_fine(files) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        EnsembleDataModule(files["forecast"], prefetch_readers="processes", prefetch_workers=0, num_workers=2)
