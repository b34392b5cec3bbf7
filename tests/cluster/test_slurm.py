"""``ensml postprocess --cluster slurm`` on a real single-node SLURM: it never hangs, never lies.

Each case runs the command as a subprocess (signals need one) and checks its exit status, its
one-line message (no traceback), the manifest (every unit once, for complete runs) and that
``squeue`` shows no job of it left.
"""

from __future__ import annotations

import signal
import time
from pathlib import Path

import pandas as pd
import pytest

from ensml.errors import interrupted_line
from ensml.postprocess.manifest import MANIFEST
from tests.cluster.runs import finish, last_line, start, wait_for_records
from tests.cluster.slurm import Slurm
from tests.postprocess.conftest import pp_args

pytestmark = pytest.mark.distributed

# One CPU and 1 GB per job (two jobs fit the 2-CPU node); short timeouts keep the failures quick.
JOB = [
    "--cluster=slurm",
    "--jobqueue.cores=1",
    "--jobqueue.processes=1",
    "--jobqueue.memory=1GB",
    "--jobqueue.walltime=00:10:00",
    "--jobqueue.pending_timeout=60",
    "--jobqueue.no_worker_timeout=60",
]


def _args(fitted: Path, forecasts: Path, out: Path, tiny_data: dict, *extra: str) -> list[str]:
    ckpt = fitted / "runs/smoke/checkpoints/best.ckpt"
    return pp_args([ckpt], forecasts / "*.nc", out, *JOB, *extra, analysis=tiny_data["analysis"])


def _assert_no_job_left(slurm: Slurm, timeout: float = 15.0) -> None:
    end = time.monotonic() + timeout
    while (jobs := slurm.jobs()) and time.monotonic() < end:  # cancelled jobs pass by COMPLETING
        time.sleep(0.3)
    assert not jobs, jobs


def _assert_exactly_once(out: Path, inputs: Path) -> pd.DataFrame:
    names = sorted(p.name for p in inputs.glob("*.nc"))
    assert sorted(p.name for p in out.glob("*.nc")) == names
    assert not [p for p in out.rglob("*") if p.name.endswith(".tmp")]
    records = pd.read_json(out / MANIFEST, lines=True)
    assert len(records) == len(names) and records["key"].is_unique and (records["status"] == "done").all()
    return records


def _running_job(slurm: Slurm, timeout: float = 60.0) -> str:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        running = [j.split()[0] for j in slurm.jobs() if j.endswith(" RUNNING")]
        if running:
            return running[0]
        time.sleep(0.2)
    pytest.fail(f"no job running: {slurm.jobs()}")


@pytest.mark.timeout(150, func_only=True)  # the fixtures start SLURM and fit a model first
def test_three_jobs_on_a_two_cpu_node_count_the_two_that_ran(
    slurm, fitted, year_archive, tiny_data, tmp_path
):
    out = tmp_path / "out"
    code, stdout, stderr = finish(
        start(_args(fitted, year_archive, out, tiny_data, "--jobqueue.jobs=3"), tmp_path, slurm.env())
    )
    assert code == 0, stderr
    assert "Traceback" not in stdout + stderr and "ensml:" not in stderr, stderr
    records = _assert_exactly_once(out, year_archive)
    summary = " ".join(stdout.split())
    # the third job waited for a CPU the whole run: the summary counts the jobs that worked
    ran = int(summary.split(" SLURM job")[0].rsplit(" ", 1)[1])
    assert 1 <= ran <= 2 and records["worker"].nunique() <= ran, summary
    assert "3 SLURM" not in summary
    _assert_no_job_left(slurm)
    # the jobs' logs are in the output folder's state area, not in the folder ensml ran in
    assert not list(tmp_path.glob("*.out")) and not list(tmp_path.glob("*.err"))
    assert list((out / ".ensml" / "logs").glob("*.err")), list(out.rglob("*"))


@pytest.mark.timeout(480, func_only=True)  # two runs; on a busy 2-core machine the rerun takes minutes
def test_job_cancelled_mid_run_stops_the_run_and_a_rerun_finishes(
    slurm, fitted, year_archive, tiny_data, tmp_path
):
    out = tmp_path / "out"
    args = _args(fitted, year_archive, out, tiny_data, "--jobqueue.jobs=1", "--jobqueue.no_worker_timeout=3")
    proc = start(args, tmp_path, slurm.env())
    wait_for_records(out / MANIFEST, 5, proc)
    job = _running_job(slurm)
    slurm.run("scancel", job)
    cancelled = time.monotonic()
    code, stdout, stderr = finish(proc)
    assert time.monotonic() - cancelled < 30  # the no-worker timeout (3 s) and the clean-up
    assert code == 2, stderr  # part of the work was done
    line = last_line(stdout, stderr)
    assert line.startswith("ensml: all dask workers lost: none for 3 s (jobqueue.no_worker_timeout)"), line
    assert f"SLURM job {job} CANCELLED" in line and "run the same command again" in line, line
    _assert_no_job_left(slurm)
    done = len(pd.read_json(out / MANIFEST, lines=True))
    assert 5 <= done < len(list(year_archive.glob("*.nc")))
    code, stdout, stderr = finish(start(args, tmp_path, slurm.env()), timeout=300)  # ~117 units left
    assert code == 0, stderr
    _assert_exactly_once(out, year_archive)
    _assert_no_job_left(slurm)


@pytest.mark.timeout(90, func_only=True)  # the fixtures start SLURM and fit a model first
def test_a_rejected_job_script_is_one_line(slurm, fitted, archive_dir, tiny_data, tmp_path):
    # the cluster guide's GPU example, on a node without GPUs
    args = _args(
        fitted, archive_dir, tmp_path / "out", tiny_data, "--jobqueue.job_extra_directives=[--gres=gpu:1]"
    )
    code, stdout, stderr = finish(start(args, tmp_path, slurm.env()))
    assert code == 1, stderr
    line = last_line(stdout, stderr)
    sbatch = "sbatch: error: Invalid generic resource (gres) specification"
    assert line == f"ensml: sbatch refused the job script: {sbatch}"
    _assert_no_job_left(slurm)


@pytest.mark.timeout(90, func_only=True)  # the fixtures start SLURM and fit a model first
def test_a_job_that_cannot_start_is_cancelled_with_the_reason(
    slurm, fitted, archive_dir, tiny_data, tmp_path
):
    # 4 cores on a 2-CPU node: SLURM queues it for ever
    args = _args(
        fitted, archive_dir, tmp_path / "out", tiny_data, "--jobqueue.cores=4", "--jobqueue.pending_timeout=3"
    )
    code, stdout, stderr = finish(start(args, tmp_path, slurm.env()))
    assert code == 1, stderr
    line = last_line(stdout, stderr)
    assert (
        line.startswith("ensml: SLURM job ") and " PENDING (PartitionConfig) did not start within 3 s" in line
    ), line
    assert line.endswith("(jobqueue.pending_timeout; reason from squeue); cancelled; no unit was done"), line
    _assert_no_job_left(slurm)


@pytest.mark.timeout(120, func_only=True)  # the fixtures start SLURM and fit a model first
@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_a_signal_cancels_the_jobs(sig, slurm, fitted, year_archive, tiny_data, tmp_path):
    out = tmp_path / "out"
    args = _args(fitted, year_archive, out, tiny_data, "--jobqueue.jobs=1")
    if sig == signal.SIGTERM:  # while the job waits in the queue (4 cores on 2 CPUs)
        args.append("--jobqueue.cores=4")
    proc = start(args, tmp_path, slurm.env())
    if sig == signal.SIGINT:  # mid-run
        wait_for_records(out / MANIFEST, 3, proc)
    else:
        end = time.monotonic() + 60
        while not slurm.jobs() and time.monotonic() < end:
            time.sleep(0.2)
    job = slurm.jobs()[0].split()[0]
    proc.send_signal(sig)
    code, stdout, stderr = finish(proc, timeout=60)
    assert code == 128 + sig, stderr
    line = last_line(stdout, stderr)
    assert line.startswith(f"ensml: {interrupted_line(sig, ' after ')}"), line
    assert f"SLURM job {job} cancelled; run the same command again to finish" in line, line
    _assert_no_job_left(slurm)
