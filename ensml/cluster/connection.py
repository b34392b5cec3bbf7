"""The dask cluster a run uses: local processes, SLURM or PBS jobs, or a running scheduler.

One connection (:class:`Connection`, watched by :class:`~ensml.cluster.supervisor.Supervisor`)
for every verb that runs on a cluster, started from its checked
:class:`~ensml.cluster.spec.ClusterSpec`: ``postprocess`` (a unit is a forecast file),
``evaluate`` and ``report`` (a unit is a block of init times at one lead). Every worker runs one
unit at a time (one dask thread) and gives torch the cores it owns (``threads_per_worker``
locally, cores / processes in a batch job), so workers never oversubscribe cores. A verb's
worker plugin (``postprocess``: the checkpoints, loaded once per worker) is registered on every
worker, including those that join later.
"""

from __future__ import annotations

import logging
import os
import signal
import sys
import threading
import uuid
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from typing import Any

import dask

from ensml.cluster.batch import batch_system, pbs_resources, supervised_job_cls
from ensml.cluster.interrupt import critical, import_jobqueue
from ensml.cluster.spec import ClusterSpec, pbs_memory
from ensml.cluster.supervisor import Supervisor
from ensml.errors import EnsmlError
from ensml.logs import verbose

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


#: The scheduler's HTTP server (dashboard) on a free port: with None, distributed still binds 8787
#: and warns when another program holds it.
DASHBOARD = ":0"
#: Seconds to reach a running scheduler (scheduler_file, scheduler_address).
CONNECT_TIMEOUT = "30s"


@contextmanager
def _children_ignore_sigint(local: bool) -> Iterator[None]:
    """Start local workers with SIGINT ignored (kept through exec; Python then installs no
    KeyboardInterrupt handler): Ctrl-C at a terminal signals the whole process group, and the
    workers would die with tracebacks while this process stops the run and closes them.

    A signal mask is not inherited by the spawned workers, so SIGINT is ignored here too while
    they start (a few seconds): a Ctrl-C then is lost, the next one stops the run.
    """
    main = threading.current_thread() is threading.main_thread()
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN) if local and main else None
    try:
        yield
    finally:
        if previous is not None:
            signal.signal(signal.SIGINT, previous)


def _log_level() -> int:
    """distributed's log level in this process (the scheduler's, and local workers'): its errors
    about lost workers and keys come out as the supervisor's one line, --verbose shows them."""
    return logging.INFO if verbose() else logging.CRITICAL


def jobqueue_cluster(spec: ClusterSpec) -> Any:
    """A dask-jobqueue cluster for ``spec`` (no job is submitted until it is scaled).

    Its jobs are named ``ensml-<8 hex digits>`` (``cluster.job_name``), unique to the run, so
    that what the run submitted can be found in the queue, and keep a rejected submission's
    message (:func:`~ensml.cluster.batch.supervised_job_cls`).
    """
    dask_jobqueue = import_jobqueue()
    jq = spec.jobqueue
    extra, kwargs = list(jq.job_extra_directives), {}
    if spec.kind == "pbs":  # one select line: the user's chunk resources join ours
        kwargs["resource_spec"], extra = pbs_resources(jq.cores, pbs_memory(jq.memory), extra)
    else:
        kwargs["job_cpu"] = jq.cores
    base = dask_jobqueue.SLURMCluster if spec.kind == "slurm" else dask_jobqueue.PBSCluster
    return base(
        job_cls=supervised_job_cls(base.job_cls),
        job_name=f"ensml-{uuid.uuid4().hex[:8]}",
        queue=jq.queue,
        account=jq.account,
        # One dask thread per worker: each runs one unit at a time with cores/processes torch threads.
        cores=jq.processes,
        processes=jq.processes,
        memory=jq.memory,
        walltime=jq.walltime,
        job_extra_directives=extra,
        job_script_prologue=[*config_exports(), *jq.job_script_prologue],
        interface=jq.interface,
        local_directory=jq.local_directory,
        log_directory=spec.logs,
        python=jq.python or sys.executable,
        scheduler_options={"dashboard_address": DASHBOARD},
        silence_logs=_log_level(),
        **kwargs,
    )


def job_script(spec: ClusterSpec) -> str:
    """The batch script each SLURM/PBS job would run (nothing is submitted, nothing written).

    dask-jobqueue creates the log folder when it renders a script: the folders it created for
    this are removed again (a dry run writes nothing).
    """
    new = _missing_parents(spec.logs) if spec.logs else []
    cluster = jobqueue_cluster(spec)
    try:
        return cluster.job_script()
    finally:
        cluster.close()
        for folder in new:  # deepest first; only while empty
            with suppress(OSError):
                os.rmdir(folder)


def _missing_parents(path: str) -> list[str]:
    """``path`` and its ancestors that do not exist yet, deepest first."""
    missing = []
    while path and not os.path.exists(path):
        missing.append(path)
        parent = os.path.dirname(path)
        if parent == path:
            break
        path = parent
    return missing


class Connection:
    """The run's dask client, cluster and :class:`Supervisor` (a context manager).

    Entering starts or joins the cluster (for SLURM/PBS: submits ``jobqueue.jobs`` jobs) and
    registers ``plugin`` (if any) on the workers; leaving closes the client and the cluster and makes
    sure no job of the run is left in the queue. No signal cuts either short
    (:func:`~ensml.cluster.interrupt.critical`). For
    ``cluster: none`` there is no client (units run in this process).
    """

    def __init__(self, spec: ClusterSpec, plugin: Any = None) -> None:
        self.spec, self.plugin = spec, plugin
        self.client: Any = None
        self.cluster: Any = None
        self.supervisor: Supervisor | None = None

    def __enter__(self) -> Connection:
        if self.spec.kind == "none" and not self.spec.joins:
            return self
        # A gather cut short when every worker is lost leaves a task whose AllExit asyncio logs as
        # "Task exception was never retrieved" with a traceback: the supervisor's line says it.
        logging.getLogger("asyncio").setLevel(_log_level())
        try:
            with critical():
                self._connect()
        except BaseException:  # a half-made connection is closed on any way out, then re-raised
            self.__exit__()
            raise
        return self

    def _connect(self) -> None:
        from distributed import Client, LocalCluster

        spec = self.spec
        system = batch_system(spec.kind) if spec.batch else None
        try:
            if spec.joins:
                where = {"scheduler_file": spec.scheduler_file} if spec.scheduler_file else {}
                self.client = Client(spec.scheduler_address, timeout=CONNECT_TIMEOUT, **where)
            else:
                with dask.config.set(WORKER_CONFIG), _children_ignore_sigint(not system):
                    self.cluster = (
                        jobqueue_cluster(spec)
                        if system
                        else LocalCluster(
                            n_workers=spec.local_workers,
                            threads_per_worker=1,
                            processes=True,
                            dashboard_address=DASHBOARD,
                            silence_logs=_log_level(),
                        )
                    )
                self.supervisor = self._supervisor(system)
                if system:
                    self.cluster.scale(jobs=spec.jobqueue.jobs)
                self.client = Client(self.cluster)
        except OSError as exc:
            where = spec.describe()
            raise EnsmlError(f"{spec.command}: cannot reach {where} ({exc}); nothing was done") from None
        self.supervisor = self.supervisor or self._supervisor(None)
        self.supervisor.client = self.client
        if self.plugin is not None:
            self.client.register_plugin(self.plugin, name=self.plugin.name)

    def _supervisor(self, system: Any) -> Supervisor:
        spec = self.spec
        return Supervisor(
            self.client,
            self.cluster,
            system,
            spec.pending_timeout_s,
            spec.no_worker_timeout_s,
            spec.describe(),
            command=spec.command,
            recorded=spec.recorded,
        )

    def __exit__(self, *exc: object) -> None:
        with critical():
            if self.client is not None:
                self.client.close()
            if self.supervisor is not None:
                self.supervisor.shutdown()
            elif self.cluster is not None:
                self.cluster.close()

    def where(self) -> str:
        """Where the units ran, for the summary (the jobs that really started workers)."""
        if self.supervisor is None or self.supervisor.system is None:
            return self.spec.describe()
        return f"{self.supervisor.where()} of {self.spec.per_job}"

    def jobs_note(self) -> str:
        """``; SLURM jobs 12, 13 cancelled`` for a stopped run ("" without jobs)."""
        sup = self.supervisor
        if sup is None or sup.system is None or not sup.job_ids:
            return ""
        ids = list(dict.fromkeys(sup.job_ids.values()))
        return f"; {sup.system.name} job{'s' if len(ids) > 1 else ''} {', '.join(ids)} cancelled"
