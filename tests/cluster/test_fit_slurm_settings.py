"""Bad SLURM settings of ``ensml fit`` end in one line and write nothing (no SLURM needed).

:func:`ensml.train.slurm.check_tasks` reads SLURM's variables; here they are set by hand, as
``srun`` would set them for each task.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

from ensml.errors import EnsmlError
from ensml.train.slurm import SlurmJob, check_tasks
from tests.conftest import SMOKE, tiny_data_args

#: What srun sets in each task of ``sbatch --nodes=1 --ntasks-per-node=2`` (rank 0).
STEP = {
    "SLURM_JOB_ID": "12",
    "SLURM_JOB_NAME": "ensml-fit",
    "SLURM_NTASKS": "2",
    "SLURM_NTASKS_PER_NODE": "2",
    "SLURM_NNODES": "1",
    "SLURM_PROCID": "0",
    "SLURM_LOCALID": "0",
    "SLURM_NODEID": "0",
    "SLURM_NODELIST": "localhost",
    "SLURM_STEP_ID": "0",
}


def test_the_job_is_read_from_slurms_variables() -> None:
    assert SlurmJob.current({}) is None
    assert SlurmJob.current({**STEP, "SLURM_JOB_NAME": "interactive"}) is None  # Lightning's rule
    assert SlurmJob.current(STEP) == SlurmJob("12", 0, 0)
    array = {**STEP, "SLURM_ARRAY_JOB_ID": "10", "SLURM_ARRAY_TASK_ID": "3", "SLURM_RESTART_COUNT": "2"}
    assert SlurmJob.current(array) == SlurmJob("10_3", 2, 0)


def test_ranks_that_are_the_jobs_tasks_pass() -> None:
    check_tasks({"devices": 2, "num_nodes": 1}, STEP)
    check_tasks({"devices": "2"}, STEP)
    check_tasks({"devices": "auto"}, STEP)  # Lightning decides (and checks) where ensml cannot
    check_tasks({"devices": 4}, {})  # not a SLURM job: nothing to check
    one = {k: v for k, v in STEP.items() if k not in ("SLURM_NTASKS_PER_NODE", "SLURM_STEP_ID")}
    check_tasks({"devices": 1}, {**one, "SLURM_NTASKS": "1"})  # one task, in the batch script


@pytest.mark.parametrize(
    ("trainer", "env", "says"),
    [
        (
            {"devices": 4},
            STEP,
            "fit: trainer.devices 4 × trainer.num_nodes 1 disagrees with SLURM job 12: 2 tasks per node × 1 "
            "nodes (sbatch --ntasks-per-node, --nodes); one rank runs per task, so set --trainer.devices 2 "
            "--trainer.num_nodes 1 or change the batch script",
        ),
        ({"devices": 2, "num_nodes": 2}, STEP, "disagrees with SLURM job 12: 2 tasks per node × 1 nodes"),
        (
            {"devices": 2},
            {k: v for k, v in STEP.items() if k != "SLURM_STEP_ID"},
            "fit: SLURM job 12 has 2 tasks but ensml runs in its batch script, as one process: start it "
            "with srun (srun ensml fit ...), which starts one rank per task",
        ),
        (
            {"devices": 2},
            {k: v for k, v in STEP.items() if k != "SLURM_NTASKS_PER_NODE"},
            "fit: SLURM job 12 asks for --ntasks=2 without --ntasks-per-node",
        ),
    ],
    ids=["devices", "num_nodes", "no-srun", "ntasks"],
)
def test_ranks_that_disagree_with_the_job_are_one_line(trainer, env, says) -> None:
    with pytest.raises(EnsmlError) as err:
        check_tasks(trainer, env)
    assert says in str(err.value)


def _hashes(root: Path) -> dict[str, str]:
    return {
        str(p): hashlib.sha256(p.read_bytes()).hexdigest() if p.is_file() else "dir"
        for p in sorted(root.rglob("*"))
    }


@pytest.mark.slow  # builds the task and opens the tiny data before the trainer
@pytest.mark.parametrize("rank", ["0", "1"])
def test_fit_with_devices_unlike_the_jobs_tasks_writes_nothing(
    tiny_data, tmp_path, monkeypatch, capsys, rank
) -> None:
    from ensml.cli.main import main

    for key, value in {**STEP, "SLURM_PROCID": rank}.items():
        monkeypatch.setenv(key, value)
    monkeypatch.chdir(tmp_path)
    (tmp_path / "runs").mkdir()
    (tmp_path / "runs" / "notes.txt").write_text("a user's file beside the runs\n")
    before = _hashes(tmp_path)
    args = ["fit", "--config", SMOKE, *tiny_data_args(tiny_data), "--trainer.devices=4"]
    if rank == "1":
        with pytest.raises(SystemExit) as stopped:
            main(args)
        assert stopped.value.code == 1
    else:
        assert main(args) == 1
    err = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    if rank == "0":  # rank 0 says it; the other ranks stop with the same status, silently
        assert len(err) == 1 and err[0].startswith("ensml: fit: trainer.devices 4 × trainer.num_nodes 1"), err
    else:
        assert not [line for line in err if line.startswith("ensml:") or "Traceback" in line], err
    assert _hashes(tmp_path) == before


@pytest.mark.parametrize(
    ("options", "says"),
    [
        (["--sbatch", "nothere.sh"], "ensml: fit: --sbatch nothere.sh: no such batch script"),
        (
            ["--sbatch", "job.sh", "--sbatch_pending_timeout=soon"],
            "ensml: fit: --sbatch_pending_timeout: 'soon' is not a duration (seconds, or e.g. 90s, 10m, 2h)",
        ),
        (["--sbatch"], "ensml: fit: option --sbatch needs a value"),
    ],
    ids=["no-script", "timeout", "no-value"],
)
def test_bad_sbatch_options_are_one_line_and_submit_nothing(
    tmp_path, monkeypatch, capsys, options, says
) -> None:
    from ensml.cli.main import main

    monkeypatch.chdir(tmp_path)
    (tmp_path / "job.sh").write_text("#!/bin/bash\n")
    monkeypatch.setenv("PATH", str(tmp_path))  # no sbatch: nothing could be submitted anyway
    before = _hashes(tmp_path)
    assert main(["fit", "--config", SMOKE, *options]) == 1
    err = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert len(err) == 1 and err[0].startswith(says), err
    assert _hashes(tmp_path) == before


def test_sbatch_needs_sbatch_on_path(tmp_path, monkeypatch, capsys) -> None:
    from ensml.cli.main import main

    monkeypatch.chdir(tmp_path)
    (tmp_path / "job.sh").write_text("#!/bin/bash\n")
    monkeypatch.setenv("PATH", str(tmp_path))
    assert main(["fit", "--config", SMOKE, "--sbatch=job.sh"]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [
        "ensml: fit: --sbatch submits with sbatch, which is not on PATH here: run on a SLURM login node"
    ]
