"""The dask cluster a run uses: local processes, SLURM or PBS jobs, or a running scheduler.

Every worker runs one unit at a time (one dask thread) and gives torch the cores it owns
(``threads_per_worker`` locally, cores / processes in a batch job), so workers never
oversubscribe cores. The checkpoints are loaded once per worker by :class:`ModelPlugin`, which
also sets torch's threads, including on workers that join later.
"""

from __future__ import annotations

import logging
import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import dask

from ensml.errors import EnsmlError
from ensml.logs import verbose
from ensml.postprocess.options import ClusterKind, JobQueue

# Dask settings for workers that run one long unit at a time, a few queued. distributed's
# defaults wake each worker's event loop every 20 ms (health tick), check memory every 100 ms,
# sample the running task's stack every 10 ms (profiler) and rebalance queues (work stealing);
# each wake-up takes the GIL from the unit being computed. Quieter, two workers on two cores went
# from 14.8 to 18.4 files/s on the embedded data (the serial loop: about 9).
WORKER_CONFIG: dict[str, Any] = {
    "distributed.worker.profile.enabled": False,
    "distributed.scheduler.work-stealing": False,
    "distributed.admin.tick.interval": "1s",
    "distributed.worker.memory.monitor-interval": "1s",
    "distributed.admin.system-monitor.interval": "2s",
}


def config_exports() -> list[str]:
    """:data:`WORKER_CONFIG` as shell exports for batch jobs (dask reads ``DASK_*`` variables)."""

    def var(key: str) -> str:
        return "DASK_" + "__".join(part.upper().replace("-", "_") for part in key.split("."))

    return [f"export {var(k)}={v}" for k, v in WORKER_CONFIG.items()]


@dataclass(frozen=True)
class ClusterSpec:
    """How to get workers (see ``ensml postprocess`` for each option)."""

    kind: ClusterKind = "local"
    workers: int | None = None
    threads_per_worker: int = 1
    scheduler_file: str | None = None
    scheduler_address: str | None = None
    jobqueue: JobQueue = field(default_factory=JobQueue)

    def check(self) -> None:
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
        jq = self.jobqueue
        if self.kind in ("slurm", "pbs") and (jq.cores < 1 or jq.processes < 1 or jq.cores < jq.processes):
            raise EnsmlError(
                f"jobqueue: cores ({jq.cores}) must be at least processes ({jq.processes}), both ≥ 1"
            )

    @property
    def joins(self) -> bool:
        return bool(self.scheduler_file or self.scheduler_address)

    @property
    def local_workers(self) -> int:
        return self.workers or max(1, (os.cpu_count() or 1) // self.threads_per_worker)

    @property
    def torch_threads(self) -> int:
        """Torch threads of one worker (one unit at a time per worker)."""
        if self.kind in ("slurm", "pbs"):
            return max(1, self.jobqueue.cores // self.jobqueue.processes)
        return self.threads_per_worker

    def describe(self) -> str:
        if self.joins:
            return f"the cluster at {self.scheduler_address or self.scheduler_file}"
        if self.kind == "none":
            return f"this process ({self.torch_threads} torch threads)"
        if self.kind == "local":
            return f"a local cluster of {self.local_workers} workers × {self.torch_threads} torch threads"
        jq = self.jobqueue
        each = f"{jq.processes} workers × {self.torch_threads} torch threads"
        return f"{jq.jobs} {self.kind.upper()} job(s) of {each}"


def jobqueue_cluster(spec: ClusterSpec) -> Any:
    """A dask-jobqueue cluster object for ``spec`` (no job is submitted until it is scaled)."""
    try:
        import dask_jobqueue
    except ImportError:  # pragma: no cover - a declared dependency
        raise EnsmlError("cluster: slurm/pbs needs dask-jobqueue (pip install dask-jobqueue)") from None
    jq = spec.jobqueue
    common: dict[str, Any] = dict(
        queue=jq.queue,
        account=jq.account,
        # One dask thread per worker: each runs one unit at a time with cores/processes torch threads.
        cores=jq.processes,
        processes=jq.processes,
        memory=jq.memory,
        walltime=jq.walltime,
        job_extra_directives=list(jq.job_extra_directives),
        job_script_prologue=[*config_exports(), *jq.job_script_prologue],
        interface=jq.interface,
        local_directory=jq.local_directory,
        log_directory=jq.log_directory,
        python=jq.python or sys.executable,
        scheduler_options={"dashboard_address": None},
    )
    if spec.kind == "slurm":
        return dask_jobqueue.SLURMCluster(job_cpu=jq.cores, **common)
    return dask_jobqueue.PBSCluster(resource_spec=f"select=1:ncpus={jq.cores}:mem={jq.memory}", **common)


def job_script(spec: ClusterSpec) -> str:
    """The batch script each SLURM/PBS job would run (nothing is submitted)."""
    cluster = jobqueue_cluster(spec)
    try:
        return cluster.job_script()
    finally:
        cluster.close()


@contextmanager
def connect(spec: ClusterSpec, plugin: Any) -> Iterator[Any]:
    """A ``distributed.Client`` for ``spec`` with ``plugin`` registered (None for ``kind: none``)."""
    if spec.kind == "none" and not spec.joins:
        yield None
        return
    from distributed import Client, LocalCluster

    cluster = None
    try:
        if spec.scheduler_file:
            client = Client(scheduler_file=spec.scheduler_file, timeout="30s")
        elif spec.scheduler_address:
            client = Client(spec.scheduler_address, timeout="30s")
        elif spec.kind == "local":
            with dask.config.set(WORKER_CONFIG):
                cluster = LocalCluster(
                    n_workers=spec.local_workers,
                    threads_per_worker=1,
                    processes=True,
                    dashboard_address=None,
                    silence_logs=logging.INFO if verbose() else logging.ERROR,  # workers' logs: --verbose
                )
            client = Client(cluster)
        else:
            with dask.config.set(WORKER_CONFIG):  # the scheduler runs here
                cluster = jobqueue_cluster(spec)
            cluster.scale(jobs=spec.jobqueue.jobs)
            client = Client(cluster)
    except OSError as exc:
        if cluster is not None:
            cluster.close()
        raise EnsmlError(f"cannot reach the dask cluster ({exc})") from None
    try:
        client.register_plugin(plugin, name=plugin.name)
        yield client
    finally:
        client.close()
        if cluster is not None:
            cluster.close()
