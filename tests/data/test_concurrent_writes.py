"""Runs that write the same output at the same time leave one whole, valid result.

Each writer writes its own temporary and renames it into place; replacing a folder takes two
renames, which writers take in turn (a lock on the parent folder). Tested with real concurrent
``ensml`` subprocesses and with many processes racing on one folder.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
import xarray as xr

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


@pytest.mark.slow  # two processes
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


@pytest.mark.slow
def test_two_evaluates_into_one_folder_leave_the_whole_results_of_one(tiny_data, tmp_path: Path) -> None:
    # evaluate holds its folder only while it writes (a refused run creates nothing): of two runs
    # started together each writes whole, or stops in one line if the other is writing just then;
    # the folder holds one run's results whole, never a mix.
    fc, an = f"--forecast={tiny_data['forecast']}", f"--analysis={tiny_data['analysis']}"
    runs = {k: ["evaluate", fc, an, f"--k={k}", "--leads=48"] for k in (3, 5)}
    started = {k: start_cli([*args, "--out_dir=both"], tmp_path) for k, args in runs.items()}
    done = {k: finish(run, f"evaluate --k {k}") for k, run in started.items()}
    assert 0 in [d.returncode for d in done.values()]
    for d in done.values():
        last = d.stdout.strip().splitlines()[-1]
        assert d.returncode == 0 or (d.returncode == 1 and "is in use by ensml evaluate (pid" in last), last
    for k, args in runs.items():  # each alone, for reference
        assert (
            finish(start_cli([*args, f"--out_dir=alone{k}"], tmp_path), f"evaluate --k {k} alone").returncode
            == 0
        )
    names = ["scores.csv", "decomposition.csv", "scores.md"]
    got = [(tmp_path / "both" / name).read_bytes() for name in names]
    alone = {k: [(tmp_path / f"alone{k}" / name).read_bytes() for name in names] for k in runs}
    assert got in alone.values()
    assert not list((tmp_path / "both/.ensml/staging").iterdir())
