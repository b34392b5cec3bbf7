"""SLURM and PBS as a run sees them: submission errors, job states, cancelling, PBS resources.

dask-jobqueue submits and cancels the jobs; this module adds what it leaves out. A rejected
submission is kept on the job object (:func:`supervised_job_cls`) instead of being raised in a
background task nobody awaits. What the scheduler says about a job, and why it waits, comes
from ``squeue``/``qstat -f`` (:class:`BatchSystem`), which also cancels whatever a closed
cluster left behind. PBS Pro takes one ``-l select=`` chunk per job: :func:`pbs_resources`
merges the user's chunk resources into it.
"""

from __future__ import annotations

import re
import subprocess
from dataclasses import dataclass
from typing import Any

from ensml.errors import EnsmlError

#: Seconds a squeue/qstat/scancel/qdel call may take before it counts as failed.
COMMAND_TIMEOUT_S = 30.0


@dataclass(frozen=True)
class JobState:
    """One batch job: its id, the scheduler's state word and, when waiting, its reason."""

    job_id: str
    state: str  # SLURM: PENDING, RUNNING, …; PBS: Q, R, …; "gone": unknown to the scheduler now
    reason: str = ""

    def describe(self) -> str:
        return f"{self.job_id} {self.state}" + (f" ({self.reason})" if self.reason else "")


class BatchSystem:
    """The command-line clients of one batch system (see :data:`SLURM` and :data:`PBS`)."""

    name = ""
    submit = ""
    waiting: frozenset[str] = frozenset()  # queued, not started
    running: frozenset[str] = frozenset()  # started or being cleaned up; anything else has ended
    cancel_command = ""

    def states(self, job_ids: list[str]) -> dict[str, JobState]:
        """The state of each job (``gone`` when the scheduler no longer lists it; ``unknown``
        with the error when it cannot be asked)."""
        raise NotImplementedError

    def by_name(self, job_name: str) -> list[str]:
        """Ids of the jobs named ``job_name`` that are still queued or running."""
        return []

    def cancel(self, job_ids: list[str]) -> str:
        """Cancel ``job_ids``; the client's error output ("" when it had none)."""
        if not job_ids:
            return ""
        done = _call([self.cancel_command, *job_ids])
        return "" if done is None or not done.returncode else _message(done)

    def alive(self, state: JobState) -> bool:
        """Whether the job still holds (or waits for) resources and needs cancelling."""
        return state.state in self.waiting or state.state in self.running - {"COMPLETING", "E"}


class Slurm(BatchSystem):
    name, submit, cancel_command = "SLURM", "sbatch", "scancel"
    waiting = frozenset({"PENDING", "REQUEUED", "REQUEUE_HOLD", "REQUEUE_FED", "RESV_DEL_HOLD", "SUSPENDED"})
    running = frozenset({"RUNNING", "CONFIGURING", "COMPLETING", "STAGE_OUT", "SIGNALING", "RESIZING"})

    def states(self, job_ids: list[str]) -> dict[str, JobState]:
        done = _call(["squeue", "-h", "-t", "all", "-j", ",".join(job_ids), "-o", "%i %T %r"])
        if done is None or (done.returncode and "Invalid job id" not in done.stderr):
            error = "squeue failed" if done is None else _message(done)
            return {j: JobState(j, "unknown", error) for j in job_ids}
        return _fill(parse_squeue(done.stdout), job_ids)

    def by_name(self, job_name: str) -> list[str]:
        done = _call(["squeue", "-h", "-n", job_name, "-o", "%i"])
        return [] if done is None or done.returncode else done.stdout.split()


class Pbs(BatchSystem):
    name, submit, cancel_command = "PBS", "qsub", "qdel"
    waiting = frozenset({"Q", "H", "W", "T", "M"})
    running = frozenset({"R", "E", "B", "S", "U"})

    def states(self, job_ids: list[str]) -> dict[str, JobState]:
        # qstat exits non-zero when any id has finished or is unknown, yet lists the others.
        done = _call(["qstat", "-f", *job_ids])
        if done is None or (
            done.returncode
            and not done.stdout.strip()
            and "Unknown Job" not in done.stderr
            and "finished" not in done.stderr
        ):
            error = "qstat failed" if done is None else _message(done)
            return {j: JobState(j, "unknown", error) for j in job_ids}
        return _fill(parse_qstat(done.stdout), job_ids)

    def by_name(self, job_name: str) -> list[str]:
        done = _call(["qselect", "-N", job_name])
        return [] if done is None or done.returncode else [_short_id(j) for j in done.stdout.split()]


SLURM, PBS = Slurm(), Pbs()


def batch_system(kind: str) -> BatchSystem:
    """:data:`SLURM` or :data:`PBS` for ``cluster: slurm|pbs``."""
    return SLURM if kind == "slurm" else PBS


def _fill(found: dict[str, JobState], job_ids: list[str]) -> dict[str, JobState]:
    return {j: found.get(j, JobState(j, "gone")) for j in job_ids}


def _call(cmd: list[str]) -> subprocess.CompletedProcess | None:
    """Run a batch client; None when it is missing or hangs."""
    try:
        return subprocess.run(cmd, capture_output=True, text=True, timeout=COMMAND_TIMEOUT_S)
    except (OSError, subprocess.TimeoutExpired):
        return None


def _message(done: subprocess.CompletedProcess) -> str:
    return " ".join((done.stderr.strip() or done.stdout.strip() or f"exit status {done.returncode}").split())


def _short_id(job_id: str) -> str:
    """``12.pbs-server`` → ``12``: the number dask-jobqueue takes from qsub's output."""
    m = re.match(r"\d+", job_id)
    return m.group() if m else job_id


def parse_squeue(text: str) -> dict[str, JobState]:
    """States from ``squeue -h -o "%i %T %r"`` lines (a reason ``None`` is no reason)."""
    out = {}
    for line in text.splitlines():
        parts = line.split(maxsplit=2)
        if len(parts) >= 2:
            reason = parts[2].strip() if len(parts) == 3 and parts[2].strip() != "None" else ""
            out[parts[0]] = JobState(parts[0], parts[1], reason)
    return out


def parse_qstat(text: str) -> dict[str, JobState]:
    """States from ``qstat -f`` blocks (``Job Id:``, ``job_state =``, ``comment =``), ids shortened."""
    out: dict[str, JobState] = {}
    job, fields, key = None, {}, None

    def close() -> None:
        if job is not None:
            state, comment = fields.get("job_state", "unknown"), fields.get("comment", "")
            out[job] = JobState(job, state.strip(), " ".join(comment.split()))

    for line in text.splitlines():
        if line.startswith("Job Id:"):
            close()
            job, fields, key = _short_id(line.split(":", 1)[1].strip()), {}, None
        elif " = " in line and not line.startswith("\t"):
            key, value = line.split(" = ", 1)
            key = key.strip()
            fields[key] = value
        elif line.startswith("\t") and key:  # qstat wraps long values (even mid-word) onto a tab
            fields[key] += line[1:]
    close()
    return out


# -- submission --------------------------------------------------------------------------------
def submission_message(exc: BaseException) -> str:
    """The batch client's own words from a failed dask-jobqueue submission, on one line.

    dask-jobqueue raises ``RuntimeError("Command exited with non-zero exit code. … stdout: …
    stderr: …")`` (``Job._call``): keep what sbatch/qsub printed. Other failures (the client
    not found, no job id in its output) keep their message.
    """
    text = str(exc)
    m = re.search(r"\nstdout:\n(.*?)\nstderr:\n(.*)\Z", text, re.S)
    if m:
        text = m.group(2).strip() or m.group(1).strip() or text
    return " ".join(text.split()) or type(exc).__name__


def supervised_job_cls(base: type) -> type:
    """``base`` (dask-jobqueue's ``SLURMJob``/``PBSJob``), keeping a failed submission's message.

    dask-jobqueue submits from a task on its event loop that nobody awaits: a rejected job
    script becomes an asyncio traceback and the run waits for workers forever. Jobs of this
    class keep the message in ``submit_error`` for :class:`~ensml.cluster.supervisor.Supervisor`,
    which stops the run with it. ``job_cls`` is dask-jobqueue's documented way to give a
    cluster its own job class; ``start`` and ``close`` are the job interface of distributed's
    ``ProcessInterface``.
    """
    from distributed.core import Status

    class SupervisedJob(base):  # type: ignore[misc, valid-type]
        submit_error: str | None = None

        async def start(self) -> None:
            try:
                await super().start()
            except Exception as exc:  # sbatch/qsub failed: whatever the cause, keep its words
                self.submit_error = submission_message(exc)
                # "running" ends the submission for distributed's bookkeeping (it asserts it);
                # the supervisor stops the run on submit_error before any worker is expected.
                self.status = Status.running

        async def close(self) -> None:
            await super().close()  # scancel/qdel (a job that was never submitted has no id)
            self.status = Status.closed

    SupervisedJob.__name__ = SupervisedJob.__qualname__ = base.__name__
    return SupervisedJob


# -- PBS Pro resources ---------------------------------------------------------------------------
#: Host-level resources of PBS Pro that belong in a ``select`` chunk, not in a job-wide ``-l``.
CHUNK_RESOURCES = frozenset(
    {
        "ncpus",
        "mem",
        "vmem",
        "ngpus",
        "mpiprocs",
        "ompthreads",
        "naccelerators",
        "accelerator",
        "accelerator_model",
        "accelerator_memory",
    }
)


def pbs_resources(cores: int, memory: str, directives: list[str]) -> tuple[str, list[str]]:
    """One ``select`` chunk for the job and the directives left once its parts are taken out.

    PBS Pro reads a job's resources from one ``-l select=[N:]res=value[:res=value…]`` and
    refuses chunk-level resources (``ncpus``, ``mem``, ``ngpus`` …) given beside it as plain
    ``-l`` resources. So ``-l select=1:ngpus=1`` or ``-l ngpus=1`` among ``directives`` adds
    ``ngpus=1`` to the chunk made of ``cores`` and ``memory``; job-wide resources in the same
    directive (``-l select=1:ngpus=1,place=excl``) stay as ``-l place=excl``.

    Returns
    -------
    resource_spec, directives
        ``select=1:ncpus=…:mem=…[:…]`` (for dask-jobqueue's ``resource_spec``) and the rest.

    Raises
    ------
    EnsmlError
        For several chunks (``+``) or nodes (``select=2``): a job is one node's workers; and for
        ``ncpus``/``mem`` that contradict ``jobqueue.cores``/``memory``.
    """
    chunk = {"ncpus": str(cores), "mem": memory}
    rest = []
    for directive in directives:
        m = re.fullmatch(r"-l\s*(\S.*)", directive.strip())
        if not m:
            rest.append(directive)
            continue
        kept = []
        for item in m.group(1).split(","):
            name, _, value = item.strip().partition("=")
            if name == "select":
                chunk = _merged(chunk, _select_chunk(value, directive), directive)
            elif name in CHUNK_RESOURCES:
                chunk = _merged(chunk, {name: value}, directive)
            else:
                kept.append(item.strip())
        rest += [f"-l {','.join(kept)}"] if kept else []
    return "select=1:" + ":".join(f"{k}={v}" for k, v in chunk.items()), rest


def _select_chunk(value: str, directive: str) -> dict[str, str]:
    if "+" in value:
        raise EnsmlError(
            f"jobqueue.job_extra_directives {directive!r}: one select chunk per job, got several"
        )
    parts = value.split(":")
    if parts and parts[0].isdigit():
        if parts[0] != "1":
            raise EnsmlError(
                f"jobqueue.job_extra_directives {directive!r}: a job runs one node's workers "
                "(select=1); ask for more jobs with jobqueue.jobs"
            )
        parts = parts[1:]
    chunk = {}
    for part in parts:
        name, eq, v = part.partition("=")
        if not eq or not name or not v:
            raise EnsmlError(f"jobqueue.job_extra_directives {directive!r}: {part!r} is not resource=value")
        chunk[name] = v
    return chunk


def _merged(chunk: dict[str, str], extra: dict[str, Any], directive: str) -> dict[str, str]:
    """``chunk`` with the resources of ``extra`` (from ``directive``) added; refuses a ``ncpus`` or
    ``mem`` that contradicts the chunk's."""
    chunk = dict(chunk)
    for name, value in extra.items():
        option = {"ncpus": "cores", "mem": "memory"}.get(name)
        if option and str(value).lower() != chunk[name].lower():
            raise EnsmlError(
                f"jobqueue.job_extra_directives {directive!r} asks for {name}={value}, jobqueue.{option} "
                f"for {chunk[name]}: set jobqueue.{option} instead"
            )
        chunk[name] = str(value)
    return chunk
