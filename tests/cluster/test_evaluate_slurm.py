"""``ensml evaluate --cluster slurm`` on a real single-node SLURM: the tables of one process.

The command runs as a subprocess with SLURM's clients pointed at the test's SLURM; its tables
must be byte-identical to those of the same command in this process (``cluster: none``), no job
of it may be left in ``squeue``, and the jobs' batch logs go to ``<out_dir>/.ensml/logs``. A job
that can never start ends in one line, nothing written.
"""

from __future__ import annotations

import filecmp
import time
from pathlib import Path

import pytest

from ensml.cli.main import main
from tests.cluster.runs import finish, start
from tests.cluster.slurm import Slurm
from tests.cluster.test_slurm import JOB  # one CPU and 1 GB a job, short timeouts

pytestmark = pytest.mark.distributed

TABLES = ("scores.csv", "scores.md", "decomposition.csv", "decomposition.md")


def _args(tiny_data: dict, out: Path, *extra: str) -> list[str]:
    args = ["evaluate", "--forecast", str(tiny_data["forecast"]), "--analysis", str(tiny_data["analysis"])]
    args += ["--oracle", str(tiny_data["oracle"]), "--variables", "z", "--leads", "[24h, 48h]"]
    return [*args, "--out_dir", str(out), *extra]


def _assert_no_job_left(slurm: Slurm, timeout: float = 15.0) -> None:
    end = time.monotonic() + timeout
    while (jobs := slurm.jobs()) and time.monotonic() < end:  # cancelled jobs pass by COMPLETING
        time.sleep(0.3)
    assert not jobs, jobs


@pytest.mark.timeout(300, func_only=True)  # the fixture starts SLURM first
def test_evaluate_on_two_slurm_jobs_writes_the_tables_of_one_process(slurm, tiny_data, tmp_path):
    assert main(_args(tiny_data, tmp_path / "one")) == 0
    out = tmp_path / "two"
    args = _args(tiny_data, out, *JOB, "--jobqueue.jobs=2", "--init_block=10")
    code, stdout, stderr = finish(start(args, tmp_path, slurm.env()), timeout=240)
    assert code == 0, stderr
    assert "Traceback" not in stdout + stderr and "ensml:" not in stderr, stderr
    assert "blocks of init times on " in stderr and "SLURM job" in stderr, stderr
    for name in TABLES:
        assert filecmp.cmp(tmp_path / "one" / name, out / name, shallow=False), name
    _assert_no_job_left(slurm)
    assert not list(tmp_path.glob("*.out")) and not list(tmp_path.glob("*.err"))  # not in the cwd
    assert list((out / ".ensml" / "logs").glob("*.err")), list(out.rglob("*"))


@pytest.mark.timeout(90, func_only=True)
def test_a_job_that_cannot_start_ends_evaluate_in_one_line(slurm, tiny_data, tmp_path):
    # 4 cores on a 2-CPU node: SLURM queues it for ever
    out = tmp_path / "out"
    args = _args(tiny_data, out, *JOB, "--jobqueue.cores=4", "--jobqueue.pending_timeout=3")
    code, stdout, stderr = finish(start(args, tmp_path, slurm.env()))
    assert code == 1, stderr
    assert "Traceback" not in stdout + stderr
    line = stderr.strip().splitlines()[-1]
    assert line.startswith("ensml: SLURM job "), line
    assert " PENDING (PartitionConfig) did not start within 3 s" in line, line
    assert "cancelled; 0 of " in line and line.endswith(" units scored, nothing written"), line
    _assert_no_job_left(slurm)
    assert not (out / "scores.csv").exists()
