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
column ``train_s``). Scoring goes through :func:`ensml.verify.rows.crps_rows` and
:func:`~ensml.verify.rows.spread_scores`, the code behind ``ensml evaluate``; see
:mod:`ensml.experiments.benchmark_score`. Each model predicts, and is scored in, each variable's
family (:mod:`ensml.experiments.benchmark_predictions`): a mixed model's ``options.distribution``,
an EMOS variant's ``distribution`` (:mod:`ensml.experiments.benchmark_emos`; plain ``global`` and
``local`` are the variables' default families, Gaussian for z and t). Variables bounded below
(``tp`` and ``si10`` of ``synth.precip_wind`` or the physics testbed's ``si10``) add the share of
negative quantiles, the reliability diagrams and the verdicts of the precipitation-and-wind
targets (:mod:`ensml.experiments.benchmark_events`; ``configs/benchmark/precip_wind.yaml``).
"""

from __future__ import annotations

import logging
import signal
import time
from pathlib import Path
from typing import Literal

import lightning as L
import numpy as np
import pandas as pd
import torch
from jsonargparse.typing import PositiveInt

from ensml.data.datamodule import EnsembleDataModule
from ensml.data.open import open_forecast
from ensml.data.outputs import OutputFolder
from ensml.data.splits import check_periods
from ensml.data.subset import Subset
from ensml.errors import EnsmlError, signal_as_interrupted
from ensml.experiments import benchmark_emos
from ensml.experiments.benchmark_data import choose_source, ensure_data, kind_of
from ensml.experiments.benchmark_emos import EMOS_NAMES, EmosVariant
from ensml.experiments.benchmark_events import verdicts
from ensml.experiments.benchmark_files import BENCHMARK_NAMES, benchmark_files
from ensml.experiments.benchmark_maps import MAP_NAME, best_network, crps_difference_map
from ensml.experiments.benchmark_predictions import from_fields, from_task, gaussian, model_label
from ensml.experiments.benchmark_score import Scored, score_all, summarise
from ensml.experiments.bound import BOUND_NAME, SPREAD_BOUND_NAME, spread_bound, subset_bound
from ensml.experiments.options import (
    DEFAULT_MODELS,
    EmosSpec,
    ModelSpec,
    PhysicsOptions,
    SynthOptions,
    check_threads,
)
from ensml.experiments.quality import QualityLog, quality_trainer
from ensml.names import DEFAULT_K, INIT_TIME, LEAD_TIME, LEVEL, MEMBER
from ensml.progress import Progress, note, seconds
from ensml.seeds import Seed
from ensml.train.lightning_cli import quiet_lightning
from ensml.train.tasks import EnsembleTask, MixedTask, SpreadTask

#: The variables the per-point bounds know (:mod:`ensml.experiments.bound`).
BOUND_VARIABLES = ("z", "t")


def _build(spec: ModelSpec, dm: EnsembleDataModule, seed: int) -> EnsembleTask:
    cls = {"mixed": MixedTask, "spread": SpreadTask}.get(spec.task)
    if cls is None:
        raise EnsmlError(
            f"benchmark model {spec.name!r}: task must be 'mixed' or 'spread', got {spec.task!r}"
        )
    L.seed_everything(seed, verbose=False)
    try:
        task = cls.from_data(
            dm,
            arch=spec.arch,
            width=spec.width,
            depth=spec.depth,
            lr=spec.lr,
            arch_options=spec.arch_options,
            **(spec.options or {}),
        )
        check = getattr(task, "check_data", None)
        if check is not None:  # e.g. a family bounded at 0 for data below 0
            check(dm)
    except TypeError as exc:  # an option the task does not take
        raise EnsmlError(f"benchmark model {spec.name!r}: {exc}") from None
    except EnsmlError as exc:
        raise EnsmlError(f"benchmark model {spec.name!r}: {exc}") from None
    return task


def label(spec: ModelSpec, task: EnsembleTask) -> str:
    """A model's row label: a mixed model's name and family (``U-Net (Gaussian)``), a spread
    model's name."""
    return model_label(spec.name, task.families) if isinstance(task, MixedTask) else spec.name


def _train_predict(
    task: EnsembleTask, spec: ModelSpec, dm: EnsembleDataModule, seed: int, limit: int | None
) -> tuple[dict, float, QualityLog]:
    trainer, log = quality_trainer(task, spec.max_epochs, spec.patience, limit)
    L.seed_everything(seed, verbose=False)
    start = time.perf_counter()
    with signal_as_interrupted(signal.SIGINT):  # not Lightning's "Detected KeyboardInterrupt", exit 1
        trainer.fit(task, datamodule=dm)
        took = time.perf_counter() - start
        log.restore_best(task)
        out = trainer.predict(task, dataloaders=dm.predict_dataloader())
    pred = {key: torch.cat([o[key] for o in out]).numpy() for key in out[0]}
    return from_task(task, pred), took, log


def _bounds(dm: EnsembleDataModule, paths: dict[str, Path], synth: SynthOptions, test: dict) -> dict:
    """The per-point bounds (:mod:`ensml.experiments.bound`) on the test split, of the variables
    they know (z and t; none of the others: their rows have no bound)."""
    spec, index = dm.spec, test["index"].numpy()
    variables = [v for v in spec.variables if v in BOUND_VARIABLES]
    if not variables:
        note(f"benchmark: no per-point bounds (they know {', '.join(BOUND_VARIABLES)} only)")
        return {}
    n_var, n_leads = len(spec.variables), len(spec.target_leads)
    fields = [t * n_var + spec.variables.index(v) for t in range(n_leads) for v in variables]
    inits = dm.test_set.init_times
    args = (variables, spec.levels, spec.target_leads)
    gauss = subset_bound(synth, inits, index, test["mean"][:, fields], *args, spec.k)
    fc = open_forecast(str(paths["forecast"]), variables)
    fc = fc.sel({INIT_TIME: inits[index], LEAD_TIME: list(spec.target_leads), LEVEL: list(spec.levels)})
    fc = Subset.first(spec.k).take(fc).transpose(INIT_TIME, LEAD_TIME, MEMBER, LEVEL, ...)
    shown = np.stack([fc[v].values for v in variables], axis=2)  # (N, T, V, K, D, H, W)
    shown = shown.reshape(len(index), -1, *shown.shape[3:])
    spread = spread_bound(synth, inits, index, shown, *args, spec.members)
    return {
        model_label(BOUND_NAME, ["normal"]): gaussian(gauss["index"], gauss["mean"], gauss["std"], variables),
        SPREAD_BOUND_NAME: from_fields(spread["index"], {"std": spread["std"]}, variables),
    }


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
    k: PositiveInt = DEFAULT_K,
    member_sampling: Literal["first", "random"] = "random",
    train_period: tuple[str, str] = ("2017-01-01", "2019-06-30"),
    val_period: tuple[str, str] = ("2019-07-01", "2019-12-31"),
    test_period: tuple[str, str] = ("2020-01-01", "2020-12-31"),
    batch_size: PositiveInt = 8,
    models: list[ModelSpec] | None = None,
    emos: list[Literal["global", "local"] | EmosSpec] = ("global", "local"),  # type: ignore[assignment]
    limit_train_batches: PositiveInt | None = None,
    seed: Seed = 0,
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
        EMOS variants fitted beside them: ``global`` and ``local`` (every variable in its default
        family: Gaussian for z and t, csg0 for ``tp``, truncated normal for ``si10``), or
        :class:`EmosSpec` entries such as ``{mode: local, distribution: {tp: normal, si10:
        normal}}`` (a Gaussian EMOS of every variable); see :mod:`ensml.experiments.benchmark_emos`.
        The skill against local EMOS refers to the local one in the default families, else the
        first local one.
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
    torch.set_num_threads(check_threads(threads))
    models = list(DEFAULT_MODELS if models is None else models)
    emos_variants = benchmark_emos.variants(list(emos), list(variables))
    _distinct([m.name for m in models] + [v.label for v in emos_variants])
    if k > source.members:
        kind = kind_of(source)
        raise EnsmlError(f"cannot take a subset of k={k} members: {kind} makes {source.members} members")
    check_periods({"train": train_period, "val": val_period, "test": test_period})  # before making data
    paths = ensure_data(Path(data_dir), source)
    dm = EnsembleDataModule(
        str(paths["forecast"]),
        str(paths["analysis"]),
        variables=list(variables),
        levels=list(levels),
        input_leads=list(input_leads),
        target_leads=target_leads,
        k=k,
        member_sampling=member_sampling,
        train_period=train_period,
        val_period=val_period,
        test_period=test_period,
        batch_size=batch_size,
        seed=seed,
    )
    dm.setup("fit")
    # Build every model now: a model that does not fit the data fails before any training.
    tasks = [_build(spec, dm, seed) for spec in models]
    labels = [label(spec, task) for spec, task in zip(models, tasks)]
    _distinct(labels + [v.label for v in emos_variants])
    plural = "" if len(models) == 1 else "s"
    note(f"benchmark: {len(emos)} EMOS variants and {len(models)} network{plural} to train on {data_dir}")

    quiet_lightning()
    logging.getLogger("lightning.pytorch").setLevel(logging.WARNING)
    extra = (paths, source) if bound else None
    preds, info = _train_all(dm, models, tasks, labels, emos_variants, seed, limit_train_batches, extra)
    networks = [name for name, task in zip(labels, tasks) if isinstance(task, MixedTask)]
    reference = benchmark_emos.reference(emos_variants, list(variables)).label
    scored = score_all(dm, paths, preds, info, keep=[*networks, reference], reference=reference)
    summary = summarise(scored.table)
    best = best_network(summary, networks)
    targets = verdicts(scored.table, summary, scored.reliability, best, reference)
    if not scored.reliability.empty:
        for line in targets:
            note(f"benchmark: {line}")
    n_inits, oracle = len(dm.init_times("test")), "oracle" in paths
    files = benchmark_files(scored.table, summary, n_inits, oracle, scored.reliability, targets)
    picture = _difference_map(scored, best, reference, list(levels), coastlines=kind_of(source) != "physics")
    with OutputFolder.open(out_dir, "benchmark", whole=True) as folder:  # tables and map, whole
        for name, text in files.items():
            folder.write_text(name, text)
        if picture is not None:
            folder.write_bytes(MAP_NAME, picture)
    return scored.table


def _distinct(names: list[str]) -> None:
    if len(set(names)) != len(names):
        raise EnsmlError(f"benchmark model names must be distinct, got {names}")


def _difference_map(
    scored: Scored, best: str | None, reference: str, levels: list[float], coastlines: bool = True
) -> bytes | None:
    """The map of where the best network loses to local EMOS; None (and a note) without both."""
    if best is None:
        note("benchmark: no crps_difference.png (it needs local EMOS and a mixed network)")
        return None
    return crps_difference_map(scored.fields, best, reference, levels, scored.lead_h, coastlines)


def _listing(names: list[str]) -> str:
    """``a``, ``a and b``, ``a, b and c``."""
    return " and ".join([", ".join(names[:-1]), names[-1]]) if len(names) > 1 else "".join(names)


def _train_all(
    dm: EnsembleDataModule,
    models: list[ModelSpec],
    tasks: list,
    labels: list[str],
    emos: list[EmosVariant],
    seed: int,
    limit_train_batches: int | None,
    bound: tuple | None,
) -> tuple[dict[str, dict], dict[str, dict]]:
    """Fit the EMOS variants (and the bounds: ``bound`` = (paths, synth options)), train every
    model; their test predictions and information (parameters, time to quality), by row label."""
    preds: dict[str, dict] = {}
    info: dict[str, dict] = {}
    with Progress("benchmark", len(models) + 1, "models") as progress:
        progress.describe("EMOS")
        emos_preds, emos_info, baselines, test = benchmark_emos.fit_all(dm, emos, seed)
        preds.update(emos_preds)
        info.update(emos_info)
        if bound is not None:
            preds.update(_bounds(dm, *bound, test))
        fitted = _listing([name.removesuffix(" (Gaussian)") for name in emos_info])
        progress.advance(f"{fitted} fitted in {seconds(progress.lap)}")
        for spec, task, name in zip(models, tasks, labels):
            progress.describe(spec.name)
            n_params = sum(p.numel() for p in task.parameters())
            preds[name], took, log = _train_predict(task, spec, dm, seed, limit_train_batches)
            info[name] = {
                "params": n_params,
                "train_s": took,
                **time_to_quality(log, baselines[spec.task]),
            }
            progress.advance(f"{spec.name} trained in {seconds(took)}")
    return preds, info


__all__ = ["EMOS_NAMES", "EmosSpec", "ModelSpec", "PhysicsOptions", "SynthOptions", "benchmark", "label"]
