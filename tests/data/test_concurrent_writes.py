"""Runs that write the same output at the same time leave one whole, valid result.

Each writer writes its own temporary and renames it into place; replacing a folder takes two
renames, which writers take in turn (a lock on the parent folder). Tested with real concurrent
``ensml`` subprocesses and with many processes racing on one folder.
"""

from __future__ import annotations

import json
import multiprocessing as mp
import time
from pathlib import Path

import xarray as xr

from ensml.data.writers import atomic_path
from tests.cli.process import finish, start_cli
from tests.conftest import SMOKE, tiny_data_args


def _both(args: list[str], work: Path) -> None:
    """Start ``ensml args`` twice at once in ``work``; both must succeed."""
    runs = [start_cli(args, work) for _ in range(2)]
    for i, run in enumerate(runs):
        done = finish(run, f"concurrent run {i}")
        assert done.returncode == 0, done.stdout[-3000:]
    left = [p for p in work.rglob("*") if p.name.endswith(".tmp") or p.parent.name == "staging"]
    assert not left, f"temporaries were left behind: {left}"


def test_a_second_predict_into_the_same_folder_is_refused_while_the_first_runs(
    tiny_data, fitted, tmp_path: Path
) -> None:
    ckpt = fitted / "runs/smoke/checkpoints/best.ckpt"
    args = ["predict", "--config", SMOKE, *tiny_data_args(tiny_data), f"--ckpt_path={ckpt}"]
    (tmp_path / "runs/smoke").mkdir(parents=True)
    pause = {"class_path": "tests.train.pausing.PauseAtPredict"}
    first = start_cli([*args, f"--trainer.callbacks+={json.dumps(pause)}"], tmp_path)
    deadline = time.monotonic() + 150
    while not (tmp_path / "ready").exists():
        assert first.poll() is None and time.monotonic() < deadline, "the first predict did not start"
        time.sleep(0.05)
    second = finish(start_cli(args, tmp_path), "the second predict")
    (tmp_path / "go").write_text("go\n")
    assert finish(first, "the first predict").returncode == 0
    lines = second.stdout.strip().splitlines()
    assert second.returncode == 1 and "Traceback" not in second.stdout, second.stdout[-3000:]
    assert lines[-1].startswith("ensml: predict: out_dir runs/smoke is in use by ensml predict (pid"), lines
    with xr.open_dataset(tmp_path / "runs/smoke/predictions.nc") as ours:
        with xr.open_dataset(fitted / "runs/smoke/predictions.nc") as single:
            xr.testing.assert_allclose(ours.load(), single.load())


def _write_folder(path: str, tag: int, rounds: int, start) -> None:
    start.wait()
    for r in range(rounds):
        with atomic_path(Path(path)) as tmp:
            tmp.mkdir()
            for name in ("a.txt", "b.txt", "c.txt"):
                (tmp / name).write_text(f"{tag}-{r}\n")


def test_many_processes_replacing_one_folder(tmp_path: Path) -> None:
    writers = 4
    ctx = mp.get_context("fork")
    start = ctx.Barrier(writers)
    path = tmp_path / "out"
    procs = [ctx.Process(target=_write_folder, args=(str(path), i, 25, start)) for i in range(writers)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(60)
    assert [p.exitcode for p in procs] == [0] * writers  # no writer failed on another's rename
    contents = {(path / name).read_text() for name in ("a.txt", "b.txt", "c.txt")}
    assert len(contents) == 1 and sorted(p.name for p in path.iterdir()) == ["a.txt", "b.txt", "c.txt"]
    assert [p.name for p in tmp_path.iterdir()] == ["out"]  # no temporary left
