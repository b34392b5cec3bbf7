"""The options of a run on a dask cluster, shared by ``postprocess``, ``evaluate`` and ``report``.

``cluster`` says where the workers come from (:data:`ClusterKind`); ``jobqueue`` how SLURM/PBS jobs
are asked for (:class:`JobQueue`). Importing this module loads no dask (the command line's types).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

#: ``local``: a LocalCluster; ``slurm``/``pbs``: dask-jobqueue batch jobs; ``none``: this process.
ClusterKind = Literal["local", "slurm", "pbs", "none"]


@dataclass
class JobQueue:
    """A SLURM or PBS cluster through dask-jobqueue (used when ``cluster`` is ``slurm`` or ``pbs``).

    Attributes
    ----------
    queue, account
        Partition/queue and project to charge.
    cores, memory
        Cores and memory of one job (e.g. ``16GB``).
    processes
        Workers per job; each runs one unit (a file, a block of init times) at a time with
        cores/processes torch threads.
    jobs
        Number of jobs to start.
    walltime
        Limit of one job (``HH:MM:SS``).
    job_extra_directives
        Further batch directives, e.g. ``["--gres=gpu:1"]`` (SLURM) or ``["-l select=1:ngpus=1"]``.
    job_script_prologue
        Shell lines run before the worker starts (``module load …``, ``source venv/bin/activate``).
    interface, local_directory, log_directory
        Network interface of the workers, their scratch folder, and where batch logs go.
    python
        Python executable of the workers (default: this one).
    pending_timeout
        How long the jobs may wait in the queue while no worker has started: seconds, or a
        duration such as ``90s``, ``10m``, ``2h``. Past it the run stops with the scheduler's
        reason (``squeue``/``qstat``) and cancels its jobs; a job still queued while others work
        is cancelled with a note.
    no_worker_timeout
        How long a run may go on without any dask worker while units remain (seconds or a
        duration): all workers lost (jobs cancelled, nodes down) or jobs that started no worker.
        The run then stops, naming its jobs and their states (``postprocess``: the completed
        units stay recorded and a rerun does the rest; ``evaluate``/``report``: nothing is
        written). Jobs that started get at least 2 min for their first worker to connect. Also
        bounds a joined cluster (``scheduler_file``) without workers.
    """

    queue: str | None = None
    account: str | None = None
    cores: int = 4
    memory: str = "16GB"
    processes: int = 1
    jobs: int = 1
    walltime: str = "01:00:00"
    job_extra_directives: list[str] = field(default_factory=list)
    job_script_prologue: list[str] = field(default_factory=list)
    interface: str | None = None
    local_directory: str | None = None
    log_directory: str | None = None
    python: str | None = None
    pending_timeout: float | str = 600.0
    no_worker_timeout: float | str = 300.0


__all__ = ["ClusterKind", "JobQueue"]
