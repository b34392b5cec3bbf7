"""The data loader against naive per-sample xarray reads and against the model's consumption.

Run by hand (numbers go in closing notes; tests never time anything)::

    python benchmarks/loader.py [--repeats 3] [--epochs 12] [--full-inits 8]

At 32 x 64 (the embedded synthetic grid) and at 361 x 720 (0.5°, ENS-10's grid), on synthetic
files written to a temporary folder, one line per comparison:

- ensml's loader (``EnsembleDataModule.train_dataloader``: clairvoyant prefetching into the
  ``cache_mb`` cache) in samples/s over ``--epochs`` epochs, and over the first (cold) epoch
  alone;
- naive per-sample xarray indexing on the same files (``ds[v].sel(init_time=t).values`` for the
  forecast and the analysis at init and valid time, then the same member-subset mean and std),
  every epoch the same reads: target ensml >= 3x;
- the model's consumption: forward + backward samples/s of the default U-Net
  (``MixedTask(width=16, depth=3)``) on batches of the same shape: target loader >= 2x model.

Times are min and median over ``--repeats`` runs; ratios use medians. torch uses every core (2
here), the loader its default one prefetch thread.
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
import warnings
from pathlib import Path

import numpy as np
import torch
import xarray as xr

from ensml.data.datamodule import EnsembleDataModule
from ensml.data.synth.generate import synth
from ensml.train.tasks import MixedTask

warnings.filterwarnings("ignore")
VARIABLES, K, LEAD_H = ("z", "t"), 5, 48


def make_data(folder: Path, n_lat: int, n_lon: int, end: str) -> dict[str, Path]:
    t0 = time.perf_counter()
    files = synth(folder, n_lat=n_lat, n_lon=n_lon, start="2017-01-01", end=end, every_days=2)
    size = sum(f.stat().st_size for f in files.values()) / 1e6
    print(
        f"data {n_lat}x{n_lon}: synth to {end} took {time.perf_counter() - t0:.0f} s, {size:.0f} MB on disk"
    )
    return files


def periods(train_end: str) -> dict[str, list[str]]:
    """Training from 2017-01-01 to ``train_end``; 6 and then 10 more days for validation and test."""
    end = np.datetime64(train_end)
    day = np.timedelta64(1, "D")
    return {
        "train_period": ["2017-01-01", train_end],
        "val_period": [str(end + day), str(end + 6 * day)],
        "test_period": [str(end + 7 * day), str(end + 16 * day)],
    }


def module(files: dict[str, Path], batch_size: int) -> EnsembleDataModule:
    with xr.open_dataset(files["forecast"]) as fc:
        train_end = str(fc["init_time"].values[-1] - np.timedelta64(16, "D"))[:10]
    dm = EnsembleDataModule(
        files["forecast"],
        files["analysis"],
        batch_size=batch_size,
        cache_mb=8192,
        check_finite=False,
        prefetch_workers=1,
        **periods(train_end),
    )
    dm.setup("fit")
    return dm


def loader_run(files: dict[str, Path], batch_size: int, epochs: int) -> tuple[float, float, int]:
    """(seconds for ``epochs`` epochs, seconds for the first, samples per epoch) of a fresh loader."""
    dm = module(files, batch_size)
    loader = dm.train_dataloader()
    n = len(dm.train_set)
    t0 = time.perf_counter()
    first = 0.0
    for epoch in range(epochs):
        loader.sampler.set_epoch(epoch)
        for _ in loader:
            pass
        if epoch == 0:
            first = time.perf_counter() - t0
    total = time.perf_counter() - t0
    if dm.train_set._prefetcher is not None:
        dm.train_set._prefetcher.close()
    return total, first, n


def naive_run(files: dict[str, Path], inits: np.ndarray, epochs: int) -> float:
    """Seconds for ``epochs`` passes of per-sample xarray reads of the same samples."""
    fc = xr.open_dataset(files["forecast"]).sel(level=[500, 850])
    an = xr.open_dataset(files["analysis"]).sel(level=[500, 850])
    lead = np.timedelta64(LEAD_H, "h")
    rng = np.random.default_rng(0)
    t0 = time.perf_counter()
    for _ in range(epochs):
        for t in rng.permutation(inits):
            x = np.stack([fc[v].sel(init_time=t).values for v in VARIABLES])  # (V, L, M, D, H, W)
            a0 = np.stack([an[v].sel(time=t).values for v in VARIABLES])
            a1 = np.stack([an[v].sel(time=t + lead).values for v in VARIABLES])
            sub = x[:, :, :K]
            _ = (sub.mean(2), sub.std(2, ddof=1), x[:, -1].std(1), a0, a1)
    elapsed = time.perf_counter() - t0
    fc.close()
    an.close()
    return elapsed


def model_rate(files: dict[str, Path], batch_size: int, steps: int) -> float:
    """Forward + backward samples/s of the default U-Net on batches of the data's shape."""
    dm = module(files, batch_size)
    dm.hparams.prefetch_workers = 0
    batch = next(iter(dm.train_dataloader()))
    torch.manual_seed(0)
    task = MixedTask(width=16, depth=3)
    task.set_stats(dm.stats, dm.coords["latitude"])
    opt = torch.optim.AdamW(task.parameters(), lr=1e-3)
    task.loss(batch).backward()  # warm-up
    t0 = time.perf_counter()
    for _ in range(steps):
        opt.zero_grad()
        task.loss(batch).backward()
        opt.step()
    return steps * batch["mean_k"].shape[0] / (time.perf_counter() - t0)


def summary(values: list[float]) -> str:
    return f"min {min(values):.2f} median {statistics.median(values):.2f}"


def compare(
    name: str, files: dict[str, Path], batch_size: int, epochs: int, repeats: int, steps: int
) -> list[bool]:
    loader_s, first_s, naive_s, model_r = [], [], [], []
    n = 0
    for _ in range(repeats):  # interleaved, so drifts of this noisy machine hit all alike
        total, first, n = loader_run(files, batch_size, epochs)
        loader_s.append(n * epochs / total)
        first_s.append(n / first)
        inits = module(files, batch_size).train_set.init_times
        naive_s.append(len(inits) * epochs / naive_run(files, inits, epochs))
        model_r.append(model_rate(files, batch_size, steps))
    med = {
        k: statistics.median(v)
        for k, v in {"loader": loader_s, "first": first_s, "naive": naive_s, "model": model_r}.items()
    }
    vs_naive, vs_model = med["loader"] / med["naive"], med["loader"] / med["model"]
    print(
        f"{name}: {n} samples x {epochs} epochs, batch {batch_size}, torch threads {torch.get_num_threads()}"
    )
    print(f"  ensml loader   samples/s {summary(loader_s)} (first epoch alone: {summary(first_s)})")
    print(f"  naive xarray   samples/s {summary(naive_s)}")
    print(f"  model fwd+bwd  samples/s {summary(model_r)}")
    print(
        f"  loader / naive = {vs_naive:.1f}x (first epoch {med['first'] / med['naive']:.1f}x); "
        f"target >= 3x: {'met' if vs_naive >= 3 else 'not met'}"
    )
    print(
        f"  loader / model = {vs_model:.1f}x (first epoch {med['first'] / med['model']:.1f}x); "
        f"target >= 2x: {'met' if vs_model >= 2 else 'not met'}"
    )
    return [vs_naive >= 3, vs_model >= 2]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument(
        "--epochs", type=int, default=12, help="epochs per run (configs/mixed.yaml trains 12)"
    )
    parser.add_argument("--full-inits", type=int, default=8, help="init times of the 361 x 720 set")
    args = parser.parse_args()
    print(
        f"env: {os.cpu_count()} cores, torch {torch.__version__} on {torch.get_num_threads()} threads, "
        f"OMP_NUM_THREADS={os.environ.get('OMP_NUM_THREADS', 'unset')}"
    )
    met = []
    with tempfile.TemporaryDirectory() as tmp:
        small = make_data(Path(tmp) / "small", 32, 64, "2018-01-16")
        met += compare("32x64", small, 8, args.epochs, args.repeats, steps=20)
        end = str(np.datetime64("2017-01-01") + np.timedelta64(2 * (args.full_inits - 1) + 16, "D"))
        full = make_data(Path(tmp) / "full", 361, 720, end)
        met += compare("361x720", full, 1, args.epochs, args.repeats, steps=1)
    print(f"targets met: {sum(met)} of {len(met)}")


if __name__ == "__main__":
    main()
