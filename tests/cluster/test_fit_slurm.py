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
from tests.cluster.fit_jobs import batch_script, output, submit, wait_job
from tests.conftest import SMOKE, tiny_data_args

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


def fit_args(tiny_data: dict[str, Path], *extra: str) -> list[str]:
    return ["--config", SMOKE, *tiny_data_args(tiny_data, **STEPS), "--trainer.strategy=ddp", *extra]


def local_reference(tiny_data: dict[str, Path], folder: Path) -> Path:
    """The same fit on 2 ranks that Lightning starts on this machine (no SLURM)."""
    folder.mkdir()
    done = run_cli(["fit", *fit_args(tiny_data), "--trainer.devices=2"], folder, timeout=240)
    assert done.returncode == 0, done.stdout[-3000:]
    return folder


def assert_same_tensors(a: object, b: object, where: str) -> None:
    if isinstance(a, torch.Tensor):
        assert isinstance(b, torch.Tensor) and torch.equal(a, b), f"{where} differs"
    elif isinstance(a, dict):
        assert isinstance(b, dict) and a.keys() == b.keys(), f"{where}: keys differ"
        for key in a:
            assert_same_tensors(a[key], b[key], f"{where}.{key}")
    elif isinstance(a, list | tuple):
        assert len(a) == len(b), f"{where}: lengths differ"
        for i, (x, y) in enumerate(zip(a, b)):
            assert_same_tensors(x, y, f"{where}[{i}]")
    else:
        assert a == b, f"{where}: {a!r} != {b!r}"


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
def reference(tiny_data: dict[str, Path], tmp_path_factory: pytest.TempPathFactory) -> Path:
    return local_reference(tiny_data, tmp_path_factory.mktemp("local") / "run")


@pytest.mark.timeout(600, func_only=True)
def test_a_ddp_fit_through_sbatch_and_srun_ends_as_the_local_one(slurm, tiny_data, reference, tmp_path):
    job = submit(slurm, batch_script(tmp_path), fit_args(tiny_data), tmp_path)
    fields = wait_job(slurm, job)
    log = output(tmp_path, job)
    assert (fields["JobState"], fields["Restarts"]) == ("COMPLETED", "0"), describe(fields, log)
    assert not ensml_lines(log), log[-3000:]
    assert "Initializing distributed: GLOBAL_RANK: 1, MEMBER: 2/2" in log  # srun started both ranks
    assert_same_run(reference, tmp_path)


@pytest.mark.timeout(600, func_only=True)
@pytest.mark.parametrize("workers", [0, 2])  # SLURM signals the loader's worker processes too
def test_a_preempted_fit_requeues_itself_and_ends_as_the_uninterrupted_one(
    slurm, tiny_data, reference, tmp_path, workers
):
    wait = {"class_path": "tests.cluster.fit_jobs.WaitAtBatch", "init_args": {"epoch": 1, "batch": 2}}
    extra = [f"--trainer.callbacks+={json.dumps(wait)}", f"--data.num_workers={workers}"]
    job = submit(slurm, batch_script(tmp_path), fit_args(tiny_data, *extra), tmp_path)
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
    assert_same_run(reference, tmp_path)
