"""The loop that runs post-processing units on a supervised dask cluster.

Kept apart from :mod:`ensml.postprocess.run` (the plan, the manifest, the outputs): this is
where signals are acted on (:mod:`ensml.cluster.interrupt`) and the cluster is watched
(:mod:`ensml.cluster.supervisor`).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import replace
from typing import Any

from ensml.cluster.interrupt import critical, poll
from ensml.cluster.supervisor import Supervisor
from ensml.postprocess.worker import Job, Unit, run_unit

#: Seconds to fetch a finished unit's record (a few kB) before looking at the cluster again.
GATHER_S = 5.0


def for_workers(job: Job, units: list[Unit]) -> tuple[Job, list[Unit]]:
    """``job`` and ``units`` with every input path absolute: workers may run in another folder.

    A unit's output stays a name relative to the output folder: its staging (absolute) writes it.
    """
    analysis = None if job.analysis is None else tuple(os.path.abspath(p) for p in job.analysis)
    job = replace(job, models=job.models.with_absolute_paths(), analysis=analysis)
    return job, [replace(u, input=os.path.abspath(u.input)) for u in units]


def execute(
    units: list[Unit],
    job: Job,
    client: Any,
    finish: Callable[[Unit, dict[str, Any]], None],
    supervisor: Supervisor | None = None,
) -> None:
    """Run ``units`` on the cluster of ``client``, calling ``finish`` as each ends.

    At most a few units per worker are queued at a time, so the client and scheduler hold
    bounded state however many files there are. A unit whose worker died (distributed retries it
    on another worker up to ``distributed.scheduler.allowed-failures`` times) fails with the reason.
    ``supervisor`` looks at the cluster about once a second and stops the run (an
    :class:`EnsmlError`) when it cannot go on; signals are acted on between results.
    """
    from distributed import wait

    job, units = for_workers(job, units)
    supervisor = supervisor or Supervisor(client)
    queue = iter(units)
    owner: dict[Any, Unit] = {}  # future → its unit
    finished = 0

    def top_up() -> None:
        while len(owner) < max(4, 2 * supervisor.workers):  # workers may join later (batch jobs)
            unit = next(queue, None)
            if unit is None:
                return
            # The job (options, checkpoint metadata; a few kB) goes with each unit: a scattered copy
            # would be lost with the worker that holds it.
            owner[client.submit(run_unit, unit, job, pure=False)] = unit

    with critical():  # signals stop the loop at poll(), never inside a call to the scheduler
        supervisor.watch(0, len(units))
        top_up()
        while owner:
            poll()
            supervisor.watch(finished, len(units))
            try:
                done = wait(list(owner), timeout=0.5, return_when="FIRST_COMPLETED").done
            except TimeoutError:
                continue
            for future in done:
                result = _result(future, owner[future])
                if result is not None:
                    finish(owner.pop(future), result)
                    finished += 1
            top_up()


def _result(future: Any, unit: Unit) -> dict[str, Any] | None:
    """A finished unit's record; a failed one when its worker died or the task was lost.

    None when the result cannot be fetched within :data:`GATHER_S`: its worker died after
    finishing it, distributed computes it again, and the caller waits for it again (and keeps
    watching the cluster meanwhile, which a plain ``result()`` would not).
    """
    try:
        result = future.result(timeout=GATHER_S)
    except TimeoutError:
        return None
    except Exception as exc:  # KilledWorker, a lost task: the unit fails, the run goes on
        reason = f"{type(exc).__name__}: a worker died while processing it (out of memory?) {exc}"
        reason = " ".join(reason.split())
        result = {"key": unit.key, "output": unit.output, "status": "failed", "reason": reason}
    future.release()
    return result
