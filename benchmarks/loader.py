"""The data loader against naive per-sample xarray reads and against the model's consumption.

Run by hand (numbers go in closing notes; tests never time anything)::

    python benchmarks/loader.py [--repeats 3] [--epochs 12] [--full-inits 24]
        [--grids 32x64 361x720] [--formats netcdf zarr] [--data DIR]

At 32 x 64 (the embedded synthetic grid) and at 361 x 720 (0.5°, ENS-10's grid), on synthetic
files in netCDF and in zarr (``ensml data synth``, one chunk per member field; ``--data DIR``
keeps them between runs, else a temporary folder), one line per comparison:

- ensml's loader (``EnsembleDataModule.train_dataloader``: clairvoyant prefetching into the
  ``cache_mb`` cache, with ``prefetch_workers`` and ``prefetch_readers`` as configs/data.yaml
  sets them) in samples/s over the **first epoch** (cold: every sample read
  from disk, reader processes started inside it) and over the **later epochs** (warm: from the
  cache) separately;
- the same loader as it was before reader processes (one prefetch thread): its first epoch;
- naive per-sample xarray reads of the same files (``ds[v].sel(init_time=t).values`` for the
  forecast and the analysis at init and valid time, then the same member-subset mean and std),
  whose every epoch is the same reads, so one pass per repeat measures it: targets first epoch
  >= 2x naive at 361 x 720, the whole run >= 3x;
- the model's consumption: forward + backward samples/s of the default U-Net
  (``MixedTask(width=16, depth=3)``) on batches of the same shape: target loader >= 2x model.

Times are min and median over ``--repeats`` rounds, interleaved (every contender once per
round, so drifts of a shared machine hit all alike); ratios use medians. torch uses every core,
as it does in training.
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
import yaml

from ensml.data.datamodule import EnsembleDataModule
from ensml.data.synth.generate import synth
from ensml.train.tasks import MixedTask

warnings.filterwarnings("ignore")
VARIABLES, K, LEAD_H = ("z", "t"), 5, 48
START = "2017-01-01"
#: The loader's settings as ``ensml fit`` gets them: configs/data.yaml's.
CONFIG = yaml.safe_load((Path(__file__).resolve().parents[1] / "configs" / "data.yaml").read_text())
READERS = {key: CONFIG[key] for key in ("prefetch_workers", "prefetch_readers")}


def make_data(folder: Path, n_lat: int, n_lon: int, days: int, fmt: str) -> dict[str, Path]:
    """The synthetic files in ``folder`` (init times every 2 days over ``days`` days): made there,
    or reused when an earlier run made the same."""
    ext = ".nc" if fmt == "netcdf" else ".zarr"
    files = {name: folder / f"{name}{ext}" for name in ("forecast", "analysis")}
    end = str(np.datetime64(START) + np.timedelta64(days, "D"))
    if all(f.exists() for f in files.values()):
        with xr.open_dataset(files["forecast"]) as fc:
            same = fc.sizes["init_time"] == days // 2 + 1 and fc.sizes["latitude"] == n_lat
        if same:
            print(f"data {n_lat}x{n_lon} {fmt}: reused {folder}")
            return files
    t0 = time.perf_counter()
    out = synth(
        folder, n_lat=n_lat, n_lon=n_lon, start=START, end=end, every_days=2, format=fmt, overwrite=True
    )
    size = sum(_size(f) for f in out.values()) / 1e6
    print(
        f"data {n_lat}x{n_lon} {fmt}: synth to {end} took {time.perf_counter() - t0:.0f} s, "
        f"{size:.0f} MB on disk"
    )
    return files


def _size(path: Path) -> int:
    return path.stat().st_size if path.is_file() else sum(f.stat().st_size for f in path.rglob("*"))


def periods(train_end: str) -> dict[str, list[str]]:
    """Training from 2017-01-01 to ``train_end``; 6 and then 10 more days for validation and test."""
    end = np.datetime64(train_end)
    day = np.timedelta64(1, "D")
    return {
        "train_period": [START, train_end],
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
        **READERS,
        **periods(train_end),
    )
    dm.setup("fit")
    return dm


def loader_run(dm: EnsembleDataModule, epochs: int, **options: object) -> tuple[float, float, int]:
    """(seconds of the first epoch, seconds of the later ones, samples per epoch) of a fresh loader.

    ``dm`` is set up once (its statistics read the whole training split); each run makes new
    datasets, with an empty cache, and the clock starts before ``train_dataloader()``: whatever
    staging starts is in the first epoch.
    """
    dm.hparams.update({**READERS, **options})
    dm.setup("fit")
    n = len(dm.train_set)
    t0 = time.perf_counter()
    loader = dm.train_dataloader()
    first = 0.0
    for epoch in range(epochs):
        loader.sampler.set_epoch(epoch)
        for _ in loader:
            pass
        if epoch == 0:
            first = time.perf_counter() - t0
    later = time.perf_counter() - t0 - first
    dm.teardown("fit")
    return first, later, n


def naive_run(files: dict[str, Path], inits: np.ndarray) -> float:
    """Seconds for one pass of per-sample xarray reads of the same samples (all levels are used)."""
    fc = xr.open_dataset(files["forecast"])
    an = xr.open_dataset(files["analysis"])
    lead = np.timedelta64(LEAD_H, "h")
    rng = np.random.default_rng(0)
    t0 = time.perf_counter()
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


def model_rate(dm: EnsembleDataModule, steps: int) -> float:
    """Forward + backward samples/s of the default U-Net on batches of the data's shape."""
    dm.hparams.update(prefetch_workers=0)
    dm.setup("fit")
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


def verdict(ratio: float, target: float) -> str:
    return f"target >= {target:g}x: {'met' if ratio >= target else 'not met'}"


def compare(
    name: str,
    data: dict[str, dict[str, Path]],
    batch_size: int,
    epochs: int,
    repeats: int,
    steps: int,
    cold_target: float | None,
) -> list[bool]:
    """Every contender once per round, ``repeats`` rounds; one block of lines per format."""
    rates: dict[str, dict[str, list[float]]] = {fmt: {} for fmt in data}
    modules = {fmt: module(files, batch_size) for fmt, files in data.items()}
    model: list[float] = []
    n = 0
    for _ in range(repeats):
        for fmt, files in data.items():
            r, dm = rates[fmt], modules[fmt]
            first, later, n = loader_run(dm, epochs)
            r.setdefault("first", []).append(n / first)
            r.setdefault("later", []).append(n * (epochs - 1) / later if epochs > 1 else float("nan"))
            r.setdefault("whole", []).append(n * epochs / (first + later))
            before, _, _ = loader_run(dm, 1, prefetch_workers=1, prefetch_readers="threads")
            r.setdefault("before", []).append(n / before)
            inits = dm.train_set.init_times
            r.setdefault("naive", []).append(len(inits) / naive_run(files, inits))
        model.append(model_rate(next(iter(modules.values())), steps))
    met = []
    model_med = statistics.median(model)
    for fmt, r in rates.items():
        med = {key: statistics.median(values) for key, values in r.items()}
        readers = ", ".join(f"{key} {value}" for key, value in READERS.items())
        print(
            f"{name} {fmt}: {n} samples x {epochs} epochs, batch {batch_size}, {readers}, "
            f"torch threads {torch.get_num_threads()}"
        )
        print(f"  ensml first epoch   samples/s {summary(r['first'])}")
        if epochs > 1:
            print(f"  ensml later epochs  samples/s {summary(r['later'])}")
        print(f"  ensml 1 thread      samples/s {summary(r['before'])} (first epoch, the loader before)")
        print(f"  naive xarray        samples/s {summary(r['naive'])}")
        print(f"  model fwd+bwd       samples/s {summary(model)}")
        cold = med["first"] / med["naive"]
        line = f"  first epoch / naive = {cold:.1f}x (1 thread: {med['before'] / med['naive']:.1f}x)"
        if cold_target is not None:
            met.append(cold >= cold_target)
            line += f"; {verdict(cold, cold_target)}"
        print(line)
        if epochs > 1:
            print(f"  later epochs / naive = {med['later'] / med['naive']:.1f}x")
        whole = med["whole"] / med["naive"]
        print(f"  whole run / naive = {whole:.1f}x; {verdict(whole, 3)}")
        vs_model = med["whole"] / model_med
        first = med["first"] / model_med
        print(f"  loader / model = {vs_model:.1f}x (first epoch {first:.1f}x); {verdict(vs_model, 2)}")
        met += [whole >= 3, vs_model >= 2]
    return met


GRIDS = {"32x64": (32, 64), "361x720": (361, 720)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument(
        "--epochs", type=int, default=12, help="epochs per run (configs/mixed.yaml trains 12)"
    )
    parser.add_argument(
        "--full-inits",
        type=int,
        default=24,
        help="init times of the 361 x 720 training period (samples: one fewer)",
    )
    parser.add_argument("--grids", nargs="+", choices=list(GRIDS), default=list(GRIDS))
    parser.add_argument("--formats", nargs="+", choices=["netcdf", "zarr"], default=["netcdf", "zarr"])
    parser.add_argument(
        "--data", type=Path, default=None, help="folder keeping the synthetic files between runs"
    )
    args = parser.parse_args()
    print(
        f"env: {os.cpu_count()} cores, torch {torch.__version__} on {torch.get_num_threads()} threads, "
        f"OMP_NUM_THREADS={os.environ.get('OMP_NUM_THREADS', 'unset')}"
    )
    met = []
    with tempfile.TemporaryDirectory() as tmp:
        root = args.data or Path(tmp)
        for grid in args.grids:
            n_lat, n_lon = GRIDS[grid]
            full = grid == "361x720"
            days = 2 * (args.full_inits - 1) + 16 if full else 380
            data = {fmt: make_data(root / grid / fmt, n_lat, n_lon, days, fmt) for fmt in args.formats}
            batch, steps = (1, 1) if full else (8, 20)
            met += compare(grid, data, batch, args.epochs, args.repeats, steps, 2.0 if full else None)
    print(f"targets met: {sum(met)} of {len(met)}")


if __name__ == "__main__":
    main()
