"""``ensml benchmark``: train every model on the embedded dataset and compare them in one table.

Data come from :func:`ensml.data.synth.synth` (generated once into ``data_dir``, reused when the
stored generator options match). Every model sees the same :class:`EnsembleDataModule`, hence the
same splits, subsets and normalisation statistics; each is seeded with ``seed`` before it is built
and before it is trained, so the same configuration gives the same table on CPU (apart from the
wall-clock column ``train_s``). Scoring goes through :func:`ensml.eval.evaluate.crps_rows` and
:func:`~ensml.eval.evaluate.spread_scores`, the code behind ``ensml evaluate``; see
:mod:`ensml.experiments.benchmark_score`.
"""

from __future__ import annotations

import logging
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Literal

import lightning as L
import numpy as np
import pandas as pd
import torch
import xarray as xr

from ensml.data.datamodule import EnsembleDataModule
from ensml.data.outdir import check_output_folder, replace_folder
from ensml.data.synth import synth as make_synth
from ensml.errors import EnsmlError
from ensml.experiments.benchmark_score import BENCHMARK_NAMES, score_all, summarise, write_tables
from ensml.models.emos import fit_emos
from ensml.progress import Progress, note, seconds
from ensml.train.tasks import EnsembleTask, MixedTask, SpreadTask


@dataclass
class SynthOptions:
    """Options of the embedded dataset (see :func:`ensml.data.synth.synth`)."""

    n_lat: int = 32
    n_lon: int = 64
    levels: list[int] = field(default_factory=lambda: [500, 850])
    lead_hours: list[int] = field(default_factory=lambda: [0, 12, 24, 36, 48])
    members: int = 10
    start: str = "2017-01-01"
    end: str = "2020-12-31"
    every_days: int = 2
    storms_per_year: float = 6.0
    seed: int = 0


@dataclass
class ModelSpec:
    """One neural model of the benchmark: a task, a network and its training budget."""

    name: str
    task: Literal["mixed", "spread"] = "mixed"
    arch: str = "unet3d"
    width: int = 16
    depth: int = 3
    lr: float = 2e-3
    max_epochs: int = 8
    arch_options: dict | None = None


DEFAULT_MODELS = [
    ModelSpec("U-Net mixed", "mixed", "unet3d"),
    ModelSpec("temporal U-Net mixed", "mixed", "unet3d_time"),
    ModelSpec("U-Net spread", "spread", "unet3d"),
    ModelSpec("temporal U-Net spread", "spread", "unet3d_time"),
]
EMOS_NAMES = {"global": "global EMOS", "local": "local EMOS"}


def _ensure_data(data_dir: Path, opts: SynthOptions) -> dict[str, Path]:
    """Reuse ``data_dir`` if it holds a dataset made with ``opts``; else generate it there."""
    paths = {name: data_dir / f"{name}.nc" for name in ("forecast", "analysis", "oracle")}
    if not all(p.is_file() for p in paths.values()):
        return make_synth(data_dir, **asdict(opts), overwrite=True)
    with xr.open_dataset(paths["forecast"]) as ds:
        attrs = dict(ds.attrs)
    for key, want in asdict(opts).items():
        have = attrs.get(f"synth_{key}")
        same = np.array_equal(np.atleast_1d(have), np.atleast_1d(want)) if have is not None else False
        if not same:
            have = np.asarray(have).tolist() if have is not None else "unknown"
            raise EnsmlError(
                f"benchmark data_dir {data_dir} holds data made with synth.{key}={have}, the config "
                f"asks for {key}={want}: remove it or choose another data_dir"
            )
    return paths


def _build(spec: ModelSpec, dm: EnsembleDataModule, seed: int) -> EnsembleTask:
    hp = dm.hparams
    cls = {"mixed": MixedTask, "spread": SpreadTask}.get(spec.task)
    if cls is None:
        raise EnsmlError(
            f"benchmark model {spec.name!r}: task must be 'mixed' or 'spread', got {spec.task!r}"
        )
    L.seed_everything(seed, verbose=False)
    task = cls(
        variables=list(hp.variables), levels=list(hp.levels), input_lead_hours=list(hp.input_lead_hours),
        target_lead_hours=hp.target_lead_hours, k=hp.k, arch=spec.arch, width=spec.width,
        depth=spec.depth, lr=spec.lr, arch_options=spec.arch_options,
    )  # fmt: skip
    task.set_stats(dm.stats, dm.coords["latitude"])
    return task


def _train_predict(
    task: EnsembleTask, spec: ModelSpec, dm: EnsembleDataModule, seed: int, limit: int | None
) -> tuple[dict[str, np.ndarray], float]:
    trainer = L.Trainer(
        accelerator="cpu", devices=1, max_epochs=spec.max_epochs, deterministic=True, logger=False,
        enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False,
        limit_val_batches=0, num_sanity_val_steps=0, limit_train_batches=limit,
    )  # fmt: skip
    L.seed_everything(seed, verbose=False)
    start = time.perf_counter()
    trainer.fit(task, datamodule=dm)
    took = time.perf_counter() - start
    out = trainer.predict(task, dataloaders=dm.predict_dataloader())
    pred = {key: torch.cat([o[key] for o in out]).numpy() for key in out[0]}
    return pred, took


def _emos(dm: EnsembleDataModule, modes: list[str], seed: int) -> tuple[dict, dict]:
    """Fit global/local EMOS on the training split's K-member mean/std; predict the test split."""
    ti = dm.spec.target_index

    def collect(loader) -> dict[str, torch.Tensor]:
        parts: dict[str, list] = {"mean": [], "std": [], "obs": [], "index": []}
        for b in loader:
            parts["mean"].append(b["mean_k"][:, :, ti])
            parts["std"].append(b["std_k"][:, :, ti])
            parts["obs"].append(b["obs"])
            parts["index"].append(b["index"])
        return {k: torch.cat(v) for k, v in parts.items()}

    L.seed_everything(seed, verbose=False)
    train, test = collect(dm.train_dataloader()), collect(dm.predict_dataloader())
    weights = torch.tensor(np.cos(np.deg2rad(dm.coords["latitude"])), dtype=torch.float32)
    preds, info = {}, {}
    for mode in modes:
        start = time.perf_counter()
        model = fit_emos(train["mean"], train["std"], train["obs"], mode=mode, weights=weights)
        took = time.perf_counter() - start
        mu, sigma = model(test["mean"], test["std"])
        name = EMOS_NAMES[mode]
        preds[name] = {"index": test["index"].numpy(), "mean": mu.numpy(), "std": sigma.numpy()}
        info[name] = {"params": sum(p.numel() for p in model.parameters()), "train_s": took}
    return preds, info


def benchmark(
    data_dir: str = "data/benchmark",
    synth: SynthOptions | None = None,
    variables: list[str] = ("z", "t"),  # type: ignore[assignment]
    levels: list[float] = (500, 850),  # type: ignore[assignment]
    input_lead_hours: list[int] = (0, 12, 24, 36, 48),  # type: ignore[assignment]
    target_lead_hours: int = 48,
    k: int = 5,
    member_sampling: Literal["first", "random"] = "random",
    train_period: tuple[str, str] = ("2017-01-01", "2019-06-30"),
    val_period: tuple[str, str] = ("2019-07-01", "2019-12-31"),
    test_period: tuple[str, str] = ("2020-01-01", "2020-12-31"),
    batch_size: int = 8,
    models: list[ModelSpec] | None = None,
    emos: list[Literal["global", "local"]] = ("global", "local"),  # type: ignore[assignment]
    limit_train_batches: int | None = None,
    seed: int = 0,
    threads: int = 1,
    out_dir: str = "runs/benchmark",
) -> pd.DataFrame:
    """Train and score every model; write ``benchmark.csv`` and ``benchmark.md`` to ``out_dir``.

    Parameters
    ----------
    data_dir
        Where the embedded dataset lives (generated there if absent).
    synth
        The generator options (``ensml data synth``'s) the dataset must have been made with.
    variables
        Variables every model uses (validated against the dataset before any training).
    levels
        Pressure levels (hPa) every model uses.
    input_lead_hours
        Lead times (h) fed to the models.
    target_lead_hours
        Lead time (h) predicted and scored; one of ``input_lead_hours``.
    k
        Members given to the models (members 0 … k-1 when scoring).
    member_sampling
        ``first`` or ``random`` training subsets (see :class:`EnsembleDataModule`).
    train_period
        ``[start, end]`` dates of the training split.
    val_period
        ``[start, end]`` dates of the validation split.
    test_period
        ``[start, end]`` dates of the test split, which the table scores.
    batch_size
        Training batch size.
    models
        Neural models (:class:`ModelSpec`); default: U-Net and temporal U-Net, mixed and spread.
    emos
        EMOS variants fitted beside them (``global``, ``local``).
    limit_train_batches
        Cap on training batches per epoch (smoke runs).
    seed
        Seed of sampling and of every model's initialisation and training.
    threads
        torch CPU threads. One is the fastest on a shared machine (threads spinning against
        other processes' load cost up to 10×) and fixes the reduction order: keep it fixed when
        comparing tables.
    out_dir
        Output folder: new, empty or an earlier benchmark's; replaced as a whole by the tables
        at the end, nothing before.

    Returns
    -------
    pandas.DataFrame
        The comparison table (also in ``benchmark.csv``).
    """
    check_output_folder(out_dir, "benchmark", BENCHMARK_NAMES)  # before the training, not after
    synth = synth or SynthOptions()
    torch.set_num_threads(max(1, int(threads)))
    models = list(DEFAULT_MODELS if models is None else models)
    names = [m.name for m in models] + [EMOS_NAMES[e] for e in emos]
    if len(set(names)) != len(names):
        raise EnsmlError(f"benchmark model names must be distinct, got {names}")
    if k > synth.members:
        raise EnsmlError(f"cannot take a subset of k={k} members: synth makes {synth.members} members")
    paths = _ensure_data(Path(data_dir), synth)
    dm = EnsembleDataModule(
        str(paths["forecast"]), str(paths["analysis"]), variables=list(variables), levels=list(levels),
        input_lead_hours=list(input_lead_hours), target_lead_hours=target_lead_hours, k=k,
        member_sampling=member_sampling, train_period=train_period, val_period=val_period,
        test_period=test_period, batch_size=batch_size, seed=seed,
    )  # fmt: skip
    dm.setup("fit")
    # Build every model now: a model that does not fit the data fails before any training.
    tasks = [_build(spec, dm, seed) for spec in models]
    plural = "" if len(models) == 1 else "s"
    note(f"benchmark: {len(emos)} EMOS variants and {len(models)} network{plural} to train on {data_dir}")

    preds: dict[str, dict] = {}
    info: dict[str, dict] = {}
    logging.getLogger("lightning.pytorch").setLevel(logging.WARNING)
    with Progress("benchmark", len(models) + 1, "models") as progress:
        progress.describe("EMOS")
        emos_preds, emos_info = _emos(dm, list(emos), seed)
        preds.update(emos_preds)
        info.update(emos_info)
        progress.advance(f"{' and '.join(emos_info)} fitted in {seconds(progress.lap)}")
        for spec, task in zip(models, tasks):
            progress.describe(spec.name)
            n_params = sum(p.numel() for p in task.parameters())
            pred, took = _train_predict(task, spec, dm, seed, limit_train_batches)
            preds[spec.name] = {"kind": spec.task, **pred}
            info[spec.name] = {"params": n_params, "train_s": took}
            progress.advance(f"{spec.name} trained in {seconds(took)}")

    table = score_all(dm, paths, preds, info)
    with replace_folder(out_dir, "benchmark", BENCHMARK_NAMES) as folder:
        write_tables(folder, table, summarise(table), n_inits=len(dm.init_times("test")))
    return table


__all__ = ["ModelSpec", "SynthOptions", "benchmark"]
