"""Runs that write the same output at the same time leave one whole, valid result.

Each writer writes its own temporary and renames it into place; replacing a folder takes two
renames, which writers take in turn (a lock on the parent folder). Tested with real concurrent
``ensml`` subprocesses and with many processes racing on one folder.
"""

from __future__ import annotations

import multiprocessing as mp
from pathlib import Path

import xarray as xr

from ensml.data.writers import atomic_path, remove_temporaries
from tests.cli.process import finish, start_cli
from tests.conftest import SMOKE, tiny_data_args


def _both(args: list[str], work: Path) -> None:
    """Start ``ensml args`` twice at once in ``work``; both must succeed."""
    runs = [start_cli(args, work) for _ in range(2)]
    for i, run in enumerate(runs):
        done = finish(run, f"concurrent run {i}")
        assert done.returncode == 0, done.stdout[-3000:]
    assert not remove_temporaries(work), "a temporary was left behind"


def test_two_predict_runs_into_one_file(tiny_data, fitted, tmp_path: Path) -> None:
    ckpt = fitted / "runs/smoke/checkpoints/best.ckpt"
    args = ["predict", "--config", SMOKE, *tiny_data_args(tiny_data), f"--ckpt_path={ckpt}"]
    (tmp_path / "runs/smoke").mkdir(parents=True)
    _both(args, tmp_path)
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
