"""``ensml postprocess``: apply trained checkpoints to forecast files on a dask cluster, exactly once."""

from __future__ import annotations

from jsonargparse.typing import PositiveInt

from ensml.cli.verb import run_function, summary
from ensml.postprocess.options import ClusterKind, Device, JobQueue, OutputFormat, Products


def postprocess(
    checkpoints: list[str],
    forecasts: str | list[str],
    analysis: str | list[str] | None = None,
    out_dir: str = "runs/postprocess",
    format: OutputFormat = "netcdf",
    products: Products | None = None,
    cluster: ClusterKind = "local",
    workers: PositiveInt | None = None,
    threads_per_worker: PositiveInt = 1,
    scheduler_file: str | None = None,
    scheduler_address: str | None = None,
    jobqueue: JobQueue | None = None,
    device: Device = "cpu",
    verify: bool = False,
    force: bool = False,
    dry_run: bool = False,
) -> None:
    """Post-process forecast files with trained checkpoints into calibrated products.

    Each input file gives one CF-1.8 netCDF output (or a region of one zarr store) with, for
    every variable, level and lead time the checkpoints cover: the predictive mean and std (or
    the estimated spread), quantiles, exceedance probabilities and calibrated ECC members. A
    manifest makes reruns skip what is complete and current; a lock keeps two runs apart.

    Parameters
    ----------
    checkpoints
        One checkpoint per target lead time (``ensml fit`` output; all MixedTask or all SpreadTask,
        same variables, levels and grid).
    forecasts
        Forecast files or globs (netCDF, GRIB; one or many init times per file).
    analysis
        Analysis files or globs, needed only when the checkpoints use the analysis at
        initialisation (a MixedTask trained with ``use_analysis: true``).
    out_dir
        Output folder: the products, ``manifest.jsonl`` and the lock.
    format
        ``netcdf`` (one file per input) or ``zarr`` (one store, ``products.zarr``, one region per init).
    products
        Quantile levels, exceedance thresholds and ECC members (see :class:`Products`).
    cluster
        ``local`` (a LocalCluster), ``slurm`` or ``pbs`` (dask-jobqueue, see ``jobqueue``), or
        ``none`` (in this process, for debugging).
    workers
        Local worker processes (default: cores / threads_per_worker).
    threads_per_worker
        Torch threads of each local worker; every worker processes one file at a time.
    scheduler_file
        Join a running dask cluster through its scheduler file instead of starting one (start its
        workers with ``--nthreads 1``: each then processes one file at a time).
    scheduler_address
        Join a running dask cluster at this address (e.g. ``tcp://10.0.0.5:8786``).
    jobqueue
        SLURM/PBS settings: queue, account, cores, memory, processes, jobs, walltime, directives.
    device
        ``cpu``, ``cuda`` or ``auto`` (cuda where a worker has one).
    verify
        Also compare the SHA-256 of existing outputs with the manifest before skipping them.
    force
        Redo every output, current or not.
    dry_run
        Print what would be done (and the batch job script for slurm/pbs); write nothing.
    """
    options = dict(locals())
    if cluster in ("local", "none") and not (scheduler_file or scheduler_address):
        check_local_workers(workers, threads_per_worker)
    from ensml.postprocess.run import postprocess as apply

    apply(**options)


#: Local processes × threads per CPU core beyond which a run only thrashes (or hangs starting them).
PER_CORE = 4


def check_local_workers(workers: int | None, threads_per_worker: int) -> None:
    """Refuse more local worker processes × threads than this machine can run, in one line."""
    from ensml.errors import EnsmlError
    from ensml.train.options import cpu_cores

    cores = cpu_cores()
    cap = PER_CORE * cores
    if threads_per_worker > cap or (workers or 1) * threads_per_worker > cap:
        raise EnsmlError(
            f"postprocess: --workers {workers or 1} × --threads_per_worker {threads_per_worker} is more "
            f"than this machine can run ({cap}: {PER_CORE} per CPU core, {cores} cores); for more, "
            "use --cluster slurm|pbs or --scheduler_address"
        )


#: The command this module runs, and its function (the help text is its docstring).
COMMANDS = {"postprocess": postprocess}
SUMMARIES = {words: summary(fn) for words, fn in COMMANDS.items()}


def run(args: list[str]) -> None:
    """Run ``ensml postprocess ARGS``."""
    run_function(postprocess, args)
