"""Which cluster a run asks for: :class:`ClusterSpec`, checked before anything is done.

The options every verb that runs on a cluster shares (``postprocess``, ``evaluate``, ``report``):
the kind (``none``, ``local``, ``slurm``, ``pbs``), the workers, a running scheduler to join, and
the batch jobs' settings (:class:`~ensml.cluster.options.JobQueue`). :meth:`ClusterSpec.check`
refuses an impossible setting in one line; :mod:`ensml.cluster.connection` then starts or joins
what the spec describes. :func:`duration_s` reads the durations of every cluster option
(``10m``, ``90s``), ``ensml fit --sbatch_pending_timeout`` included.
"""

from __future__ import annotations

import os
import re
import shutil
from dataclasses import dataclass, field

from dask.utils import parse_bytes, parse_timedelta

from ensml.cluster.batch import batch_system, pbs_resources
from ensml.cluster.interrupt import import_jobqueue
from ensml.cluster.options import ClusterKind, JobQueue
from ensml.errors import EnsmlError
from ensml.machine import PER_CORE, cpu_cores


def duration_s(value: float | str, option: str) -> float:
    """Seconds from a number or a duration such as ``90s``, ``10m``, ``2h`` (dask's parser)."""
    try:
        s = float(value) if isinstance(value, int | float) else float(parse_timedelta(value, default="s"))
    except (ValueError, KeyError, TypeError):
        raise EnsmlError(f"{option}: {value!r} is not a duration (seconds, or e.g. 90s, 10m, 2h)") from None
    if not 0 < s < float("inf"):
        raise EnsmlError(f"{option} must be a positive duration, got {value!r}")
    return s


@dataclass(frozen=True)
class ClusterSpec:
    """How to get workers (see ``ensml postprocess`` for each option).

    ``command`` (``postprocess``, ``evaluate``, ``report``) begins the run's messages;
    ``recorded``: whether the units done are kept when the run stops (``postprocess``'s
    manifest), which the supervisor's messages say.
    """

    kind: ClusterKind = "local"
    workers: int | None = None
    threads_per_worker: int = 1
    scheduler_file: str | None = None
    scheduler_address: str | None = None
    jobqueue: JobQueue = field(default_factory=JobQueue)
    #: The batch jobs' logs when ``jobqueue.log_directory`` is not set: the run's out_dir has
    #: them (``<out_dir>/.ensml/logs``), never the folder ensml was started in.
    log_dir: str | None = None
    command: str = "postprocess"
    recorded: bool = True

    def check(self, submit: bool = True) -> None:
        """Raise :class:`EnsmlError` for an impossible setting, before anything is done.

        ``submit``: a run that will submit jobs also needs sbatch/qsub on PATH (a dry run not).
        """
        if self.threads_per_worker < 1:
            raise EnsmlError(f"threads_per_worker must be at least 1, got {self.threads_per_worker}")
        if self.workers is not None and self.workers < 1:
            raise EnsmlError(f"workers must be at least 1, got {self.workers}")
        joins = [o for o in ("scheduler_file", "scheduler_address") if getattr(self, o)]
        if len(joins) == 2:
            raise EnsmlError("give scheduler_file or scheduler_address, not both")
        if joins and self.kind not in ("local",):
            raise EnsmlError(f"{joins[0]} joins a running cluster; cluster: {self.kind} would start another")
        if joins and self.scheduler_file and not os.path.isfile(self.scheduler_file):
            raise EnsmlError(f"scheduler_file {self.scheduler_file} does not exist")
        self.pending_timeout_s, self.no_worker_timeout_s  # noqa: B018 - parsed to check them
        if self.kind in ("local", "none") and not joins:
            self._check_local_workers()
        if self.kind in ("slurm", "pbs"):
            self._check_jobqueue(submit)

    def _check_local_workers(self) -> None:
        """Refuse more local worker processes × threads than this machine can run."""
        cores = cpu_cores()
        cap = PER_CORE * cores
        workers, threads = self.workers or 1, self.threads_per_worker
        if threads > cap or workers * threads > cap:
            raise EnsmlError(
                f"{self.command}: --workers {workers} × --threads_per_worker {threads} is more than this "
                f"machine can run ({cap}: {PER_CORE} per CPU core, {cores} cores); for more, use "
                "--cluster slurm|pbs or --scheduler_address"
            )

    def _check_jobqueue(self, submit: bool) -> None:
        jq = self.jobqueue
        if jq.cores < 1 or jq.processes < 1 or jq.cores < jq.processes:
            raise EnsmlError(
                f"jobqueue: cores ({jq.cores}) must be at least processes ({jq.processes}), both ≥ 1"
            )
        if jq.jobs < 1:
            raise EnsmlError(f"jobqueue.jobs must be at least 1, got {jq.jobs}")
        try:
            ok = parse_bytes(jq.memory) > 0
        except (ValueError, TypeError):
            ok = False
        if not ok:
            raise EnsmlError(f"jobqueue.memory: {jq.memory!r} is not an amount of memory (e.g. 16GB)")
        if not re.fullmatch(r"(\d+-)?\d+(:\d{1,2}){0,2}", str(jq.walltime)):
            raise EnsmlError(f"jobqueue.walltime: {jq.walltime!r} is not a duration such as 01:30:00")
        if self.kind == "pbs":
            pbs_resources(jq.cores, pbs_memory(jq.memory), list(jq.job_extra_directives))
        try:
            import_jobqueue()
        except ImportError:  # pragma: no cover - a declared dependency
            raise EnsmlError(
                f"cluster: {self.kind} needs dask-jobqueue (pip install dask-jobqueue)"
            ) from None
        system = batch_system(self.kind)
        if submit and shutil.which(system.submit) is None:
            raise EnsmlError(
                f"cluster: {self.kind} submits jobs with {system.submit}, which is not on PATH here: run "
                f"on a {system.name} login node, or use cluster: local"
            )

    @property
    def pending_timeout_s(self) -> float:
        return duration_s(self.jobqueue.pending_timeout, "jobqueue.pending_timeout")

    @property
    def no_worker_timeout_s(self) -> float:
        return duration_s(self.jobqueue.no_worker_timeout, "jobqueue.no_worker_timeout")

    @property
    def logs(self) -> str | None:
        """The batch jobs' log folder, absolute (jobs may start elsewhere), or None."""
        logs = self.jobqueue.log_directory or self.log_dir
        return os.path.abspath(logs) if logs else None

    @property
    def joins(self) -> bool:
        return bool(self.scheduler_file or self.scheduler_address)

    @property
    def batch(self) -> bool:
        """Whether this run submits SLURM/PBS jobs."""
        return self.kind in ("slurm", "pbs") and not self.joins

    @property
    def local_workers(self) -> int:
        return self.workers or max(1, (os.cpu_count() or 1) // self.threads_per_worker)

    @property
    def torch_threads(self) -> int:
        """Torch threads of one worker (one unit at a time per worker)."""
        if self.kind in ("slurm", "pbs"):
            return max(1, self.jobqueue.cores // self.jobqueue.processes)
        return self.threads_per_worker

    @property
    def per_job(self) -> str:
        n = self.jobqueue.processes
        return f"{n} worker{'s' if n > 1 else ''} × {self.torch_threads} torch threads"

    def describe(self) -> str:
        """The cluster asked for, in words."""
        if self.joins:
            return f"the cluster at {self.scheduler_address or self.scheduler_file}"
        if self.kind == "none":
            return f"this process ({self.torch_threads} torch threads)"
        if self.kind == "local":
            return f"a local cluster of {self.local_workers} workers × {self.torch_threads} torch threads"
        return f"{self.jobqueue.jobs} {self.kind.upper()} job(s) of {self.per_job}"


def pbs_memory(memory: str) -> str:
    """``memory`` as PBS writes sizes (an integer and a unit, e.g. 64GB), kept when it is one."""
    if re.fullmatch(r"\d+[kmgtp]?[bw]", memory.strip().lower()):
        return memory.strip()
    return import_jobqueue().pbs.pbs_format_bytes_ceil(parse_bytes(memory))


__all__ = ["ClusterSpec", "duration_s", "pbs_memory"]
