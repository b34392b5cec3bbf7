"""End to end through the ``ensml`` entry point: synth → fit → predict → evaluate, and resume."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import properscoring as ps
import pytest
import xarray as xr

from ensml.cli.main import main
from tests.conftest import SMOKE, cell_area_weights, tiny_data_args


def test_fit_writes_checkpoints_and_logs(fitted: Path) -> None:
    assert (fitted / "runs/smoke/checkpoints/best.ckpt").is_file()
    assert (fitted / "runs/smoke/checkpoints/last.ckpt").is_file()
    metrics = pd.read_csv(fitted / "runs/smoke/metrics.csv")
    assert metrics["val/loss"].notna().sum() == 2  # one validation per epoch
    assert np.isfinite(metrics["val/crps_z500"].dropna()).all()


@pytest.mark.slow
def test_resume_continues_from_checkpoint(fitted: Path, tiny_data: dict[str, Path], monkeypatch) -> None:
    monkeypatch.chdir(fitted)
    ckpt = "runs/smoke/checkpoints/last.ckpt"
    args = [
        "fit",
        "--config",
        SMOKE,
        *tiny_data_args(tiny_data),
        "--trainer.max_epochs=3",
        f"--ckpt_path={ckpt}",
    ]
    assert main(args) == 0
    import torch

    state = torch.load(fitted / ckpt, map_location="cpu", weights_only=False)
    assert state["epoch"] == 2  # epochs 0, 1 from the first fit, 2 from the resumed one


@pytest.mark.slow
def test_predict_then_evaluate(fitted: Path, tiny_data: dict[str, Path], monkeypatch, capsys) -> None:
    monkeypatch.chdir(fitted)
    ckpt = "runs/smoke/checkpoints/best.ckpt"
    assert main(["predict", "--config", SMOKE, *tiny_data_args(tiny_data), f"--ckpt_path={ckpt}"]) == 0
    pred = xr.open_dataset(fitted / "runs/smoke/predictions.nc")
    assert set(pred.data_vars) == {"z_mean", "z_std", "t_mean", "t_std"}
    assert pred["z_mean"].dims == ("init_time", "level", "latitude", "longitude")
    assert pred["t_std"].attrs["units"] == "K"
    assert (pred["z_std"] > 0).all()
    assert pred.sizes["init_time"] > 10  # the whole test split

    spread = pred[["z_std", "t_std"]].assign_attrs(ensml_task="SpreadTask")  # a spread model's file: the std
    spread.to_netcdf("runs/smoke/spread.nc")
    args = [
        "evaluate",
        f"--forecast={tiny_data['forecast']}",
        f"--analysis={tiny_data['analysis']}",
        f"--oracle={tiny_data['oracle']}",
        "--predictions=runs/smoke/predictions.nc",
        "--spread_predictions=runs/smoke/spread.nc",
        "--out_dir=runs/eval",
    ]
    assert main(args) == 0
    assert "CRPS over" in capsys.readouterr().out
    table = pd.read_csv(fitted / "runs/eval/scores.csv")
    expected_rows = {"raw ensemble (10 members)", "raw subset (5 members)", "post-processed (Gaussian)"}
    assert set(table["forecast"]) == expected_rows | {"oracle (Gaussian)"}
    for name in ("scores.md", "spread.csv", "spread.md", "scores.nc"):
        assert (fitted / "runs/eval" / name).is_file()

    # Independent reference: properscoring on the same samples, exact cell-area weights by hand.
    fc = xr.open_dataset(tiny_data["forecast"]).sel(
        init_time=pred["init_time"], lead_time=np.timedelta64(48, "h")
    )
    an = xr.open_dataset(tiny_data["analysis"]).sel(time=pred["valid_time"].values)
    x = fc["z"].sel(level=500).transpose("init_time", "latitude", "longitude", "member").values
    y = an["z"].sel(level=500).values
    crps = ps.crps_ensemble(y.astype(np.float64), x.astype(np.float64)).mean(axis=0)  # (lat, lon)
    w = cell_area_weights(fc["latitude"].values)
    expected = (crps.mean(axis=1) * w).sum() / w.sum()
    row = table[
        (table["variable"] == "z") & (table["level_hPa"] == 500) & table["forecast"].str.startswith("raw ens")
    ]
    np.testing.assert_allclose(row["crps"].item(), expected, rtol=1e-5)
    oracle = table[table["forecast"] == "oracle (Gaussian)"]["crps"].to_numpy()
    raw = table[table["forecast"] == "raw ensemble (10 members)"]["crps"].to_numpy()
    assert (oracle < raw).all()

    # Spread scores by hand: area-weighted RMSE and Pearson correlation over inits and points.
    spread = pd.read_csv(fitted / "runs/eval/spread.csv")
    target = x.std(axis=-1)  # 10-member std, ddof 0
    sample = x[..., :5].std(axis=-1, ddof=1)
    ww = np.broadcast_to(w[None, :, None], target.shape)
    rmse = np.sqrt(np.average((sample - target) ** 2, weights=ww))
    a, b = sample - np.average(sample, weights=ww), target - np.average(target, weights=ww)
    corr = np.average(a * b, weights=ww) / np.sqrt(
        np.average(a * a, weights=ww) * np.average(b * b, weights=ww)
    )
    row = spread[
        (spread["variable"] == "z") & (spread["level_hPa"] == 500) & spread["estimator"].str.startswith("5-")
    ]
    np.testing.assert_allclose(row["rmse"].item(), rmse, rtol=1e-4)
    np.testing.assert_allclose(row["correlation"].item(), corr, rtol=1e-4)


def test_help_lists_every_command_with_a_summary(capsys) -> None:
    from ensml.cli.main import commands

    assert main(["--help"]) == 0
    out = capsys.readouterr().out
    rows = {line.strip().split("  ")[0]: line for line in out.splitlines() if line.startswith("  ")}
    verbs = [words for words, _ in commands()]
    assert {
        "fit",
        "validate",
        "test",
        "predict",
        "data synth",
        "data physics",
        "data archive",
        "evaluate",
        "report",
        "postprocess",
        "plan-parallel",
        "plan-memory",
        "benchmark",
        "prune",
    } == set(verbs)
    for verb in verbs:
        assert verb in rows and len(rows[verb].split(verb, 1)[1].strip()) > 20, (verb, out)


def test_help_loads_no_heavy_library() -> None:
    """``ensml --help`` and every verb's ``--help`` answer without importing torch, xarray or dask."""
    code = (
        "import sys; from ensml.cli.main import main, commands\n"
        "lightning = ('fit', 'validate', 'test', 'predict')\n"
        "for words in ['', *[w for w, _ in commands() if w not in lightning]]:\n"
        "    try: main([*words.split(), '--help'])\n"
        "    except SystemExit: pass\n"
        "heavy = ('torch', 'xarray', 'dask', 'lightning', 'numba', 'pandas')\n"
        "print(sorted(m for m in heavy if m in sys.modules))"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip().splitlines()[-1] == "[]"


def test_version_and_no_command(capsys) -> None:
    from ensml import __version__

    assert main(["--version"]) == 0
    assert capsys.readouterr().out.strip() == f"ensml {__version__}"
    assert main([]) == 1
    assert capsys.readouterr().err.strip() == "ensml: give a command (ensml --help lists them)"


def test_every_option_of_every_command_has_help_text() -> None:
    from jsonargparse import ArgumentParser

    from ensml.cli.main import VERBS, verb_module
    from ensml.cli.verb import load

    targets = [item for verb in VERBS for item in verb_module(verb).COMMANDS.items()]
    for name, target in targets:
        parser = ArgumentParser()
        parser.add_function_arguments(load(target))
        bare = [a.dest for a in parser._actions if a.dest != "help" and not (a.help or "").strip()]
        assert not bare, f"ensml {name.strip()}: options without help text: {bare}"


def test_every_option_of_the_lightning_verbs_has_help_text() -> None:
    import lightning as L
    from jsonargparse import ArgumentParser

    from ensml.data.datamodule import EnsembleDataModule
    from ensml.train import tasks

    task_classes = [
        c for c in vars(tasks).values() if isinstance(c, type) and issubclass(c, tasks.EnsembleTask)
    ]
    assert {c.__name__ for c in task_classes} >= {"MixedTask", "SpreadTask"}
    for cls in [EnsembleDataModule, *task_classes, L.Trainer]:
        parser = ArgumentParser()
        parser.add_class_arguments(cls)
        bare = [a.dest for a in parser._actions if a.dest != "help" and not (a.help or "").strip()]
        assert not bare, f"{cls.__name__}: options without help text: {bare}"


def test_evaluate_without_out_dir_prints_and_writes_nothing(
    tiny_data: dict[str, Path], tmp_path: Path, monkeypatch, capsys
) -> None:
    """``--out_dir null``: the tables on the terminal, no file anywhere (report scores this way)."""
    monkeypatch.chdir(tmp_path)
    args = [
        "evaluate",
        f"--forecast={tiny_data['forecast']}",
        f"--analysis={tiny_data['analysis']}",
        "--out_dir",
        "null",
        "--leads",
        "24",
    ]
    assert main(args) == 0
    out = capsys.readouterr().out
    assert "raw ensemble (10 members)" in out and "CRPS over" in out
    assert "means over the grid: area-weighted (" in out  # how points are weighted, under each table
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize(
    "option", [["--variables", "t", "--levels", "500"], ["--variables", "[t]", "--levels", "[500]"]]
)
def test_one_variable_and_level_need_no_list(option, tiny_data: dict[str, Path], tmp_path: Path) -> None:
    """``--variables t`` works as every CLI users know; the same rows as ``--variables [t]``."""
    out = tmp_path / "eval"
    args = [
        "evaluate",
        f"--forecast={tiny_data['forecast']}",
        f"--analysis={tiny_data['analysis']}",
        f"--out_dir={out}",
        "--leads",
        "24",
        *option,
    ]
    assert main(args) == 0
    table = pd.read_csv(out / "scores.csv")
    assert set(table["variable"]) == {"t"} and set(table["level_hPa"]) == {500.0}
    assert len(table) == 2  # the raw ensemble and its subset, at +24 h


def test_data_synth_says_which_command_wrote_what(tmp_path: Path, capsys) -> None:
    args = ["data", "synth", f"--out_dir={tmp_path / 'out'}", "--n_lat=4", "--n_lon=8"]
    assert main([*args, "--start=2017-01-01", "--end=2017-01-07", "--every_days=3"]) == 0
    last = capsys.readouterr().out.strip().splitlines()[-1]
    assert last == f"ensml data synth: wrote forecast.nc, analysis.nc, oracle.nc to {tmp_path / 'out'}"


@pytest.mark.slow
def test_a_fresh_fit_warns_of_no_log_deletion(tiny_data, tmp_path, monkeypatch, recwarn) -> None:
    # The run folder holds .ensml before Lightning's CSV logger starts: no "Previous log files in
    # this directory will be deleted" for a folder that holds no logs; and on a SLURM login node
    # (an srun on the PATH) no hint to prefix the command with srun.
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "srun").write_text("#!/bin/sh\nexit 0\n")
    (bin_dir / "srun").chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.chdir(tmp_path)
    short = ["--trainer.max_epochs=1", "--trainer.limit_train_batches=1", "--trainer.limit_val_batches=1"]
    assert main(["fit", "--config", SMOKE, *tiny_data_args(tiny_data), *short]) == 0
    assert (tmp_path / "runs/smoke/metrics.csv").is_file()
    assert not [w for w in recwarn if "Experiment logs directory" in str(w.message)]
    assert not [w for w in recwarn if "srun" in str(w.message)]
