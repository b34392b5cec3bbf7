"""``ensml benchmark``: train every model of the zoo on the embedded data and compare them in one table."""

from __future__ import annotations

from typing import Literal

from jsonargparse.typing import NonNegativeInt, PositiveInt

from ensml.cli.verb import run_function, summary
from ensml.experiments.options import ModelSpec, SynthOptions


def benchmark(
    data_dir: str = "data/benchmark",
    synth: SynthOptions | None = None,
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
) -> None:
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
        Output folder: new, empty or an earlier benchmark's; replaced as a whole by the tables
        at the end, nothing before.
    bound
        Also score the per-point bounds (:mod:`ensml.experiments.bound`): the best any
        point-by-point post-processing of the K-member mean could reach, and the best estimate
        of the M-member spread given the K members and the generator's designed spread.
    """
    options = dict(locals())
    from ensml.experiments.benchmark import benchmark as compare

    compare(**options)


#: The command this module runs, and its function (the help text is its docstring).
COMMANDS = {"benchmark": benchmark}
SUMMARIES = {words: summary(fn) for words, fn in COMMANDS.items()}


def run(args: list[str]) -> None:
    """Run ``ensml benchmark ARGS``."""
    run_function(benchmark, args)
