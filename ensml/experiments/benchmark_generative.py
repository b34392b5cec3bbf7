"""``ensml benchmark`` with ``generative``: generated members against the two-step methods, as fields.

A benchmark config with a ``generative`` section (``configs/benchmark/generative.yaml``) trains,
on the synthetic data (``synth``) or the physics testbed (``physics``):

* the best parametric network (``parametric``, a :class:`~ensml.train.tasks.MixedTask`: per-point
  distributions in each variable's family), whose margins feed every two-step method
  (:mod:`ensml.experiments.benchmark_generative_members`): ECC-Q, the Schaake shuffle and a
  Gaussian copula;
* the generative network (``generative``, :class:`~ensml.train.generative.GenerativeTask`);

and compares on the test period, at every target lead, variable and level, with N members each
(``members``; default the raw ensemble's M): the raw ensemble, the raw subset, the three
two-step methods, the generated members and, on the synthetic data, the oracle's members drawn
with the generator's true spatial correlation (``synth.oracle_members``). ``members`` may list
several N (``[10, 50]``): the two-step methods and the generator then make each N in turn, in a
block of rows of their own (the raw and oracle rows only in the first), because the standard
ensemble scores of N random draws carry a sampling term of order 1/N that quantile members do
not, and the generator's N is free. The scores are those of
``evaluate --multivariate`` over the whole field (:func:`ensml.verify.multivariate.field_scores`):
energy score, variogram score (p = 0.5), the flatness of the rank histograms of area means and
band depths, the zonal spectrum error; each skill is over ECC-Q with its 95 % block-bootstrap
interval and Diebold–Mariano p. Beside them, the per-point CRPS: the parametric network's closed
form, and the fair CRPS of each set of members (the unbiased CRPS of the distribution they are
drawn from: N members are not penalised for being N).

Writes ``benchmark.csv`` (every row; ``draws`` the N of its block), ``benchmark.md`` (per N, the
verdicts of the generated-members issue's targets and a table per variable and level) and, per
variable, ``members_<var>.png`` (four generated members beside the truth and four ECC-Q members)
and ``rank_histograms_<var>.png`` (the first N) to ``out_dir``, together at the end.
"""

from __future__ import annotations

import logging
from pathlib import Path

import lightning as L
import pandas as pd
import torch
from jsonargparse.typing import NonNegativeFloat, PositiveInt

from ensml.data.datamodule import EnsembleDataModule
from ensml.data.outputs import OutputFolder
from ensml.errors import EnsmlError
from ensml.experiments import benchmark_generative_members as two_step
from ensml.experiments.benchmark_data import choose_source, ensure_data, kind_of
from ensml.experiments.benchmark_generative_cells import draw_cells
from ensml.experiments.benchmark_generative_page import figures, page, table_rows
from ensml.experiments.options import GenerativeSpec, ModelSpec, PhysicsOptions, SynthOptions, check_threads
from ensml.experiments.quality import fit_best
from ensml.names import (
    DEFAULT_K,
)
from ensml.progress import Progress, seconds
from ensml.seeds import Seed
from ensml.train.generative import GenerativeTask
from ensml.train.lightning_cli import quiet_lightning
from ensml.train.tasks import EnsembleTask, MixedTask

TABLE, PAGE = "benchmark.csv", "benchmark.md"


def benchmark_generative(
    generative: GenerativeSpec,
    data_dir: str = "data/benchmark-generative",
    synth: SynthOptions | None = None,
    physics: PhysicsOptions | None = None,
    variables: list[str] = ("z", "t"),  # type: ignore[assignment]
    levels: list[float] = (500, 850),  # type: ignore[assignment]
    input_leads: list[int | str] = (0, 24, 48),  # type: ignore[assignment]
    target_leads: list[int | str] = (48,),  # type: ignore[assignment]
    k: PositiveInt = DEFAULT_K,
    train_period: tuple[str, str] = ("2017-01-01", "2019-06-30"),
    val_period: tuple[str, str] = ("2019-07-01", "2019-12-31"),
    test_period: tuple[str, str] = ("2020-01-01", "2020-12-31"),
    batch_size: PositiveInt = 8,
    parametric: ModelSpec | None = None,
    members: PositiveInt | list[PositiveInt] | None = None,
    copula_shrinkage: NonNegativeFloat | None = None,
    limit_train_batches: PositiveInt | None = None,
    seed: Seed = 0,
    threads: PositiveInt = 1,
    out_dir: str = "runs/benchmark-generative",
) -> pd.DataFrame:
    """Train the generative and the best parametric network; score every method's members as fields.

    Parameters
    ----------
    generative
        The generative network (:class:`~ensml.experiments.options.GenerativeSpec`): what makes a
        benchmark config a generative benchmark.
    data_dir
        Where the data live (generated there if absent, reused while the generator's options match).
    synth
        The synthetic data's options (the default source); ``oracle_members: N`` also draws the
        oracle's members, the row no method can beat.
    physics
        Instead of ``synth``: the physics testbed's options (its truth run is the analysis; no oracle).
    variables, levels, input_leads, target_leads, k
        What the networks read and predict (as ``ensml fit``'s data section): the first ``k``
        members at the input leads.
    train_period, val_period, test_period
        ``[start, end]`` init dates: training, validation (early stopping, and the Gaussian
        copula's correlation), scores.
    batch_size
        Samples per training batch.
    parametric
        The parametric network whose margins the two-step methods share (default: the mixed
        U-Net with location inputs and the per-point layer, 8 epochs).
    members
        Members of every method but the raw ones (default: the raw ensemble's M); a list scores
        the two-step methods and the generator at each N in turn, the first N beside the raw and
        oracle rows and in the figures.
    copula_shrinkage
        Weight of the identity in the Gaussian copula's correlation matrix (0: the sample
        correlation); None: Schäfer & Strimmer's optimal weight
        (:func:`ensml.postprocess.copulas.fit_gaussian_copula`).
    limit_train_batches
        Batches per epoch (the tests' smallest runs); None: all.
    seed
        Seed of the networks' initialisation and batches and of every random draw.
    threads
        torch CPU threads (keep it fixed when comparing ``fit_s``).
    out_dir
        Output folder: new, empty or an earlier benchmark's; written only at the end.

    Returns
    -------
    pandas.DataFrame
        The table of ``benchmark.csv``.
    """
    source = choose_source(synth, physics, bound=False)
    variables = list(variables)
    parametric = parametric or ModelSpec(
        "parametric U-Net", options={"location_inputs": True, "local_affine": True}
    )
    if parametric.task != "mixed":
        raise EnsmlError(
            f"benchmark parametric: task must be 'mixed' (per-point margins), got {parametric.task!r}"
        )
    OutputFolder.check(out_dir, "benchmark", names=[TABLE, PAGE])  # before the data and the fits
    requested = _member_counts(members)
    torch.set_num_threads(check_threads(threads))
    linked = dict(variables=variables, levels=list(levels), input_leads=list(input_leads), k=k)
    linked["target_leads"] = list(target_leads)
    generative_spec = ModelSpec(
        generative.name,
        width=generative.width,
        depth=generative.depth,
        lr=generative.lr,
        max_epochs=generative.max_epochs,
        patience=generative.patience,
    )
    for cls, spec, extra in (
        (MixedTask, parametric, None),
        (GenerativeTask, generative_spec, generative.options),
    ):
        _build(cls, spec, None, seed, extra, linked)  # the options checked before any data is made
    paths = ensure_data(Path(data_dir), source)
    dm = EnsembleDataModule(
        str(paths["forecast"]),
        str(paths["analysis"]),
        variables=variables,
        levels=list(levels),
        input_leads=list(input_leads),
        target_leads=list(target_leads),
        k=k,
        train_period=tuple(train_period),
        val_period=tuple(val_period),
        test_period=tuple(test_period),
        batch_size=batch_size,
        seed=seed,
    )
    dm.setup("fit")
    counts = requested or [int(dm.spec.members)]
    n = max(counts)
    if dm.init_times("train").size < n:
        raise EnsmlError(
            f"benchmark: the Schaake shuffle orders {n} members by {n} past analyses, the training period "
            f"has {dm.init_times('train').size} init times; give fewer members or a longer train_period"
        )
    quiet_lightning()
    logging.getLogger("lightning.pytorch").setLevel(logging.WARNING)
    with Progress("benchmark", 3, "steps") as progress:
        progress.describe(parametric.name)
        mixed = _build(MixedTask, parametric, dm, seed)
        fit_s = {parametric.name: _fit(mixed, parametric, dm, seed, limit_train_batches)}
        progress.advance(f"{parametric.name} trained in {seconds(fit_s[parametric.name])}")
        progress.describe(generative.name)
        gen = _build(GenerativeTask, generative_spec, dm, seed, generative.options)
        fit_s[generative.name] = _fit(gen, generative_spec, dm, seed, limit_train_batches)
        progress.advance(f"{generative.name} trained in {seconds(fit_s[generative.name])}")
        progress.describe("members and scores")
        cells = draw_cells(dm, paths, mixed, gen, generative.name, counts, copula_shrinkage, seed)
        rows, scored = table_rows(
            cells, dm.init_times("test"), f"{parametric.name} (per point)", two_step.ECC
        )
        progress.advance(f"{len(cells)} fields scored in {seconds(progress.lap)}")
    table = pd.DataFrame(rows)
    table["fit_s"] = table["forecast"].map(
        {f"{parametric.name} (per point)": fit_s[parametric.name], **fit_s}
    )
    files = {
        TABLE: table.to_csv(index=False),
        PAGE: page(table, kind_of(source), generative.name, parametric.name),
        **figures(
            [c for c in cells if c.draws == counts[0]],
            generative.name,
            [s for c, s in zip(cells, scored) if c.draws == counts[0]],
        ),
    }
    with OutputFolder.open(out_dir, "benchmark", whole=True) as folder:
        for name, content in files.items():
            folder.write_bytes(name, content if isinstance(content, bytes) else content.encode())
    return table


def _member_counts(members: int | list[int] | None) -> list[int] | None:
    """The benchmark's N, in the order given, each once; None: the raw ensemble's M."""
    if members is None:
        return None
    counts = list(dict.fromkeys(int(m) for m in ([members] if isinstance(members, int) else members)))
    if not counts:
        raise EnsmlError("benchmark members: name at least one count of members, e.g. 10 or [10, 50]")
    return counts


def _build(
    cls: type[EnsembleTask],
    spec: ModelSpec,
    dm: EnsembleDataModule | None,
    seed: int,
    extra: dict | None = None,
    linked: dict | None = None,
) -> EnsembleTask:
    """``spec``'s task for ``dm``; without a data module, built on the meta device for ``linked``
    (variables, levels, leads, k) only to check the options (no memory, no data)."""
    L.seed_everything(seed, verbose=False)
    options = {**(spec.options or {}), **(extra or {})}
    net = dict(arch="unet3d", width=spec.width, depth=spec.depth, lr=spec.lr)
    try:
        if dm is None:
            with torch.device("meta"):
                return cls(**(linked or {}), grid_shape=(2, 2), **net, **options)
        task = cls.from_data(dm, **net, **options)
    except (TypeError, EnsmlError) as exc:  # an option the task does not take, or refuses
        raise EnsmlError(f"benchmark model {spec.name!r}: {exc}") from None
    check = getattr(task, "check_data", None)
    if check is not None:
        check(dm)
    return task


def _fit(task: EnsembleTask, spec: ModelSpec, dm: EnsembleDataModule, seed: int, limit: int | None) -> float:
    """Train ``task`` (the best validation epoch's weights kept, eval mode); the wall time in seconds."""
    took = fit_best(task, dm, spec.max_epochs, spec.patience, seed, limit)
    task.eval()
    return took


__all__ = ["benchmark_generative"]
