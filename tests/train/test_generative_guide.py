"""docs/guide/generative.md's commands, run in order as the guide shows them at their smallest
setting (the guide's data are ``make demo``'s: a small synthetic dataset and its archive here)."""

from __future__ import annotations

import shlex
from pathlib import Path

import pandas as pd
import pytest
import xarray as xr

from ensml.cli.main import main
from ensml.data.archive import archive
from ensml.data.synth.generate import synth
from tests.test_readme import _commands

GUIDE = Path(__file__).resolve().parents[2] / "docs" / "guide" / "generative.md"
NETWORK = "--model.init_args.width 4 --model.init_args.depth 2 --trainer.max_epochs 1 "
NETWORK += "--trainer.limit_train_batches 2 --trainer.limit_val_batches 1"
PERIODS = "--data.train_period [2019-06-01,2019-10-31] --data.val_period [2019-11-01,2019-12-31] "
PERIODS += "--data.test_period [2020-01-01,2020-02-28]"
TINY_NETWORKS = " ".join(
    f"--{part}.{key} {value}"
    for part in ("parametric", "generative")
    for key, value in (("width", 4), ("depth", 2), ("max_epochs", 1))
)
#: What makes each command of the guide small (appended: the last value counts).
SMALLEST = {
    "fit": f"{PERIODS} {NETWORK}",
    "predict": f"{PERIODS} {NETWORK}",
    "postprocess": "--cluster none",
    "benchmark generative": "--synth.n_lat 16 --synth.n_lon 32 --synth.start 2017-01-01 "
    "--synth.end 2017-12-31 --synth.every_days 3 --train_period [2017-01-01,2017-08-31] "
    "--val_period [2017-09-01,2017-10-31] --test_period [2017-11-01,2017-12-31] "
    f"--limit_train_batches 2 {TINY_NETWORKS}",
    "benchmark physics_generative": "--physics.inits 16 --physics.members 3 --physics.spinup_days 2 --k 3 "
    "--members 4 --train_period [2000-01-01,2000-01-06] --val_period [2000-01-07,2000-01-10] "
    f"--test_period [2000-01-11,2000-01-16] --limit_train_batches 2 {TINY_NETWORKS}",
}


@pytest.mark.slow
def test_the_guides_commands_run_from_fit_to_the_benchmark(tmp_path, monkeypatch, capsys):
    files = synth(
        tmp_path / "data" / "synth", n_lat=16, n_lon=32, start="2019-06-01", end="2020-02-28", every_days=3
    )
    archive(str(files["forecast"]), str(tmp_path / "data" / "archive"), period=("2020-01-01", "2020-01-15"))
    monkeypatch.chdir(tmp_path)
    commands = _commands(GUIDE.read_text(encoding="utf-8"))
    assert [c.split()[1] for c in commands] == [
        "fit",
        "predict",
        "postprocess",
        "evaluate",
        "benchmark",
        "benchmark",
    ]
    for line in commands:
        words = shlex.split(line)[1:]
        verb = words[0]
        if verb == "benchmark":
            verb += " " + Path(words[2]).stem
            words += ["--data_dir", f"data/{Path(words[2]).stem}", "--out_dir", f"runs/{Path(words[2]).stem}"]
        words = [str(GUIDE.parents[2] / w) if w.startswith("configs/") else w for w in words]
        assert main(words + shlex.split(SMALLEST.get(verb, ""))) == 0, line
    capsys.readouterr()
    with xr.open_dataset(tmp_path / "runs" / "generative" / "predictions.nc") as ds:
        assert ds.sizes["member"] == 50 and ds.attrs["ensml_task"] == "GenerativeTask"
    products = sorted((tmp_path / "runs" / "generated").glob("*.nc"))
    assert len(products) == len(list((tmp_path / "data" / "archive").glob("*.nc"))) > 0
    with xr.open_dataset(products[0]) as ds:
        assert ds.sizes["member"] == 50
    table = pd.read_csv(tmp_path / "runs" / "generated-eval" / "multivariate.csv")
    assert "generated members (50)" in set(table["forecast"])
    for name in ("generative", "physics_generative"):
        page = (tmp_path / "runs" / name / "benchmark.md").read_text()
        assert ("| oracle members |" in page) == (name == "generative")  # a row on the synthetic data only
