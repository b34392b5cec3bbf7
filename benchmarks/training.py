"""Training throughput: Lightning vs a plain torch loop, and the loader vs the model.

Run by hand (numbers go in closing notes; tests never time anything)::

    python benchmarks/training.py [--data data/synth] [--batches 30]

Same model, data, batch size and optimiser on both paths. Prints one line per comparison.
"""

from __future__ import annotations

import argparse
import time
import warnings
from pathlib import Path

import lightning as L
import torch

from ensml.data.datamodule import EnsembleDataModule
from ensml.data.synth.generate import synth
from ensml.train.tasks import MixedTask

warnings.filterwarnings("ignore")


def make(data: Path, batch_size: int, workers: int) -> tuple[EnsembleDataModule, MixedTask]:
    dm = EnsembleDataModule(
        data / "forecast.nc", data / "analysis.nc", batch_size=batch_size, num_workers=workers
    )
    dm.setup("fit")
    torch.manual_seed(0)
    task = MixedTask(width=16, depth=3)
    task.set_stats(dm.stats, dm.coords["latitude"])
    return dm, task


def loader_rate(dm: EnsembleDataModule, batches: int) -> float:
    it = iter(dm.train_dataloader())
    next(it)  # workers start, files open
    t = time.perf_counter()
    n = sum(next(it)["mean_k"].shape[0] for _ in range(batches))
    return n / (time.perf_counter() - t)


def model_rate(task: MixedTask, batch: dict, steps: int) -> float:
    opt = torch.optim.AdamW(task.parameters(), lr=1e-3)
    for i in range(steps + 2):
        if i == 2:
            t = time.perf_counter()
        loss = task.loss(batch)
        opt.zero_grad()
        loss.backward()
        opt.step()
    return steps * batch["mean_k"].shape[0] / (time.perf_counter() - t)


def plain_rate(dm: EnsembleDataModule, task: MixedTask, batches: int) -> float:
    opt = torch.optim.AdamW(task.parameters(), lr=1e-3)
    it = iter(dm.train_dataloader())
    n, t = 0, None
    for i, batch in enumerate(it):
        if i == 2:
            t, n = time.perf_counter(), 0
        loss = task.loss(batch)
        opt.zero_grad()
        loss.backward()
        opt.step()
        n += batch["mean_k"].shape[0]
        if i == batches + 1:
            break
    return n / (time.perf_counter() - t)


class Timer(L.Callback):
    def __init__(self) -> None:
        self.n, self.t0 = 0, None

    def on_train_batch_start(self, trainer, module, batch, idx) -> None:
        if idx == 2:
            self.t0, self.n = time.perf_counter(), 0

    def on_train_batch_end(self, trainer, module, outputs, batch, idx) -> None:
        self.n += batch["mean_k"].shape[0]
        self.t1 = time.perf_counter()

    @property
    def rate(self) -> float:
        return self.n / (self.t1 - self.t0)


def lightning_rate(dm: EnsembleDataModule, task: MixedTask, batches: int) -> float:
    timer = Timer()
    trainer = L.Trainer(
        accelerator="cpu",
        max_epochs=1,
        limit_train_batches=batches + 2,
        limit_val_batches=0,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        callbacks=[timer],
    )
    trainer.fit(task, datamodule=dm)
    return timer.rate


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, default=Path("data/synth"))
    parser.add_argument("--batches", type=int, default=30)
    parser.add_argument("--batch-size", type=int, default=8)
    args = parser.parse_args()
    if not (args.data / "forecast.nc").is_file():
        synth(args.data)
    print(f"env: torch {torch.__version__}, {torch.get_num_threads()} threads; MixedTask unet3d w16 d3")
    dm, task = make(args.data, args.batch_size, 0)
    batch = next(iter(dm.train_dataloader()))
    shape = "x".join(map(str, batch["mean_k"].shape[-2:]))
    model = model_rate(task, batch, args.batches)
    for workers in (0, 1):
        dmw, _ = make(args.data, args.batch_size, workers)
        rate = loader_rate(dmw, args.batches)
        print(
            f"loader {shape} workers={workers}: {rate:.1f} samples/s vs model consumption "
            f"{model:.1f} samples/s -> {rate / model:.1f}x headroom"
        )
    dm, task = make(args.data, args.batch_size, 0)
    plain = plain_rate(dm, task, args.batches)
    dm, task = make(args.data, args.batch_size, 0)
    light = lightning_rate(dm, task, args.batches)
    print(
        f"train {shape} batch {args.batch_size}: lightning {light:.1f} samples/s, plain torch {plain:.1f} "
        f"samples/s -> {light / plain:.2f}x"
    )
    print(
        f"train {shape}: plain torch loop {plain:.1f} samples/s vs model alone (no loader) {model:.1f} "
        f"samples/s -> {plain / model:.0%} of the model-bound rate"
    )


if __name__ == "__main__":
    main()
