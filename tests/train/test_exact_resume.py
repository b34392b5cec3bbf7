"""A run killed with SIGKILL and resumed from ``last.ckpt`` ends exactly as the uninterrupted run.

Every run is a real ``ensml fit`` subprocess (same environment, one thread). The killed run
stops at the start of an epoch (:class:`tests.train.pausing.PauseAtEpoch`, after the earlier
epochs wrote ``last.ckpt``) and its whole process group, every rank included, gets SIGKILL.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest
import torch

from ensml.train.checkpoints import AtomicCheckpointIO
from ensml.train.run_folder import RunFolder
from tests.cli.process import cli_env, finish, kill_group, run_cli, start_cli
from tests.conftest import SMOKE, tiny_data_args

pytestmark = pytest.mark.slow  # killed and resumed training runs (minutes)

EPOCHS, KILL_AT = 3, 2  # kill at the start of the last epoch: last.ckpt holds epochs 0 and 1
LAST = Path("runs/smoke/checkpoints/last.ckpt")


def spatial_strategy() -> str:
    init = {"lat": 1, "lon": 2, "timeout_s": 60}
    return json.dumps({"class_path": "ensml.train.strategies.SpatialParallelStrategy", "init_args": init})


# Each named setting at least once: member_sampling first and random, num_workers 0 and 2, and
# the spatial-parallel strategy (2 ranks, gloo).
CASES = {
    "first-workers0": [],
    "random-workers2": ["--data.member_sampling=random", "--data.num_workers=2"],
    "spatial-2-ranks": [
        "--data.member_sampling=random",
        "--trainer.devices=2",
        f"--trainer.strategy={spatial_strategy()}",
    ],
}


def fit_args(data: dict[str, Path], extra: list[str]) -> list[str]:
    return [
        "fit",
        "--config",
        SMOKE,
        *tiny_data_args(data),
        f"--trainer.max_epochs={EPOCHS}",
        "--trainer.log_every_n_steps=1",
        *extra,
    ]


def killed_then_resumed(args: list[str], work: Path, whole: Path) -> None:
    """Run ``args`` in ``work``, SIGKILL it at epoch ``KILL_AT``, resume it from last.ckpt.

    The uninterrupted run (in ``whole``) runs beside the killed one.
    """
    pause = {"class_path": "tests.train.pausing.PauseAtEpoch", "init_args": {"epoch": KILL_AT}}
    reference = start_cli(args, whole)
    proc = start_cli([*args, f"--trainer.callbacks+={json.dumps(pause)}"], work)
    deadline = time.monotonic() + 150
    while not (work / "ready").exists():
        if proc.poll() is not None or time.monotonic() > deadline:
            out = finish(proc, "the run to kill").stdout
            pytest.fail(f"the run ended (or hung) before epoch {KILL_AT}:\n{out[-3000:]}")
        time.sleep(0.05)
    kill_group(proc)
    proc.wait(timeout=30)
    assert proc.returncode == -9
    state = torch.load(work / LAST, map_location="cpu", weights_only=False)
    assert state["epoch"] == KILL_AT - 1, "last.ckpt is not the last finished epoch"
    done = finish(reference, "the uninterrupted run")
    assert done.returncode == 0, done.stdout[-3000:]
    done = run_cli([*args, f"--ckpt_path={LAST}"], work)
    assert done.returncode == 0, done.stdout[-3000:]


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


@pytest.mark.distributed
@pytest.mark.parametrize("case", CASES)
def test_killed_and_resumed_run_ends_as_the_uninterrupted_one(
    case: str, tiny_data: dict[str, Path], tmp_path: Path
) -> None:
    args = fit_args(tiny_data, CASES[case])
    (tmp_path / "whole").mkdir()
    (tmp_path / "killed").mkdir()
    killed_then_resumed(args, tmp_path / "killed", tmp_path / "whole")

    whole = torch.load(tmp_path / "whole" / LAST, map_location="cpu", weights_only=False)
    resumed = torch.load(tmp_path / "killed" / LAST, map_location="cpu", weights_only=False)
    assert (resumed["epoch"], resumed["global_step"]) == (whole["epoch"], whole["global_step"])
    assert_same_tensors(whole["state_dict"], resumed["state_dict"], "weights")
    assert_same_tensors(whole["optimizer_states"], resumed["optimizer_states"], "optimizer state")
    assert_same_tensors(whole["lr_schedulers"], resumed["lr_schedulers"], "LR schedule")
    metrics = [pd.read_csv(tmp_path / run / "runs/smoke/metrics.csv") for run in ("whole", "killed")]
    pd.testing.assert_frame_equal(metrics[0], metrics[1])


KILL_DURING_SAVE = """
import os, signal, sys, torch
from ensml.train.checkpoints import AtomicCheckpointIO
from ensml.train.run_folder import RunFolder

class Bomb:  # SIGKILLs the process while torch.save is writing the checkpoint
    def __reduce__(self):
        os.kill(os.getpid(), signal.SIGKILL)

run = RunFolder(sys.argv[1], {"checkpoints": "dir"})
run.open()
io = AtomicCheckpointIO(run)
last = os.path.join(sys.argv[1], "checkpoints", "last.ckpt")
io.save_checkpoint({"weights": torch.arange(4.0)}, last)
io.save_checkpoint({"weights": torch.zeros(1 << 20), "bomb": Bomb()}, last)
"""


def test_a_kill_during_a_checkpoint_save_leaves_the_previous_one_whole(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    last = run_dir / "checkpoints" / "last.ckpt"
    proc = subprocess.run([sys.executable, "-c", KILL_DURING_SAVE, str(run_dir)], env=cli_env(), timeout=300)
    assert proc.returncode == -9
    assert torch.equal(torch.load(last, weights_only=True)["weights"], torch.arange(4.0))
    assert [p.name for p in last.parent.iterdir()] == ["last.ckpt"]  # the killed write is staged
    staging = run_dir / ".ensml" / "staging"
    assert [p.name for p in staging.iterdir()]  # ... in the killed run's staging folder
    run = RunFolder(run_dir, {"checkpoints": "dir"})
    run.open()  # the next run removes it
    try:
        assert [p.name for p in staging.iterdir()] == [run.staging.run_id]
        AtomicCheckpointIO(run).save_checkpoint({"weights": torch.ones(2)}, last)
    finally:
        run.close()
    assert sorted(p.name for p in run_dir.iterdir()) == [".ensml", "checkpoints"]
    assert list(staging.iterdir()) == [] and [p.name for p in last.parent.iterdir()] == ["last.ckpt"]
    assert torch.equal(torch.load(last, weights_only=True)["weights"], torch.ones(2))
