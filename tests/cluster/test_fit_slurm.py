"""``ensml fit`` as a SLURM job (``configs/slurm_fit.sh`` through ``sbatch``/``srun``) on a real SLURM.

- a 2-task gloo DDP fit ends with the weights of the same fit run locally (2 ranks started by
  Lightning), tensor for tensor;
- a fit preempted by ``scancel --signal=USR1`` saves ``preempted.ckpt``, requeues itself and,
  started again by SLURM, ends with the uninterrupted run's weights, optimizer state and
  ``metrics.csv``;
- a job whose tasks disagree with the trainer, or whose ranks are not started by srun, ends in
  one line and writes nothing.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import pandas as pd
import pytest
import torch

from tests.cli.process import run_cli
from tests.cluster.fit_jobs import SCRIPT, batch_script, job_env, output, submit, wait_job
from tests.cluster.runs import finish, start
from tests.conftest import SMOKE, tiny_data_args
from tests.train.test_exact_resume import assert_same_tensors

pytestmark = [pytest.mark.distributed, pytest.mark.slow]

LAST = "runs/smoke/checkpoints/last.ckpt"
#: 3 epochs of 8 batches of 2 samples per rank: seconds, with room to stop mid-epoch.
STEPS = {
    "trainer.max_epochs": 3,
    "trainer.limit_train_batches": 8,
    "trainer.limit_val_batches": 1,
    "trainer.log_every_n_steps": 1,
    "data.batch_size": 2,
}


#: The strategies run as SLURM jobs: DDP, and eager-SGD waiting for both ranks (deterministic:
#: DDP's average), which checks for the signal at every batch (decentralised strategies check every
#: ``sigterm_every`` batches).
EAGER = {
    "class_path": "ensml.train.decentralised.EagerStrategy",
    "init_args": {"quorum": 2, "sigterm_every": 1},
}
STRATEGIES = {"ddp": "--trainer.strategy=ddp", "eager": f"--trainer.strategy={json.dumps(EAGER)}"}


def fit_args(tiny_data: dict[str, Path], *extra: str, strategy: str = "ddp") -> list[str]:
    return ["--config", SMOKE, *tiny_data_args(tiny_data, **STEPS), STRATEGIES[strategy], *extra]


def local_reference(tiny_data: dict[str, Path], folder: Path, strategy: str) -> Path:
    """The same fit on 2 ranks that Lightning starts on this machine (no SLURM)."""
    folder.mkdir()
    done = run_cli(
        ["fit", *fit_args(tiny_data, strategy=strategy), "--trainer.devices=2"], folder, timeout=240
    )
    assert done.returncode == 0, done.stdout[-3000:]
    return folder


def assert_same_run(reference: Path, run: Path) -> None:
    want = torch.load(reference / LAST, map_location="cpu", weights_only=False)
    got = torch.load(run / LAST, map_location="cpu", weights_only=False)
    assert (got["epoch"], got["global_step"]) == (want["epoch"], want["global_step"]) == (2, 24)
    assert_same_tensors(want["state_dict"], got["state_dict"], "weights")
    assert_same_tensors(want["optimizer_states"], got["optimizer_states"], "optimizer state")
    assert_same_tensors(want["lr_schedulers"], got["lr_schedulers"], "LR schedule")
    metrics = [pd.read_csv(folder / "runs/smoke/metrics.csv") for folder in (reference, run)]
    pd.testing.assert_frame_equal(metrics[0], metrics[1])


def describe(fields: dict[str, str], log: str) -> str:
    keys = ("JobState", "Reason", "ExitCode", "Restarts", "RunTime")
    return " ".join(f"{k}={fields.get(k)}" for k in keys) + "\n" + log[-4000:]


def ensml_lines(text: str) -> list[str]:
    assert "Traceback" not in text, text[-3000:]
    return [line for line in text.splitlines() if line.startswith("ensml: ")]


@pytest.fixture(scope="module")
def references(tiny_data: dict[str, Path], tmp_path_factory: pytest.TempPathFactory):
    """The local run of each strategy, made when a test first asks for it."""
    made: dict[str, Path] = {}

    def reference(strategy: str) -> Path:
        if strategy not in made:
            made[strategy] = local_reference(tiny_data, tmp_path_factory.mktemp("local") / strategy, strategy)
        return made[strategy]

    return reference


@pytest.mark.timeout(600, func_only=True)
def test_a_ddp_fit_through_sbatch_and_srun_ends_as_the_local_one(slurm, tiny_data, references, tmp_path):
    job = submit(slurm, batch_script(tmp_path), fit_args(tiny_data), tmp_path)
    fields = wait_job(slurm, job)
    log = output(tmp_path, job)
    assert (fields["JobState"], fields["Restarts"]) == ("COMPLETED", "0"), describe(fields, log)
    assert not ensml_lines(log), log[-3000:]
    assert "Initializing distributed: GLOBAL_RANK: 1, MEMBER: 2/2" in log  # srun started both ranks
    assert_same_run(references("ddp"), tmp_path)


@pytest.mark.timeout(600, func_only=True)
@pytest.mark.parametrize(
    ("strategy", "workers"),
    [("ddp", 0), ("ddp", 2), ("eager", 0)],  # SLURM signals the loader's worker processes too
    ids=["ddp", "ddp-2-workers", "eager"],
)
def test_a_preempted_fit_requeues_itself_and_ends_as_the_uninterrupted_one(
    slurm, tiny_data, references, tmp_path, strategy, workers
):
    wait = {"class_path": "tests.cluster.fit_jobs.WaitAtBatch", "init_args": {"epoch": 1, "batch": 2}}
    extra = [f"--trainer.callbacks+={json.dumps(wait)}", f"--data.num_workers={workers}"]
    job = submit(slurm, batch_script(tmp_path), fit_args(tiny_data, *extra, strategy=strategy), tmp_path)
    wait_job(slurm, job, until=("RUNNING",))
    ready, end = tmp_path / "ready", time.monotonic() + 180
    while not ready.exists() and time.monotonic() < end:  # the run waits before epoch 1's batch 2
        time.sleep(0.05)
    assert ready.exists(), output(tmp_path, job)[-3000:]
    slurm.run("scancel", "--signal=USR1", job)  # as #SBATCH --signal=USR1@120 does before the limit
    (tmp_path / "go").write_text("")
    fields = wait_job(slurm, job, timeout=300)
    log = output(tmp_path, job)
    assert (fields["JobState"], fields["Restarts"]) == ("COMPLETED", "1"), describe(fields, log)
    preempted = tmp_path / "runs/smoke/checkpoints/preempted.ckpt"
    assert ensml_lines(log) == [
        f"ensml: fit: SLURM job {job} preempted (SIGUSR1) at epoch 1, batch 3 of 8: saved {preempted}; "
        "requeued: the job resumes from it when SLURM starts it again"
    ], log[-3000:]
    assert f"fit: SLURM job {job} requeued (1×): resuming from {preempted}" in log
    saved = torch.load(preempted, map_location="cpu", weights_only=False)
    assert saved["global_step"] == 11  # 8 batches of epoch 0 and 3 of epoch 1
    assert_same_run(references(strategy), tmp_path)


@pytest.mark.timeout(600, func_only=True)
def test_a_preempted_job_slurm_will_not_requeue_says_how_to_go_on(slurm, tiny_data, references, tmp_path):
    wait = {"class_path": "tests.cluster.fit_jobs.WaitAtBatch", "init_args": {"epoch": 1, "batch": 2}}
    args = fit_args(tiny_data, f"--trainer.callbacks+={json.dumps(wait)}")
    job = submit(slurm, batch_script(tmp_path), args, tmp_path, "--no-requeue")
    ready, end = tmp_path / "ready", time.monotonic() + 180
    while not ready.exists() and time.monotonic() < end:
        time.sleep(0.05)
    assert ready.exists(), output(tmp_path, job)[-3000:]
    slurm.run("scancel", "--signal=USR1", job)
    (tmp_path / "go").write_text("")
    fields = wait_job(slurm, job)
    log = output(tmp_path, job)
    assert (fields["JobState"], fields["ExitCode"], fields["Restarts"]) == ("FAILED", "2:0", "0"), describe(
        fields, log
    )
    preempted = tmp_path / "runs/smoke/checkpoints/preempted.ckpt"
    lines = ensml_lines(log)
    assert len(lines) == 1, log[-3000:]
    assert lines[0].startswith(
        f"ensml: fit: SLURM job {job} preempted (SIGUSR1) at epoch 1, batch 3 of 8: saved "
    ), lines
    assert f"; SLURM did not requeue the job (scontrol requeue {job}: " in lines[0], lines
    assert lines[0].endswith(f"): submit it again with --ckpt_path {preempted} to go on"), lines
    # as the line says: a new job with --ckpt_path ends as the uninterrupted run
    again = submit(
        slurm, batch_script(tmp_path), [*fit_args(tiny_data), f"--ckpt_path={preempted}"], tmp_path
    )
    fields = wait_job(slurm, again)
    assert fields["JobState"] == "COMPLETED", describe(fields, output(tmp_path, again))
    assert_same_run(references("ddp"), tmp_path)


def _files(folder: Path) -> set[str]:
    return {str(p.relative_to(folder)) for p in folder.rglob("*")}


@pytest.mark.timeout(300, func_only=True)
@pytest.mark.parametrize(
    ("srun_line", "says"),
    [
        (
            'srun ${ENSML:-ensml} fit "$@" --trainer.devices=4',
            "fit: trainer.devices 4 × trainer.num_nodes 1 disagrees with SLURM job {job}: 2 tasks per node",
        ),
        (
            '${ENSML:-ensml} fit "$@" --trainer.devices=2',
            "fit: SLURM job {job} has 2 tasks but ensml runs in its batch script, as one process",
        ),
    ],
    ids=["devices-unlike-tasks", "no-srun"],
)
def test_a_job_whose_ranks_are_not_its_tasks_ends_in_one_line_and_writes_nothing(
    slurm, tiny_data, tmp_path, srun_line, says
):
    script = batch_script(tmp_path, srun_line=srun_line)
    job = submit(slurm, script, fit_args(tiny_data), tmp_path)
    fields = wait_job(slurm, job)
    log = output(tmp_path, job)
    assert fields["JobState"] == "FAILED" and fields["ExitCode"] == "1:0", describe(fields, log)
    lines = ensml_lines(log)  # both ranks stop; rank 0 says why
    assert len(lines) == 1 and lines[0].startswith("ensml: " + says.format(job=job)), log[-3000:]
    assert _files(tmp_path) == {"job.sh", f"ensml-fit-{job}.out"}


def _sbatch(slurm, args: list[str], cwd: Path, timeout: float = 120) -> tuple[int, list[str], list[str]]:
    """``ensml fit ARGS`` (with ``--sbatch``) as a subprocess: exit status, stdout and stderr lines."""
    code, out, err = finish(start(["fit", *args], cwd, job_env(slurm)), timeout=timeout)
    assert "Traceback" not in out + err, err
    return code, out.splitlines(), [line for line in err.splitlines() if line.strip()]


def _assert_no_job_left(slurm) -> None:
    end = time.monotonic() + 15
    while (jobs := slurm.jobs()) and time.monotonic() < end:
        time.sleep(0.3)
    assert not jobs, jobs


@pytest.mark.timeout(300, func_only=True)
def test_sbatch_submits_the_checked_fit_and_says_when_it_started(slurm, tiny_data, tmp_path):
    script = batch_script(tmp_path)
    short = ["--trainer.max_epochs=1", "--trainer.limit_train_batches=2"]
    code, out, err = _sbatch(slurm, [*fit_args(tiny_data, *short), "--sbatch", str(script)], tmp_path)
    assert code == 0, err
    assert len(out) == 1 and out[0].startswith("fit: SLURM job "), out
    job = out[0].split()[3]
    assert (
        out[0] == f"fit: SLURM job {job} RUNNING on {slurm.node}; its output: {tmp_path}/ensml-fit-{job}.out"
    )
    fields = wait_job(slurm, job)
    assert fields["JobState"] == "COMPLETED", describe(fields, output(tmp_path, job))
    assert (tmp_path / LAST).is_file()


@pytest.mark.timeout(180, func_only=True)
def test_sbatch_refuses_bad_options_before_submitting(slurm, tiny_data, tmp_path):
    script = batch_script(tmp_path)
    code, _, err = _sbatch(
        slurm, [*fit_args(tiny_data), "--trainer.bogus=1", "--sbatch", str(script)], tmp_path
    )
    assert code == 1 and len(err) == 1 and err[0].startswith("ensml: fit: ") and "bogus" in err[0], err
    assert not slurm.jobs() and _files(tmp_path) == {"job.sh"}


@pytest.mark.timeout(180, func_only=True)
def test_a_rejected_job_script_is_one_line(slurm, tiny_data, tmp_path):
    # the shipped script asks for a GPU per task: this node has none
    code, out, err = _sbatch(slurm, [*fit_args(tiny_data), f"--sbatch={SCRIPT}"], tmp_path)
    assert code == 1, err
    sbatch = "sbatch: error: Invalid generic resource (gres) specification"
    assert err == [f"ensml: fit: sbatch refused the job script {SCRIPT}: {sbatch}"]
    assert not out and not _files(tmp_path)
    _assert_no_job_left(slurm)


@pytest.mark.timeout(180, func_only=True)
def test_a_job_that_cannot_start_is_cancelled_with_the_reason(slurm, tiny_data, tmp_path):
    script = batch_script(tmp_path, tasks=4)  # 4 tasks of a CPU each on a 2-CPU node: queued for ever
    args = [*fit_args(tiny_data), "--sbatch", str(script), "--sbatch_pending_timeout=3s"]
    code, _, err = _sbatch(slurm, args, tmp_path)
    assert code == 1 and len(err) == 1, err
    assert err[0].startswith("ensml: fit: SLURM job ") and err[0].endswith(
        " PENDING (PartitionConfig) did not start within 3 s (--sbatch_pending_timeout; reason from squeue); "
        "cancelled; nothing was trained"
    ), err
    assert _files(tmp_path) == {"job.sh"}
    _assert_no_job_left(slurm)
