"""``ensml fit`` as a SLURM job: what the job says, checked against the trainer, and its requeue.

Under ``srun`` each SLURM task is one rank: Lightning's :class:`SLURMEnvironment` reads the
ranks, the nodes and the master address from SLURM's variables (``SLURM_PROCID``,
``SLURM_NTASKS``, ``SLURM_NODELIST``...), for DDP and ensml's strategies alike. ensml adds:

- :func:`check_tasks` (every rank, before the trainer is built): the trainer's ``devices`` ×
  ``num_nodes`` must be the job's tasks per node × nodes, and a job of several tasks must run
  under ``srun`` (started from the batch script itself, rank 0 would wait for ranks that never
  come). One line instead of Lightning's exception or a hang.
- :func:`cluster_plugins`: Lightning's SLURM environment without its own requeue handler, which
  saves a checkpoint from inside the signal handler (mid-step, outside the run folder);
  :mod:`ensml.train.preemption` does it at a batch boundary all ranks agree on.
- :class:`SlurmJob` and :meth:`SlurmJob.requeue`: the job's id and restarts, and ``scontrol
  requeue``.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from lightning.fabric.plugins.environments import ClusterEnvironment, SLURMEnvironment

from ensml.errors import EnsmlError

COMMAND = "fit"


@dataclass(frozen=True)
class SlurmJob:
    """The SLURM job this process runs in (one task of it)."""

    id: str  # "12", or "12_3" for task 3 of array job 12
    restarts: int  # SLURM_RESTART_COUNT: how often the job was requeued
    rank: int  # SLURM_PROCID

    @classmethod
    def current(cls, env: Mapping[str, str] | None = None) -> SlurmJob | None:
        """The job of a process that Lightning would run in SLURM's environment; else None.

        Lightning's rule (:meth:`SLURMEnvironment.detect`): ``SLURM_NTASKS`` is set and the job is
        not named ``bash`` or ``interactive`` (an interactive allocation the user launches in).
        """
        env = os.environ if env is None else env
        if "SLURM_NTASKS" not in env or env.get("SLURM_JOB_NAME") in ("bash", "interactive"):
            return None
        job = env.get("SLURM_JOB_ID") or env.get("SLURM_JOBID")
        if not job:
            return None
        if env.get("SLURM_ARRAY_JOB_ID") and env.get("SLURM_ARRAY_TASK_ID"):
            job = f"{env['SLURM_ARRAY_JOB_ID']}_{env['SLURM_ARRAY_TASK_ID']}"
        return cls(job, int(env.get("SLURM_RESTART_COUNT") or 0), int(env.get("SLURM_PROCID") or 0))

    def requeue(self) -> str | None:
        """``scontrol requeue`` this job; None when SLURM took it, else SLURM's reason (one line)."""
        try:
            done = subprocess.run(
                ["scontrol", "requeue", self.id], capture_output=True, text=True, timeout=60
            )
        except (OSError, subprocess.TimeoutExpired) as exc:
            return f"scontrol requeue {self.id}: {exc}"
        if done.returncode == 0:
            return None
        said = (done.stderr.strip() or done.stdout.strip()).splitlines()
        words = " ".join(said[-1].split()) if said else f"exit status {done.returncode}"  # its last word
        return f"scontrol requeue {self.id}: {words}"


def _count(value: Any) -> int | None:
    """``devices`` / ``num_nodes`` as a count of processes, None where Lightning decides (auto, a list)."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value if value > 0 else None
    if isinstance(value, str) and value.strip().isdigit():
        return int(value.strip())
    return None


class SlurmTasksMismatch(EnsmlError):
    """The trainer's ranks disagree with the job's tasks: every rank raises it, rank 0 says it."""


def check_tasks(trainer: Mapping[str, Any], env: Mapping[str, str] | None = None) -> None:
    """Raise unless the trainer config's ranks are the SLURM job's tasks (no-op outside SLURM).

    Parameters
    ----------
    trainer
        The ``trainer`` section of the fit config (``devices``, ``num_nodes``).
    """
    env = os.environ if env is None else env
    if SlurmJob.current(env) is None:
        return
    ntasks = int(env.get("SLURM_NTASKS") or 1)
    job = env.get("SLURM_JOB_ID", "?")
    if ntasks > 1 and "SLURM_STEP_ID" not in env and "SLURM_STEPID" not in env:
        raise SlurmTasksMismatch(
            f"{COMMAND}: SLURM job {job} has {ntasks} tasks but ensml runs in its batch script, as one "
            "process: start it with srun (srun ensml fit ...), which starts one rank per task"
        )
    per_node = env.get("SLURM_NTASKS_PER_NODE")
    if ntasks > 1 and per_node is None:
        raise SlurmTasksMismatch(
            f"{COMMAND}: SLURM job {job} asks for --ntasks={ntasks} without --ntasks-per-node; ask for "
            "--nodes and --ntasks-per-node (= trainer.devices), as Lightning places one rank per task"
        )
    devices, nodes = _count(trainer.get("devices", "auto")), _count(trainer.get("num_nodes", 1))
    want = (_count(per_node) if per_node is not None else 1, _count(env.get("SLURM_NNODES", "1")))
    if None in want:  # a heterogeneous layout ("2(x3)"): Lightning's own check applies
        return
    if (devices is not None and devices != want[0]) or (nodes is not None and nodes != want[1]):
        raise SlurmTasksMismatch(
            f"{COMMAND}: trainer.devices {trainer.get('devices', 'auto')} × trainer.num_nodes "
            f"{trainer.get('num_nodes', 1)} disagrees with SLURM job {job}: {want[0]} tasks per node × "
            f"{want[1]} nodes (sbatch --ntasks-per-node, --nodes); one rank runs per task, so set "
            f"--trainer.devices {want[0]} --trainer.num_nodes {want[1]} or change the batch script"
        )


def cluster_plugins(plugins: Any) -> Any:
    """``trainer.plugins`` with Lightning's SLURM environment, its own requeue handler off.

    Unchanged outside SLURM or when a cluster environment is given.
    """
    if SlurmJob.current() is None:
        return plugins
    given = list(plugins) if isinstance(plugins, list | tuple) else ([] if plugins is None else [plugins])
    if any(isinstance(p, ClusterEnvironment) for p in given):
        return plugins
    return [*given, SLURMEnvironment(auto_requeue=False)]
