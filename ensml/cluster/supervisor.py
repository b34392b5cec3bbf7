"""The supervisor of a run's dask cluster: it never lets a run wait on workers that will not come.

:meth:`Supervisor.watch` is called by the loop that collects results, about once a second. It
asks the scheduler which workers are connected (``client.scheduler_info()``) and, for SLURM/PBS,
asks dask-jobqueue's job objects (``cluster.workers``) what was submitted and the batch system
(``squeue``/``qstat``) what became of it. It stops the run, with one line, when

* sbatch/qsub refused the job script (its own message);
* no worker has started and a job waited in the queue past ``pending_timeout`` (the scheduler's
  reason); a job still queued while others work is cancelled with a note instead;
* no worker was connected for ``no_worker_timeout`` while units remained: all workers lost, or
  jobs that ran but started none (the jobs and their states are named).

:meth:`Supervisor.shutdown` closes the cluster (dask-jobqueue cancels its jobs) and then checks
with the batch system that no job of this run is left, cancelling by id (and, for SLURM, by the
run's unique job name) what is. :meth:`Supervisor.where` names the jobs that really ran workers.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable
from typing import Any

from ensml.cluster.batch import BatchSystem, JobState
from ensml.errors import EnsmlError, PartialFailure
from ensml.progress import EVERY_S, note, seconds

log = logging.getLogger(__name__)

#: Seconds between looks at the scheduler's workers, and between squeue/qstat calls.
POLL_S, QUERY_S = 1.0, 2.0
#: Seconds to wait for cancelled jobs to leave the queue, and for the cluster to close.
GONE_S, CLOSE_S = 15.0, 30.0
#: Seconds at least that started jobs get for their first worker to connect.
JOIN_S = 120.0


class Supervisor:
    """Watches ``client``'s workers and, for SLURM/PBS, ``cluster``'s jobs (see the module doc).

    Parameters
    ----------
    client
        The run's ``distributed.Client``.
    cluster
        The cluster this run started (closed by :meth:`shutdown`), or None when joining one.
    system
        The batch system of a dask-jobqueue ``cluster``; None for local or joined clusters.
    pending_timeout, no_worker_timeout
        Seconds (``jobqueue.pending_timeout``, ``jobqueue.no_worker_timeout``).
    where
        The cluster in words, for messages and the summary (``ClusterSpec.describe()``).
    clock, say
        The monotonic clock in seconds and the progress printer (replaced by tests).
    command
        The verb, at the start of the progress lines (``postprocess: waiting for …``).
    recorded
        Whether the units done are kept when the run stops (``postprocess``'s manifest: its
        messages then say how many, and a run stopped after some ends with
        :class:`~ensml.errors.PartialFailure`); else (``evaluate``) the messages say that
        nothing was written.
    """

    def __init__(
        self,
        client: Any,
        cluster: Any = None,
        system: BatchSystem | None = None,
        pending_timeout: float = 600.0,
        no_worker_timeout: float = 300.0,
        where: str = "the dask cluster",
        clock: Callable[[], float] = time.monotonic,
        say: Callable[[str], None] = note,
        command: str = "postprocess",
        recorded: bool = True,
    ) -> None:
        self.command, self.recorded = command, recorded
        self.client, self.cluster, self.system = client, cluster, system
        self.pending_timeout, self.no_worker_timeout = pending_timeout, no_worker_timeout
        self._where, self.clock, self.say = where, clock, say
        self.start = self.last_worker = clock()
        self.workers = 0  # connected at the last look
        self.job_ids: dict[str, str] = {}  # dask-jobqueue's job name → batch job id
        self.submitted: dict[str, float] = {}  # batch job id → when its id was first seen
        self.ran: set[str] = set()  # ids of jobs that connected a worker
        self.states: dict[str, JobState] = {}  # batch job id → what squeue/qstat said last
        self.dropped: set[str] = set()  # cancelled for waiting too long while others worked
        self.cancelled: list[str] = []  # ids of jobs still alive when the run ended
        self._polled = self._queried = self._said = -math.inf
        self._waited = self.start  # when a job was last seen waiting in the queue

    # -- watching ---------------------------------------------------------------------------------
    def watch(self, done: int, total: int) -> None:
        """Look at the cluster if due; raise :class:`EnsmlError` when the run cannot go on.

        ``done`` of ``total`` units have finished (for the messages).
        """
        now = self.clock()
        if now - self._polled < POLL_S:
            return
        self._polled = now
        names = self.worker_names()
        self.workers = len(names)
        waiting = self.system is not None and self._watch_jobs(names, now, done, total)
        if self.workers:
            self.last_worker = now
        elif waiting:
            self._waited = now
        elif done < total and now - max(self.last_worker, self._waited) > self._no_worker_limit():
            raise self._no_workers(done, total)

    def _no_worker_limit(self) -> float:
        """``no_worker_timeout``; at least :data:`JOIN_S` while jobs run whose workers never joined
        yet (they still import Python, dask and torch: a minute on a busy shared file system)."""
        if self.system is None or self.ran:
            return self.no_worker_timeout
        live = [s for j, s in self.states.items() if j not in self.dropped]
        starting = any(s.state in self.system.running for s in live)
        return max(self.no_worker_timeout, JOIN_S) if starting else self.no_worker_timeout

    def worker_names(self) -> set[str]:
        """Names of the workers connected now (none when the scheduler cannot be reached)."""
        try:
            info = self.client.scheduler_info()
        except (OSError, TimeoutError):
            return set()
        return {str(w.get("name", addr)) for addr, w in info.get("workers", {}).items()}

    def _watch_jobs(self, names: set[str], now: float, done: int, total: int) -> bool:
        """Check the jobs (see the module doc); whether one still waits to start."""
        submitting = self._note_jobs(now)
        for name, job_id in self.job_ids.items():
            if any(w == name or w.startswith(f"{name}-") for w in names):  # "-<i>": processes > 1
                self.ran.add(job_id)
        idle = [j for j in dict.fromkeys(self.job_ids.values()) if j not in self.ran | self.dropped]
        if idle and now - self._queried >= QUERY_S:
            self._queried = now
            self.states.update(self.system.states(idle))
        waiting = [
            self.states[j] for j in idle if j in self.states and self.states[j].state in self.system.waiting
        ]
        overdue = [s for s in waiting if now - self.submitted[s.job_id] > self.pending_timeout]
        if self.workers and overdue:  # the others work: go on without these
            self.system.cancel([s.job_id for s in overdue])
            self.dropped.update(s.job_id for s in overdue)
            late = f"{self._jobs_text(overdue)} did not start within {seconds(self.pending_timeout)}"
            self.say(f"{self.command}: {late}: cancelled; going on with the {len(self.ran)} that started")
        elif overdue:
            raise self._never_started(overdue, done, total)
        elif submitting and now - self.start > self.pending_timeout:
            raise EnsmlError(
                f"{self.system.submit} has not returned after {seconds(now - self.start)} "
                f"(jobqueue.pending_timeout); is {self.system.name} answering?"
            )
        if not self.workers and (waiting or submitting) and now - self._said >= EVERY_S:
            self._said = now
            self.say(self._waiting_line(waiting, submitting, len(idle) + submitting))
        return bool(waiting or submitting)

    def _note_jobs(self, now: float, check: bool = True) -> int:
        """Note the ids dask-jobqueue got from sbatch/qsub; how many are still being submitted.

        Raises
        ------
        EnsmlError
            With sbatch's/qsub's message when a submission failed (unless ``check`` is false).
        """
        submitting = 0
        for name, job in list(self.cluster.workers.items()):  # one step: the loop thread edits it
            error, job_id = getattr(job, "submit_error", None), getattr(job, "job_id", None)
            if error and check:
                raise EnsmlError(f"{self.system.submit} refused the job script: {error}")
            if job_id:
                self.job_ids.setdefault(name, str(job_id))
                self.submitted.setdefault(str(job_id), now)
            submitting += not job_id and not error
        return submitting

    # -- messages ---------------------------------------------------------------------------------
    def _jobs_text(self, states: list[JobState]) -> str:
        word = "job" if len(states) == 1 else "jobs"
        return f"{self.system.name} {word} {', '.join(s.describe() for s in states)}"

    def _waiting_line(self, waiting: list[JobState], submitting: int, n: int) -> str:
        reasons = sorted({s.reason for s in waiting if s.reason})
        parts = (
            [f"{len(waiting)} pending" + (f": {', '.join(reasons)}" if reasons else "")] if waiting else []
        )
        parts += [f"{submitting} being submitted"] if submitting else []
        parts += [f"{n - len(waiting) - submitting} started"] if n > len(waiting) + submitting else []
        word = "job" if n == 1 else "jobs"
        return f"{self.command}: waiting for {n} {self.system.name} {word} to start ({'; '.join(parts)})"

    def _never_started(self, overdue: list[JobState], done: int, total: int) -> EnsmlError:
        asker = "squeue" if self.system.name == "SLURM" else "qstat"
        return EnsmlError(
            f"{self._jobs_text(overdue)} did not start within {seconds(self.pending_timeout)} "
            f"(jobqueue.pending_timeout; reason from {asker}); cancelled{self._units(done, total)}"
        )

    def _no_workers(self, done: int, total: int) -> EnsmlError:
        lost = self.ran or self.last_worker > self.start
        what = "all dask workers lost" if lost else "no dask worker joined"
        for_s = f"{what}: none for {seconds(self._no_worker_limit())} (jobqueue.no_worker_timeout)"
        if self.system is not None and self.job_ids:
            ids = list(dict.fromkeys(self.job_ids.values()))
            self.states.update(self.system.states(ids))
            for_s += f"; {self._jobs_text([self.states[j] for j in ids])}"
            for_s += "" if lost else " (see the jobs' batch logs)"
        else:
            for_s += f" at {self._where}"
        error = PartialFailure if done and self.recorded else EnsmlError
        return error(for_s + self._units(done, total))

    def _units(self, done: int, total: int) -> str:
        if not self.recorded:
            return f"; {done} of {total} units scored, nothing written"
        if not done:
            return "; no unit was done"
        left = total - done
        return f"; {done} of {total} units done and recorded; run the same command again for the other {left}"

    def where(self) -> str:
        """The cluster in words for the summary: for SLURM/PBS, the jobs that really ran workers."""
        if self.system is None:
            return self._where
        ids = sorted(self.ran, key=lambda j: (len(j), j))
        word = "job" if len(ids) == 1 else "jobs"
        return f"{len(ids)} {self.system.name} {word}" + (f" ({', '.join(ids)})" if ids else "")

    # -- the end ----------------------------------------------------------------------------------
    def shutdown(self) -> None:
        """Close the cluster, then cancel (and name in :attr:`cancelled`) any job of this run left."""
        if self.cluster is None:
            return
        if self.system is not None:
            self._note_jobs(self.clock(), check=False)
        try:
            self.cluster.close(timeout=CLOSE_S)
        except (OSError, RuntimeError) as exc:  # a timeout, a closed comm, scancel/qdel failing
            # The run's outcome is already decided; the jobs left are cancelled (and named) next.
            log.debug("closing the cluster failed: %s", exc)
        if self.system is not None:
            self._cancel_left()

    def _cancel_left(self) -> None:
        ids = list(dict.fromkeys(self.job_ids.values()))
        name = getattr(self.cluster, "job_name", None)
        end = self.clock() + GONE_S
        while True:
            both = list(dict.fromkeys(ids + (self.system.by_name(name) if name else [])))
            left = [s for s in self.system.states(both).values() if self.system.alive(s)] if both else []
            if not left:
                return
            self.cancelled += [s.job_id for s in left if s.job_id not in self.cancelled]
            error = self.system.cancel([s.job_id for s in left])
            if self.clock() >= end:
                self.say(
                    f"ensml: could not cancel {self._jobs_text(left)}"
                    f"{': ' + error if error else ''}; cancel them with {self.system.cancel_command}"
                )
                return
            time.sleep(0.5)
