"""``fit`` and ``predict`` keep the user's results: a resume keeps the earlier metrics, last.ckpt
is the last epoch, and bad data or unwritable outputs fail with one line before anything is written.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch
import xarray as xr

from ensml.cli.main import main
from tests.conftest import SMOKE, tiny_data_args

CKPTS = Path("runs/smoke/checkpoints")
METRICS = Path("runs/smoke/metrics.csv")
STEPS_PER_EPOCH = 3  # limit_train_batches of the smoke config
SKIP_AS_ROOT = pytest.mark.skipif(
    hasattr(os, "geteuid") and os.geteuid() == 0, reason="root writes into read-only folders"
)


def fit(data: dict[str, Path], *extra: str) -> list[str]:
    return ["fit", "--config", SMOKE, *tiny_data_args(data), "--trainer.log_every_n_steps=1", *extra]


def epoch_and_step(path: Path) -> tuple[int, int]:
    state = torch.load(path, map_location="cpu", weights_only=False)
    return state["epoch"], state["global_step"]


def tree(root: Path) -> dict[str, float]:
    """Every path under ``root`` with its modification time."""
    return {str(p.relative_to(root)): p.lstat().st_mtime for p in root.rglob("*")}


def run_failing(args: list[str], capsys: pytest.CaptureFixture, *match: str) -> str:
    """Run ``ensml args`` in the current folder: exit 1, one ``ensml:`` line, nothing written."""
    before = tree(Path.cwd())
    assert main(args) == 1
    line = capsys.readouterr().err.strip().splitlines()[-1]
    assert line.startswith("ensml: "), line
    for text in match:
        assert text in line, line
    assert tree(Path.cwd()) == before, "output left behind"
    return line


@pytest.fixture(scope="module")
def resumed(tiny_data, tmp_path_factory) -> tuple[Path, pd.DataFrame, pd.DataFrame]:
    """A 1-epoch fit (its last.ckpt kept as epoch0.ckpt) resumed to 2 epochs from last.ckpt."""
    work = tmp_path_factory.mktemp("resume")
    with pytest.MonkeyPatch.context() as mp:
        mp.chdir(work)
        assert main(fit(tiny_data, "--trainer.max_epochs=1")) == 0
        first = pd.read_csv(METRICS)
        shutil.copy(CKPTS / "last.ckpt", "epoch0.ckpt")
        assert main(fit(tiny_data, "--trainer.max_epochs=2", f"--ckpt_path={CKPTS / 'last.ckpt'}")) == 0
        second = pd.read_csv(METRICS)
    return work, first, second


def logged_steps(metrics: pd.DataFrame) -> list[int]:
    return metrics["step"].tolist()


# One row per training step and one validation row (at the epoch's last step) per epoch.
TWO_EPOCHS = [0, 1, 2, 2, 3, 4, 5, 5]


@pytest.mark.slow
def test_resume_keeps_earlier_metrics(resumed) -> None:
    _, first, second = resumed
    assert logged_steps(first) == TWO_EPOCHS[:4]
    assert logged_steps(second) == TWO_EPOCHS
    assert second["epoch"].tolist() == [0] * 4 + [1] * 4
    pd.testing.assert_frame_equal(second.iloc[:4][first.columns], first)
    assert second["val/loss"].notna().sum() == 2


@pytest.mark.slow
def test_resume_from_older_checkpoint_does_not_repeat_rows(resumed, tiny_data, monkeypatch) -> None:
    work, first, _ = resumed
    monkeypatch.chdir(work)
    assert epoch_and_step(Path("epoch0.ckpt")) == (0, STEPS_PER_EPOCH)
    assert main(fit(tiny_data, "--trainer.max_epochs=2", "--ckpt_path=epoch0.ckpt")) == 0
    metrics = pd.read_csv(METRICS)
    assert logged_steps(metrics) == TWO_EPOCHS  # epoch 1 logged once, by the resumed run
    pd.testing.assert_frame_equal(metrics.iloc[:4][first.columns], first)
    assert not list(work.rglob("*.tmp"))


@pytest.mark.slow
def test_last_checkpoint_is_the_last_epoch(tiny_data, tmp_path, monkeypatch) -> None:
    # lr = 1e-30 (0 is refused): steps below float32's resolution leave the weights as they were, so
    # validation never improves after the first epoch and best.ckpt stays at epoch 0.
    monkeypatch.chdir(tmp_path)
    assert main(fit(tiny_data, "--trainer.max_epochs=3", "--model.init_args.lr=1e-30")) == 0
    assert epoch_and_step(CKPTS / "best.ckpt") == (0, STEPS_PER_EPOCH)
    assert epoch_and_step(CKPTS / "last.ckpt") == (2, 3 * STEPS_PER_EPOCH)
    assert sorted(p.name for p in CKPTS.iterdir()) == ["best.ckpt", "last.ckpt"]


# -- bad data: one line, and no run folder, config.yaml or hparams.yaml left behind -------------
def _repeat_init(ds: xr.Dataset) -> xr.Dataset:
    return xr.concat([ds.isel(init_time=slice(0, 6)), ds.isel(init_time=slice(5, None))], "init_time")


def _extra_dim(ds: xr.Dataset) -> xr.Dataset:
    return ds.expand_dims(ensemble=2)


@pytest.mark.parametrize(
    ("which", "change", "match"),
    [
        ("forecast", _repeat_init, "has 1 repeated init_time value(s), e.g. 2017-01-16"),
        ("forecast", _extra_dim, "unexpected ensemble"),
        ("analysis", _extra_dim, "unexpected ensemble"),
    ],
    ids=["repeated-init-time", "extra-dim-forecast", "extra-dim-analysis"],
)
def test_bad_data_fails_before_writing(
    tiny_data, tmp_path, monkeypatch, capsys, which, change, match
) -> None:
    bad = tmp_path / f"{which}-bad.nc"
    with xr.open_dataset(tiny_data[which]) as ds:
        change(ds.load()).to_netcdf(bad)
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.chdir(work)
    line = run_failing(fit(tiny_data, f"--data.{which}={bad}"), capsys, match)
    assert f"{which} file {bad}" in line


# -- unwritable run folders: fail before training, touching nothing -----------------------------
def _make(paths: dict[str, str]) -> None:
    for path, kind in paths.items():
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        Path(path).mkdir() if kind == "dir" else Path(path).write_text("a user's file\n")


@pytest.mark.parametrize(
    ("layout", "extra", "match"),
    [
        ({"runs": "file"}, [], ("fit: out_dir runs/smoke:", "runs is a file, not a folder")),
        ({"runs/smoke": "file"}, [], ("fit: out_dir runs/smoke is a file, not a folder",)),
        (
            {"runs/smoke/checkpoints": "file"},
            [],
            ("out_dir runs/smoke holds 1 entry ensml did not write (e.g. checkpoints)",),
        ),
        (
            {"root": "file"},
            ["--trainer.default_root_dir=root"],
            ("fit: default_root_dir root is a file, not a folder",),
        ),
    ],
    ids=["runs-is-file", "run-folder-is-file", "checkpoints-is-file", "default-root-is-file"],
)
def test_fit_into_a_file_fails(tiny_data, tmp_path, monkeypatch, capsys, layout, extra, match) -> None:
    monkeypatch.chdir(tmp_path)
    _make(layout)
    run_failing(fit(tiny_data, *extra), capsys, *match)


@SKIP_AS_ROOT
def test_fit_into_read_only_folder_fails(tiny_data, tmp_path, monkeypatch, capsys) -> None:
    monkeypatch.chdir(tmp_path)
    Path("runs/smoke").mkdir(parents=True)
    Path("runs/smoke").chmod(0o555)
    try:
        run_failing(fit(tiny_data), capsys, "fit: out_dir runs/smoke:", "is not writable (permission denied)")
    finally:
        Path("runs/smoke").chmod(0o755)


def test_fit_where_the_kernel_refuses_writes_fails(tiny_data, tmp_path, monkeypatch, capsys) -> None:
    # os.access says the working folder is not writable (as for a user without rights; runs as root too).
    monkeypatch.chdir(tmp_path)
    access = os.access
    refused = tmp_path.resolve()
    monkeypatch.setattr(
        os, "access", lambda path, mode: access(path, mode) and Path(path).resolve() != refused
    )
    run_failing(fit(tiny_data), capsys, "fit: out_dir runs/smoke:", "is not writable (permission denied)")


# -- predict: the output folder is made; an unwritable one fails before predicting --------------
def predict(data: dict[str, Path], ckpt: Path) -> list[str]:
    return ["predict", "--config", SMOKE, *tiny_data_args(data), f"--ckpt_path={ckpt}"]


@pytest.mark.slow
def test_predict_creates_output_folder(resumed, tiny_data, tmp_path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    assert main(predict(tiny_data, resumed[0] / "epoch0.ckpt")) == 0
    with xr.open_dataset("runs/smoke/predictions.nc") as pred:
        assert np.isfinite(pred["z_std"]).all()


@pytest.mark.parametrize(
    ("layout", "match"),
    [
        ({"runs": "file"}, "runs is a file, not a folder"),
        ({"runs/smoke/predictions.nc": "dir"}, "predictions.nc exists and ensml did not write it"),
    ],
    ids=["parent-is-file", "output-is-folder"],
)
def test_predict_to_unwritable_path_fails_first(
    resumed, tiny_data, tmp_path, monkeypatch, capsys, layout, match
) -> None:
    monkeypatch.chdir(tmp_path)
    _make(layout)

    def never(*args, **kwargs):
        raise AssertionError("predicted before checking the output path")

    monkeypatch.setattr("ensml.train.tasks.MixedTask.predict_step", never)
    run_failing(predict(tiny_data, resumed[0] / "epoch0.ckpt"), capsys, "predict: out_dir runs/smoke", match)


@SKIP_AS_ROOT
def test_predict_to_read_only_folder_fails_first(resumed, tiny_data, tmp_path, monkeypatch, capsys) -> None:
    monkeypatch.chdir(tmp_path)
    Path("runs").mkdir()
    Path("runs").chmod(0o555)
    try:
        run_failing(
            predict(tiny_data, resumed[0] / "epoch0.ckpt"),
            capsys,
            "predict: out_dir runs/smoke:",
            "runs is not writable (permission denied)",
        )
    finally:
        Path("runs").chmod(0o755)
