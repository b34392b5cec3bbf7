"""``ensml benchmark``: train every model on the embedded dataset and compare them in one table.

Data come from one of two generators, generated once into ``data_dir`` and reused when the
stored generator options match: the synthetic ensemble with a known oracle
(:func:`ensml.data.synth.generate.synth`, ``synth`` options: the default) or the physics testbed,
a Held–Suarez dynamical core without one (:func:`ensml.data.physics.generate.physics`,
``physics`` options; no oracle, so no per-point bounds, gap closed or event columns: the table
reports skill against the raw ensemble and local EMOS, spread/skill and rank-histogram flatness,
:mod:`ensml.experiments.benchmark_calibration`, and the map of where the best network loses to
local EMOS, :mod:`ensml.experiments.benchmark_maps`); see :mod:`ensml.experiments.benchmark_data`.
Every model sees the same :class:`EnsembleDataModule`, hence the same splits, subsets and
normalisation statistics; each is seeded with ``seed`` before it is built and before it is
trained, so the same configuration gives the same table on CPU (apart from the wall-clock
column ``train_s``). Scoring goes through :func:`ensml.verify.evaluate.crps_rows` and
:func:`~ensml.verify.evaluate.spread_scores`, the code behind ``ensml evaluate``; see
:mod:`ensml.experiments.benchmark_score`.
"""

from __future__ import annotations

import logging
import os
import time
from pathlib import Path
from typing import Literal

import lightning as L
import numpy as np
import pandas as pd
import torch
from jsonargparse.typing import NonNegativeInt, PositiveInt
from lightning.pytorch.callbacks import EarlyStopping

from ensml.data.datamodule import EnsembleDataModule
from ensml.data.open import open_forecast
from ensml.data.outputs import OutputFolder
from ensml.data.weights import latitude_weights
from ensml.errors import EnsmlError
from ensml.experiments.benchmark_calibration import LOCAL_EMOS
from ensml.experiments.benchmark_data import choose_source, ensure_data, kind_of
from ensml.experiments.benchmark_maps import MAP_NAME, best_network, crps_difference_map
from ensml.experiments.benchmark_score import BENCHMARK_NAMES, Scored, benchmark_files, score_all, summarise
from ensml.experiments.bound import BOUND_NAME, SPREAD_BOUND_NAME, spread_bound, subset_bound
from ensml.experiments.options import DEFAULT_MODELS, ModelSpec, PhysicsOptions, SynthOptions
from ensml.experiments.quality import QualityLog
from ensml.names import INIT_TIME, LEAD_TIME, LEVEL, MEMBER
from ensml.progress import Progress, note, seconds
from ensml.scores.gaussian import crps_gaussian
from ensml.train.emos import fit_emos
from ensml.train.lightning_cli import quiet_lightning
from ensml.train.tasks import EnsembleTask, MixedTask, SpreadTask

EMOS_NAMES = {"global": "global EMOS", "local": "local EMOS"}


def _build(spec: ModelSpec, dm: EnsembleDataModule, seed: int) -> EnsembleTask:
    cls = {"mixed": MixedTask, "spread": SpreadTask}.get(spec.task)
    if cls is None:
        raise EnsmlError(
            f"benchmark model {spec.name!r}: task must be 'mixed' or 'spread', got {spec.task!r}"
        )
    L.seed_everything(seed, verbose=False)
    try:
        return cls.from_data(
            dm, arch=spec.arch, width=spec.width, depth=spec.depth, lr=spec.lr,
            arch_options=spec.arch_options, **(spec.options or {}),
        )  # fmt: skip
    except TypeError as exc:  # an option the task does not take
        raise EnsmlError(f"benchmark model {spec.name!r}: {exc}") from None


def _train_predict(
    task: EnsembleTask, spec: ModelSpec, dm: EnsembleDataModule, seed: int, limit: int | None
) -> tuple[dict[str, np.ndarray], float, QualityLog]:
    log = QualityLog()
    callbacks: list[L.Callback] = [log]
    if spec.patience is not None:
        callbacks.append(EarlyStopping(f"val/{task.quality_name}", patience=spec.patience, check_finite=True))
    trainer = L.Trainer(
        accelerator="cpu", devices=1, max_epochs=spec.max_epochs, deterministic=True, logger=False,
        enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False,
        num_sanity_val_steps=0, limit_train_batches=limit, limit_val_batches=limit, callbacks=callbacks,
        gradient_clip_val=1.0,
    )  # fmt: skip
    L.seed_everything(seed, verbose=False)
    start = time.perf_counter()
    trainer.fit(task, datamodule=dm)
    took = time.perf_counter() - start
    log.restore_best(task)
    out = trainer.predict(task, dataloaders=dm.predict_dataloader())
    pred = {key: torch.cat([o[key] for o in out]).numpy() for key in out[0]}
    return _as_fields(task, pred), took, log


def _as_fields(task: EnsembleTask, pred: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """A Gaussian mixed model's per-variable ``<var>_mean``/``<var>_std`` (N, T, D, H, W) as the
    (N, T·V, D, H, W) lead-major fields ``mean``/``std`` that the tables score."""
    if not isinstance(task, MixedTask) or not task.all_normal:
        return pred
    out = {"index": pred["index"]}
    for param in ("mean", "std"):
        stacked = np.stack([pred[f"{v}_{param}"] for v in task.hparams.variables], axis=2)  # (N, T, V, …)
        out[param] = stacked.reshape(len(stacked), -1, *stacked.shape[3:])
    return out


def _at_targets(x: torch.Tensor, indices: list[int]) -> torch.Tensor:
    """(B, V, L, D, H, W) → (B, T·V, D, H, W) at the target leads, lead-major (as the tasks)."""
    return x[:, :, indices].transpose(1, 2).flatten(1, 2)


def _collect(loader, indices: list[int]) -> dict[str, torch.Tensor]:
    parts: dict[str, list] = {"mean": [], "std": [], "obs": [], "std_m": [], "index": []}
    for b in loader:
        parts["mean"].append(_at_targets(b["mean_k"], indices))
        parts["std"].append(_at_targets(b["std_k"], indices))
        for key in ("obs", "std_m", "index"):
            parts[key].append(b[key])
    return {k: torch.cat(v) for k, v in parts.items()}


def _emos(dm: EnsembleDataModule, modes: list[str], seed: int) -> tuple[dict, dict, dict[str, float], dict]:
    """Fit global/local EMOS on the training split's K-member mean/std; predict the test split.

    Every target lead has its own coefficients (the fields ``F = T × V`` are fitted as separate
    variables). Also returns the validation baselines of time-to-quality, in the tasks' normalised
    ``val/loss`` units: local EMOS's Gaussian CRPS (``mixed``) and the K-member sample std's
    squared error against the M-member spread (``spread``); and the test split's inputs.
    """
    indices = dm.spec.target_indices
    L.seed_everything(seed, verbose=False)
    train, val, test = (_collect(loader(), indices) for loader in (dm.train_dataloader, dm.val_dataloader,
                                                                   dm.predict_dataloader))  # fmt: skip
    weights = torch.tensor(np.cos(np.deg2rad(dm.coords["latitude"])), dtype=torch.float32)
    preds, info = {}, {}
    for mode in dict.fromkeys([*modes, "local"]):
        start = time.perf_counter()
        model = fit_emos(train["mean"], train["std"], train["obs"], mode=mode, weights=weights)
        took = time.perf_counter() - start
        if mode == "local":
            local = model
        if mode not in modes:
            continue
        mu, sigma = model(test["mean"], test["std"])
        name = EMOS_NAMES[mode]
        preds[name] = {"index": test["index"].numpy(), "mean": mu.numpy(), "std": sigma.numpy()}
        info[name] = {"params": sum(p.numel() for p in model.parameters()), "train_s": took}
    # The tasks' val/loss: area-weighted (cell area, mean 1) means of fields scaled by the spread.
    scale = torch.as_tensor(dm.stats["target_scale"]).flatten(0, 1)[None, :, :, None, None]
    w = torch.as_tensor(latitude_weights(dm.coords["latitude"]).values, dtype=torch.float32)[:, None]
    mu, sigma = local(val["mean"], val["std"])
    crps = crps_gaussian(mu / scale, sigma / scale, val["obs"] / scale, check=False)
    baselines = {
        "mixed": float((crps * w).mean()),
        "spread": float((((val["std"] - val["std_m"]) / scale) ** 2 * w).mean()),
    }
    return preds, info, baselines, test


def _bounds(dm: EnsembleDataModule, paths: dict[str, Path], synth: SynthOptions, test: dict) -> dict:
    """The per-point bounds (:mod:`ensml.experiments.bound`) on the test split."""
    spec, index = dm.spec, test["index"].numpy()
    inits = dm.test_set.init_times
    args = (spec.variables, spec.levels, spec.target_leads)
    gauss = subset_bound(synth, inits, index, test["mean"], *args, spec.k)
    fc = open_forecast(str(paths["forecast"]), list(spec.variables))
    fc = fc.sel({INIT_TIME: inits[index], LEAD_TIME: list(spec.target_leads), LEVEL: list(spec.levels)})
    fc = fc.isel({MEMBER: slice(0, spec.k)}).transpose(INIT_TIME, LEAD_TIME, MEMBER, LEVEL, ...)
    shown = np.stack([fc[v].values for v in spec.variables], axis=2)  # (N, T, V, K, D, H, W)
    shown = shown.reshape(len(index), -1, *shown.shape[3:])
    spread = spread_bound(synth, inits, index, shown, *args, spec.members)
    return {BOUND_NAME: gauss, SPREAD_BOUND_NAME: {"kind": "spread", **spread}}


def time_to_quality(log: QualityLog, target: float) -> dict[str, float]:
    """The benchmark's time-to-quality columns from a model's validation history."""
    hit, best = log.first_reaching(target), log.best
    return {
        "epochs": len(log.history),
        "best_epoch": best.epoch + 1 if best else np.nan,
        "val_score": best.val_loss if best else np.nan,
        "baseline_val_score": target,
        "time_to_baseline_s": hit.seconds if hit else np.nan,
        "samples_to_baseline": hit.samples if hit else np.nan,
    }


def benchmark(
    data_dir: str = "data/benchmark",
    synth: SynthOptions | None = None,
    physics: PhysicsOptions | None = None,
    variables: list[str] = ("z", "t"),  # type: ignore[assignment]
    levels: list[float] = (500, 850),  # type: ignore[assignment]
    input_leads: list[int | str] = (0, 12, 24, 36, 48),  # type: ignore[assignment]
    target_leads: int | str | list[int | str] = (24, 48),  # type: ignore[assignment]
    k: PositiveInt = 5,
    member_sampling: Literal["first", "random"] = "random",
    train_period: tuple[str, str] = ("2017-01-01", "2019-06-30"),
    val_period: tuple[str, str] = ("2019-07-01", "2019-12-31"),
    test_period: tuple[str, str] = ("2020-01-01", "2020-12-31"),
    batch_size: PositiveInt = 8,
    models: list[ModelSpec] | None = None,
    emos: list[Literal["global", "local"]] = ("global", "local"),  # type: ignore[assignment]
    limit_train_batches: PositiveInt | None = None,
    seed: NonNegativeInt = 0,
    threads: PositiveInt = 1,
    out_dir: str = "runs/benchmark",
    bound: bool = True,
) -> pd.DataFrame:
    """Train and score every model; write ``benchmark.csv`` and ``benchmark.md`` to ``out_dir``.

    Parameters
    ----------
    data_dir
        Where the embedded dataset lives (generated there if absent).
    synth
        The synthetic data's generator options (``ensml data synth``'s) the dataset must have
        been made with (the default data source).
    physics
        Instead of ``synth`` (not both): the physics testbed's options (a Held–Suarez dynamical
        core; :func:`ensml.data.physics.generate.physics`). It has no oracle: set ``bound:
        false``; the tables have no gap_closed or event columns.
    variables
        Variables every model uses (validated against the dataset before any training).
    levels
        Pressure levels (hPa) every model uses.
    input_leads
        Lead times fed to the models (hours or durations, as ``ensml fit``'s ``data.input_leads``).
    target_leads
        Lead time(s) predicted and scored, each one of ``input_leads``: every network
        and EMOS predicts all of them, and the tables score each.
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
        Output folder: new, empty or one whose ensml ledger records an earlier benchmark
        (:mod:`ensml.data.outputs`); checked before the training, written only at the end,
        the three tables and the map ``crps_difference.png`` (where the best network loses to
        local EMOS) together. Only files the ledger records as the benchmark's are replaced: a
        user's own ``benchmark.md`` in a folder ensml does not own is refused.
    bound
        Also score the per-point bounds (:mod:`ensml.experiments.bound`): the best any
        point-by-point post-processing of the K-member mean could reach, and the best estimate
        of the M-member spread given the K members and the generator's designed spread. Needs
        the synthetic data's oracle: false with ``physics``.

    Returns
    -------
    pandas.DataFrame
        The comparison table (also in ``benchmark.csv``).
    """
    source = choose_source(synth, physics, bound)
    OutputFolder.check(out_dir, "benchmark", names=BENCHMARK_NAMES)  # before the training, not after
    cores = os.cpu_count() or 1
    if not 1 <= int(threads) <= cores:
        raise EnsmlError(f"benchmark: threads {threads} must be between 1 and this machine's {cores} cores")
    torch.set_num_threads(int(threads))
    models = list(DEFAULT_MODELS if models is None else models)
    names = [m.name for m in models] + [EMOS_NAMES[e] for e in emos]
    if len(set(names)) != len(names):
        raise EnsmlError(f"benchmark model names must be distinct, got {names}")
    if k > source.members:
        kind = kind_of(source)
        raise EnsmlError(f"cannot take a subset of k={k} members: {kind} makes {source.members} members")
    paths = ensure_data(Path(data_dir), source)
    dm = EnsembleDataModule(
        str(paths["forecast"]), str(paths["analysis"]), variables=list(variables), levels=list(levels),
        input_leads=list(input_leads), target_leads=target_leads, k=k,
        member_sampling=member_sampling, train_period=train_period, val_period=val_period,
        test_period=test_period, batch_size=batch_size, seed=seed,
    )  # fmt: skip
    dm.setup("fit")
    # Build every model now: a model that does not fit the data fails before any training.
    tasks = [_build(spec, dm, seed) for spec in models]
    plural = "" if len(models) == 1 else "s"
    note(f"benchmark: {len(emos)} EMOS variants and {len(models)} network{plural} to train on {data_dir}")

    quiet_lightning()
    logging.getLogger("lightning.pytorch").setLevel(logging.WARNING)
    extra = (paths, source) if bound else None
    preds, info = _train_all(dm, models, tasks, list(emos), seed, limit_train_batches, extra)
    networks = [f"{m.name} (Gaussian)" for m in models if m.task == "mixed"]
    scored = score_all(dm, paths, preds, info, keep=[*networks, LOCAL_EMOS])
    summary = summarise(scored.table)
    files = benchmark_files(scored.table, summary, len(dm.init_times("test")), oracle="oracle" in paths)
    picture = _difference_map(
        scored, summary, networks, list(levels), coastlines=kind_of(source) != "physics"
    )
    with OutputFolder.open(out_dir, "benchmark", whole=True) as folder:  # tables and map, whole
        for name, text in files.items():
            folder.write_text(name, text)
        if picture is not None:
            folder.write_bytes(MAP_NAME, picture)
    return scored.table


def _difference_map(
    scored: Scored, summary: pd.DataFrame, networks: list[str], levels: list[float], coastlines: bool = True
) -> bytes | None:
    """The map of where the best network loses to local EMOS; None (and a note) without both."""
    best = best_network(summary, networks)
    if best is None:
        note("benchmark: no crps_difference.png (it needs local EMOS and a mixed network)")
        return None
    return crps_difference_map(scored.fields, best, LOCAL_EMOS, levels, scored.lead_h, coastlines)


def _train_all(
    dm: EnsembleDataModule,
    models: list[ModelSpec],
    tasks: list,
    emos: list[str],
    seed: int,
    limit_train_batches: int | None,
    bound: tuple | None,
) -> tuple[dict[str, dict], dict[str, dict]]:
    """Fit the EMOS variants (and the bounds: ``bound`` = (paths, synth options)), train every
    model; their test predictions and information (parameters, time to quality), by name."""
    preds: dict[str, dict] = {}
    info: dict[str, dict] = {}
    with Progress("benchmark", len(models) + 1, "models") as progress:
        progress.describe("EMOS")
        emos_preds, emos_info, baselines, test = _emos(dm, emos, seed)
        preds.update(emos_preds)
        info.update(emos_info)
        if bound is not None:
            preds.update(_bounds(dm, *bound, test))
        progress.advance(f"{' and '.join(emos_info)} fitted in {seconds(progress.lap)}")
        for spec, task in zip(models, tasks):
            progress.describe(spec.name)
            n_params = sum(p.numel() for p in task.parameters())
            pred, took, log = _train_predict(task, spec, dm, seed, limit_train_batches)
            preds[spec.name] = {"kind": spec.task, **pred}
            info[spec.name] = {
                "params": n_params,
                "train_s": took,
                **time_to_quality(log, baselines[spec.task]),
            }
            progress.advance(f"{spec.name} trained in {seconds(took)}")
    return preds, info


__all__ = ["ModelSpec", "PhysicsOptions", "SynthOptions", "benchmark"]
