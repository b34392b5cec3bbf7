"""The Python walkthrough of docs/guide/stations.md, run as the guide shows it (its one python
block, unchanged) on the smallest synthetic stations that keep its train and test years."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest
import scoringrules as sr

from ensml.data.synth.generate import synth

GUIDE = Path(__file__).resolve().parents[2] / "docs" / "guide" / "stations.md"
TINY = {"n_lat": 8, "n_lon": 16, "members": 6, "surface": True, "stations": 12}


@pytest.mark.slow
def test_the_guides_walkthrough_runs(tmp_path, monkeypatch, capsys):
    blocks = re.findall(r"```python\n(.*?)```", GUIDE.read_text(encoding="utf-8"), flags=re.S)
    assert len(blocks) == 1
    synth(tmp_path / "data" / "stations", start="2019-09-01", end="2020-02-28", **TINY)
    monkeypatch.chdir(tmp_path)
    names: dict = {}
    exec(compile(blocks[0], str(GUIDE), "exec"), names)  # the guide's own code
    capsys.readouterr()
    test, rows = names["test"], names["test_rows"]
    y = test["t2m_obs"].transpose("lead_time", "init_time", "station").values
    emos = names["emos_params"]
    emos_crps = np.nanmean(sr.crps_normal(y, emos["mean"].values, emos["std"].values))
    drn = {k: v.detach().numpy() for k, v in names["drn_params"].items()}
    drn_crps = np.mean(sr.crps_normal(rows.obs, drn["mean"], drn["std"]))
    raw = np.nanmean(
        sr.crps_ensemble(y, test["t2m"].transpose("lead_time", "init_time", "station", "member").values)
    )
    assert np.isfinite(emos_crps) and np.isfinite(drn_crps)
    assert emos_crps < raw and drn_crps < raw  # both post-processings beat the raw subset


#: What makes each command of the guide's shell blocks small (appended: the last value counts).
SMALLEST = {
    "data synth": "--n_lat 8 --n_lon 16 --members 6 --start 2019-09-01 --end 2020-02-28 --stations 12",
    "fit": "--train_period [2019-09-01,2019-12-31] --test_period [2020-01-01,2020-02-28] "
    "--epochs 2 --hidden [8]",
    "postprocess": "--cluster none",
    "benchmark": "--stations 12 --synth.n_lat 8 --synth.n_lon 16 --synth.start 2019-01-01 "
    "--synth.end 2019-12-31 --synth.every_days 4 --train_period [2019-01-01,2019-09-30] "
    "--test_period [2019-10-01,2019-12-31] "
    '--models=[{"name":"DRN","epochs":2,"hidden":[8]},{"name":"DRN+flow","predictors":["z850"],"epochs":2}]',
}


@pytest.mark.slow
def test_the_guides_commands_run_from_fit_to_scores(tmp_path, monkeypatch, capsys):
    """Every ``ensml`` command of the guide's shell blocks, in order, at its smallest setting."""
    import shlex

    import pandas as pd

    from ensml.cli.main import main
    from tests.test_readme import _commands

    monkeypatch.chdir(tmp_path)
    # the physics testbed's station benchmark is tests/experiments/test_benchmark_stations.py's,
    # run as the guide runs it at its smallest setting
    commands = [c for c in _commands(GUIDE.read_text(encoding="utf-8")) if "physics" not in c]
    verbs = ["data", "fit", "data", "postprocess", "evaluate", "report", "benchmark"]
    assert [c.split()[1] for c in commands] == verbs
    for line in commands:
        words = shlex.split(line)[1:]
        verb = " ".join(words[:2]) if words[0] == "data" else words[0]
        words = [str(GUIDE.parents[2] / w) if w.startswith("configs/") else w for w in words]
        assert main(words + SMALLEST.get(verb, "").split()) == 0, line
    capsys.readouterr()
    assert (tmp_path / "runs" / "stations" / "station_model.pt").is_file()
    products = sorted((tmp_path / "runs" / "station-products").glob("*.nc"))
    assert len(products) == len(list((tmp_path / "data" / "stations" / "2020").glob("*.nc"))) > 0
    table = pd.read_csv(tmp_path / "runs" / "station-eval" / "scores.csv")
    assert {"station DRN (normal)", "station DRN (truncnormal)"} <= set(table["forecast"])
    assert (tmp_path / "runs" / "station-eval" / "figures" / "station_skill_t2m.png").is_file()
    assert (tmp_path / "runs" / "station-report" / "figures" / "station_plume_t2m.png").is_file()
    bench = pd.read_csv(tmp_path / "runs" / "benchmark-stations" / "benchmark.csv")
    assert {"EMOS, station-wise", "DRN", "DRN+flow", "station oracle (normal)"} <= set(bench["forecast"])
