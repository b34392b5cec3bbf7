"""The supervisor's decisions with a fake client, cluster and batch system (no SLURM needed)."""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest

from ensml.cluster.batch import JobState, Slurm
from ensml.cluster.supervisor import Supervisor
from ensml.errors import EnsmlError, PartialFailure

pytestmark = pytest.mark.timeout(30)


@dataclass
class Job:
    job_id: str | None = None
    submit_error: str | None = None


@dataclass
class Cluster:
    workers: dict[str, Job] = field(default_factory=dict)  # dask-jobqueue's job name → job
    job_name: str = "ensml-test"
    closed: bool = False

    def close(self, timeout: float | None = None) -> None:
        self.closed = True


@dataclass
class Client:
    names: list[str] = field(default_factory=list)  # the connected workers' names

    def scheduler_info(self) -> dict:
        return {"workers": {f"tcp://h:{i}": {"name": n} for i, n in enumerate(self.names)}}


class Queue(Slurm):
    """SLURM's state words, answers from a dict; cancelling ends the jobs."""

    def __init__(self, states: dict[str, JobState]) -> None:
        self.table, self.cancelled, self.named = states, [], []

    def states(self, job_ids: list[str]) -> dict[str, JobState]:
        return {j: self.table.get(j, JobState(j, "gone")) for j in job_ids}

    def by_name(self, job_name: str) -> list[str]:
        return list(self.named)

    def cancel(self, job_ids: list[str]) -> str:
        self.cancelled += job_ids
        for j in job_ids:
            self.table[j] = JobState(j, "CANCELLED")
        return ""


class Clock:
    def __init__(self) -> None:
        self.t = 1000.0

    def __call__(self) -> float:
        return self.t


def _supervisor(
    client: Client, cluster: Cluster | None, queue: Queue | None, **kw
) -> tuple[Supervisor, Clock, list]:
    clock, said = Clock(), []
    sup = Supervisor(
        client,
        cluster,
        queue,
        kw.pop("pending", 600.0),
        kw.pop("no_worker", 300.0),
        "the cluster at tcp://x:1",
        clock=clock,
        say=said.append,
    )
    return sup, clock, said


def _run(sup: Supervisor, clock: Clock, seconds: int, done: int = 0, total: int = 10) -> None:
    for _ in range(seconds):
        sup.watch(done, total)
        clock.t += 1


def test_a_rejected_submission_is_its_own_message() -> None:
    cluster = Cluster(
        {"SLURMCluster-0": Job(submit_error="sbatch: error: Invalid generic resource (gres) specification")}
    )
    sup, _, _ = _supervisor(Client(), cluster, Queue({}))
    with pytest.raises(EnsmlError) as err:
        sup.watch(0, 10)
    assert (
        str(err.value)
        == "sbatch refused the job script: sbatch: error: Invalid generic resource (gres) specification"
    )


def test_waiting_jobs_are_reported_every_30_s_then_cancelled_with_the_reason() -> None:
    queue = Queue({"12": JobState("12", "PENDING", "Resources")})
    cluster = Cluster({"SLURMCluster-0": Job("12"), "SLURMCluster-1": Job()})  # the second: sbatch running
    sup, clock, said = _supervisor(Client(), cluster, queue, pending=65.0, no_worker=5.0)
    _run(sup, clock, 65)  # pending for 65 s: no-worker timeout (5 s) does not apply while jobs wait
    assert (
        said
        == ["postprocess: waiting for 2 SLURM jobs to start (1 pending: Resources; 1 being submitted)"] * 3
    )
    with pytest.raises(EnsmlError) as err:
        _run(sup, clock, 2)
    assert str(err.value) == (
        "SLURM job 12 PENDING (Resources) did not start within 65 s (jobqueue.pending_timeout; reason from "
        "squeue); cancelled; no unit was done"
    )
    sup.shutdown()  # the cluster's close, then what it left is cancelled
    assert cluster.closed and queue.cancelled == ["12"]


def test_all_workers_lost_names_the_jobs_and_keeps_the_units_done() -> None:
    queue = Queue({"12": JobState("12", "RUNNING"), "13": JobState("13", "RUNNING")})
    client = Client(["SLURMCluster-0-0", "SLURMCluster-0-1", "SLURMCluster-1-0"])  # processes: 2
    cluster = Cluster({"SLURMCluster-0": Job("12"), "SLURMCluster-1": Job("13")})
    sup, clock, said = _supervisor(client, cluster, queue, no_worker=5.0)
    _run(sup, clock, 10, done=4)
    assert sup.ran == {"12", "13"} and sup.where() == "2 SLURM jobs (12, 13)"
    client.names.clear()
    queue.table.update({"12": JobState("12", "CANCELLED"), "13": JobState("13", "NODE_FAIL")})
    _run(sup, clock, 5, done=7)  # 5 s without a worker: not yet
    with pytest.raises(PartialFailure) as err:
        _run(sup, clock, 2, done=7)
    assert str(err.value) == (
        "all dask workers lost: none for 5 s (jobqueue.no_worker_timeout); SLURM jobs 12 CANCELLED, "
        "13 NODE_FAIL; 7 of 10 units done and recorded; run the same command again for the other 3"
    )
    assert not said  # no waiting lines once the jobs ran


def test_a_job_that_ran_no_worker() -> None:
    queue = Queue({"12": JobState("12", "FAILED")})
    sup, clock, _ = _supervisor(Client(), Cluster({"SLURMCluster-0": Job("12")}), queue, no_worker=3.0)
    with pytest.raises(EnsmlError) as err:
        _run(sup, clock, 10)
    assert not isinstance(err.value, PartialFailure)
    assert str(err.value) == (
        "no dask worker joined: none for 3 s (jobqueue.no_worker_timeout); SLURM job 12 FAILED (see the "
        "jobs' batch logs); no unit was done"
    )


def test_a_job_still_queued_while_others_work_is_cancelled_with_a_note() -> None:
    queue = Queue({"12": JobState("12", "RUNNING"), "13": JobState("13", "PENDING", "Priority")})
    cluster = Cluster({"SLURMCluster-0": Job("12"), "SLURMCluster-1": Job("13")})
    sup, clock, said = _supervisor(Client(["SLURMCluster-0"]), cluster, queue, pending=10.0)
    _run(sup, clock, 15, done=3)
    assert queue.cancelled == ["13"] and sup.where() == "1 SLURM job (12)"
    assert said == [
        "postprocess: SLURM job 13 PENDING (Priority) did not start within 10 s: cancelled; going on with "
        "the 1 that started"
    ]


def test_no_worker_at_a_joined_cluster() -> None:
    sup, clock, _ = _supervisor(Client(), None, None, no_worker=4.0)
    _run(sup, clock, 5, done=0)
    with pytest.raises(EnsmlError) as err:
        _run(sup, clock, 2)
    assert str(err.value) == (
        "no dask worker joined: none for 4 s (jobqueue.no_worker_timeout) at the cluster at tcp://x:1; "
        "no unit was done"
    )
    assert sup.where() == "the cluster at tcp://x:1"


def test_nothing_left_to_do_is_no_reason_to_stop() -> None:
    sup, clock, _ = _supervisor(Client(), None, None, no_worker=1.0)
    _run(sup, clock, 10, done=10, total=10)


def test_an_unreachable_scheduler_counts_as_no_worker() -> None:
    class Gone(Client):
        def scheduler_info(self) -> dict:
            raise OSError("connection refused")

    sup, clock, _ = _supervisor(Gone(), None, None, no_worker=2.0)
    with pytest.raises(EnsmlError, match="no dask worker joined: none for 2 s"):
        _run(sup, clock, 5)


def test_shutdown_cancels_what_the_cluster_left_and_says_when_it_cannot(monkeypatch) -> None:
    import ensml.cluster.supervisor as supervisor

    monkeypatch.setattr(supervisor, "GONE_S", 0.0)
    monkeypatch.setattr(supervisor.time, "sleep", lambda s: None)

    class Stuck(Queue):
        def cancel(self, job_ids: list[str]) -> str:
            self.cancelled += job_ids
            return "scancel: error: Kill job error on job id 14: Access/permission denied"

    queue = Stuck({"12": JobState("12", "RUNNING"), "14": JobState("14", "PENDING")})
    queue.named = ["14"]  # submitted by this run, its id never seen by the cluster object
    cluster = Cluster({"SLURMCluster-0": Job("12")})
    sup, _, said = _supervisor(Client(), cluster, queue)
    sup.shutdown()
    assert cluster.closed and queue.cancelled[:2] == ["12", "14"] and sup.cancelled == ["12", "14"]
    assert said == [
        "ensml: could not cancel SLURM jobs 12 RUNNING, 14 PENDING: scancel: error: Kill job error on job "
        "id 14: Access/permission denied; cancel them with scancel"
    ]


def test_started_jobs_get_time_for_their_first_worker_to_connect() -> None:
    queue = Queue({"12": JobState("12", "RUNNING")})
    sup, clock, _ = _supervisor(Client(), Cluster({"SLURMCluster-0": Job("12")}), queue, no_worker=3.0)
    _run(sup, clock, 100)  # a worker importing torch on a busy node: no error before JOIN_S
    with pytest.raises(EnsmlError, match=r"^no dask worker joined: none for 2\.0 min .*SLURM job 12 RUNNING"):
        _run(sup, clock, 30)
