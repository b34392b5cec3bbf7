"""``ensml fit`` as SLURM batch jobs for the tests: the shipped batch script, shrunk to this node.

The script is ``configs/slurm_fit.sh`` itself with its ``#SBATCH`` lines edited as a user would
(2 tasks of 1 CPU, no GPU, a 5-minute limit), so the tests run what the guide tells users to run.
"""

from __future__ import annotations

import re
import subprocess
import sys
import time
from pathlib import Path

import lightning as L
import pytest
from lightning.pytorch.callbacks import Callback

from tests.cli.process import REPO, cli_env
from tests.cluster.slurm import Slurm

SCRIPT = REPO / "configs" / "slurm_fit.sh"
#: Job states after which a job does nothing more (squeue / scontrol words).
ENDED = ("COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "OUT_OF_MEMORY", "BOOT_FAIL", "DEADLINE")


def batch_script(folder: Path, tasks: int = 2, srun_line: str | None = None) -> Path:
    """``configs/slurm_fit.sh`` for this node: ``tasks`` tasks of one CPU, no GPU, 5 minutes.

    ``srun_line``: a command to run instead of the script's own (a user's mistake to test).
    """
    text = SCRIPT.read_text()
    edits = {
        r"--ntasks-per-node=\d+": f"--ntasks-per-node={tasks}",
        r"--cpus-per-task=\d+": "--cpus-per-task=1",
        r"--time=[\d:]+": "--time=00:05:00",
        r"#SBATCH --gpus-per-task=\d+\n": "",
    }
    for pattern, new in edits.items():
        text, n = re.subn(pattern, new, text)
        assert n == 1, f"{SCRIPT} no longer has {pattern!r}: update the tests with the script"
    if srun_line is not None:
        text, n = re.subn(r"srun \$\{ENSML.*?\n(  .*\n)?", srun_line + "\n", text)
        assert n == 1, "the script's srun line changed: update the tests with the script"
    path = folder / "job.sh"
    path.write_text(text)
    return path


def job_env(slurm: Slurm) -> dict[str, str]:
    """What sbatch passes on to the job: this ensml (the repo) and this SLURM; one thread."""
    return {**cli_env(), "SLURM_CONF": str(slurm.conf), "ENSML": f"{sys.executable} -m ensml.cli.main"}


def submit(slurm: Slurm, script: Path, args: list[str], cwd: Path, *options: str) -> str:
    """``sbatch --parsable [OPTIONS] SCRIPT ARGS`` in ``cwd``; the job id."""
    done = subprocess.run(
        ["sbatch", "--parsable", f"--chdir={cwd}", *options, str(script), *args],
        capture_output=True,
        text=True,
        env=job_env(slurm),
        timeout=30,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout.strip().split(";")[0]


def job_fields(slurm: Slurm, job: str) -> dict[str, str]:
    """``scontrol show job`` as a mapping (JobState, Restarts, Reason, ExitCode...)."""
    out = slurm.run("scontrol", "show", "job", "-o", job)
    return dict(word.split("=", 1) for word in out.split() if "=" in word)


def wait_job(
    slurm: Slurm, job: str, timeout: float = 240.0, until: tuple[str, ...] = ENDED
) -> dict[str, str]:
    """Poll the job until its state is one of ``until``; its fields then."""
    end = time.monotonic() + timeout
    fields: dict[str, str] = {}
    while time.monotonic() < end:
        fields = job_fields(slurm, job)
        if fields.get("JobState") in until:
            return fields
        if fields.get("JobState") == "PENDING" and fields.get("Reason") == "BeginTime":
            # A requeued job waits a while before it may start again: start it now.
            subprocess.run(
                ["scontrol", "update", f"JobId={job}", "StartTime=now"], env=slurm.env(), timeout=30
            )
        time.sleep(0.5)
    slurm.run("scancel", job)
    pytest.fail(f"SLURM job {job} not {'/'.join(until)} within {timeout:.0f} s: {fields}")


def output(cwd: Path, job: str) -> str:
    """The job's batch output (the script's ``--output=ensml-fit-%j.out``)."""
    return (cwd / f"ensml-fit-{job}.out").read_text(errors="replace")


class WaitAtBatch(Callback):
    """At batch ``batch`` of epoch ``epoch`` (before it runs), write ``ready`` and wait for ``go``.

    A test sends SLURM's signal meanwhile, so the run is preempted at the end of exactly that
    batch. Every rank waits; the wait is bounded so a forgotten run goes on by itself.
    """

    def __init__(
        self, epoch: int, batch: int, ready: str = "ready", go: str = "go", wait_s: float = 120
    ) -> None:
        self.epoch, self.batch, self.ready, self.go, self.wait_s = epoch, batch, Path(ready), Path(go), wait_s

    def on_train_batch_start(
        self, trainer: L.Trainer, pl_module: L.LightningModule, batch, batch_idx: int
    ) -> None:
        if (trainer.current_epoch, batch_idx) != (self.epoch, self.batch):
            return
        if trainer.is_global_zero:
            self.ready.write_text(f"epoch {self.epoch} batch {self.batch}\n")
        end = time.monotonic() + self.wait_s
        while not self.go.exists() and time.monotonic() < end:
            time.sleep(0.05)
