"""Precipitation and wind through every verb, as a user runs them: ``data synth --precip_wind``,
``fit`` and ``predict`` in the default families (tp: csg0, si10: truncnormal), ``evaluate``
against the oracle. The files say each variable's family, and evaluate scores each in it."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import xarray as xr

from ensml.cli.main import main
from ensml.scores.distributions import get_family
from tests.conftest import SMOKE, TINY_PERIODS

pytestmark = pytest.mark.slow  # fit, predict and evaluate end to end


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    work = tmp_path_factory.mktemp("precip_wind")
    with pytest.MonkeyPatch.context() as mp:
        mp.chdir(work)
        synth = [
            "data",
            "synth",
            "--out_dir",
            "syn",
            "--n_lat",
            "16",
            "--n_lon",
            "32",
            "--start",
            "2017-01-01",
        ]
        synth += ["--end", "2017-12-31", "--every_days", "3", "--seed", "1", "--precip_wind", "true"]
        assert main(synth) == 0
        data = [
            "--data.forecast=syn/forecast.nc",
            "--data.analysis=syn/analysis.nc",
            "--data.target_leads=48",
        ]
        data += ["--data.variables=[z, t, tp, si10]", "--trainer.max_epochs=1"]
        data += [f"--data.{key}=[{start}, {end}]" for key, (start, end) in TINY_PERIODS.items()]
        assert main(["fit", "--config", SMOKE, *data]) == 0
        ckpt = "--ckpt_path=runs/smoke/checkpoints/best.ckpt"
        assert main(["predict", "--config", SMOKE, *data, ckpt]) == 0
        evaluate = ["evaluate", "--forecast", "syn/forecast.nc", "--analysis", "syn/analysis.nc"]
        evaluate += [
            "--oracle",
            "syn/oracle.nc",
            "--predictions",
            "runs/smoke/predictions.nc",
            "--out_dir",
            "ev",
        ]
        assert main(evaluate) == 0
    return work


def test_predictions_hold_each_family(run: Path) -> None:
    with xr.open_dataset(run / "runs/smoke/predictions.nc") as ds:
        assert ds.attrs["ensml_distribution"] == "z:normal t:normal tp:csg0 si10:truncnormal"
        assert {"tp_shape", "tp_scale", "tp_shift", "si10_loc", "si10_scale", "z_mean", "t_std"} <= set(
            ds.data_vars
        )
        assert "level" not in ds["tp_shape"].dims and ds["tp_scale"].attrs["units"] == "kg m-2"
        params = {p: ds[f"tp_{p}"].values for p in ("shape", "scale", "shift")}
    get_family("csg0").check_params(params, "predictions")  # every parameter in range
    quantiles = get_family("csg0").quantiles(params, [0.05, 0.5, 0.95])
    assert (quantiles >= 0).all()  # never a negative precipitation


def test_evaluate_scores_each_family(run: Path) -> None:
    table = pd.read_csv(run / "ev/scores.csv")
    rows = set(zip(table["variable"], table["forecast"]))
    assert {
        ("tp", "post-processed (csg0)"),
        ("tp", "oracle (csg0)"),
        ("si10", "oracle (truncnormal)"),
    } <= rows
    assert ("z", "post-processed (Gaussian)") in rows
    tp = table[table["variable"] == "tp"].set_index("forecast")["crps"]
    # the oracle is the best any forecast can do; the raw ensemble is biased and under-dispersive
    assert tp["oracle (csg0)"] < tp["raw ensemble (10 members)"] * 0.85
    events = pd.read_csv(run / "ev/scores_tp.csv")
    brier = events[(events["score"] == "brier") & (events["forecast"] == "oracle (csg0)")]
    assert sorted(brier["threshold"]) == [0.1, 1, 5, 10, 25] and np.isfinite(brier["value"]).all()
    assert (run / "ev/reliability_tp_gt10.png").stat().st_size > 0
