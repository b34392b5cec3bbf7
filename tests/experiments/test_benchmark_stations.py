"""``ensml benchmark`` with ``stations`` (configs/benchmark/stations_smoke.yaml): raw, EMOS, DRNs
and the station oracle side by side; the raw rows and the oracle against scoringrules on the
same pairs, the skill and gap columns by their definitions, and bad options refused in one line
with the sandbox and the data byte-identical."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import scoringrules as sr
import xarray as xr
import yaml

from ensml.cli.main import main
from ensml.data.station_frame import build_station_frame
from ensml.data.station_table import station_table
from ensml.data.subset import Subset
from ensml.experiments.benchmark_station_page import REFERENCE, best_model, verdicts
from tests.cli.bad_rows import Row, check, hashes, sandbox
from tests.conftest import CONFIGS

SMOKE = CONFIGS / "benchmark" / "stations_smoke.yaml"
RAW, BILINEAR, FULL = "raw subset (5), nearest", "raw subset (5), bilinear", "raw ensemble (10), nearest"

pytestmark = pytest.mark.slow  # a whole station benchmark (module fixture, about 30 s)


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The smoke config run once, as the guide runs a benchmark (its data made in a temporary data_dir)."""
    root = tmp_path_factory.mktemp("station-benchmark")
    args = ["benchmark", "--config", str(SMOKE), f"--data_dir={root / 'data'}", f"--out_dir={root / 'out'}"]
    assert main(args) == 0
    return root


def _by_hand(data: Path, var: str) -> dict[str, np.ndarray]:
    """The test period's observations, raw members (nearest and bilinear, height-corrected as the
    frame does) and oracle parameters of ``var``, (lead, init, station), built here."""
    config = yaml.safe_load(SMOKE.read_text())
    out = {}
    for extraction in ("nearest", "bilinear"):
        frame = build_station_frame(
            str(data / "forecast.nc"),
            str(data / "stations.nc"),
            variables=[var],
            leads=config["leads"],
            k=5,
            extraction=extraction,
            model_height=str(data / "orography.nc") if var == "t2m" else None,
        )
        for k in (5, 10) if extraction == "nearest" else (5,):
            table = station_table(frame, Subset.first(k)).sel(init_time=slice(*config["test_period"])).load()
            out[f"{extraction}{k}"] = (
                table[var].transpose("lead_time", "init_time", "station", "member").values
            )
        if extraction == "nearest":
            out["y"] = table[f"{var}_obs"].transpose("lead_time", "init_time", "station").values
            inits, stations = table["init_time"].values, table["station"].values
    oracle = xr.open_dataset(data / "stations_oracle.nc").sel(init_time=inits, station=stations)
    for name in oracle.data_vars:
        if str(name).startswith(f"{var}_") and "lead_time" in oracle[name].dims:
            out[str(name)[len(var) + 1 :]] = (
                oracle[name]
                .sel(lead_time=["24h", "48h"])
                .transpose("lead_time", "init_time", "station")
                .values
            )
    return out


@pytest.mark.parametrize("var", ["t2m", "si10"])
def test_raw_rows_and_oracle_match_scoringrules_on_the_same_pairs(run: Path, var: str) -> None:
    table = pd.read_csv(run / "out" / "benchmark.csv")
    got = _by_hand(run / "data", var)
    y = got["y"]
    crps = {
        RAW: sr.crps_ensemble(y, got["nearest5"]),
        FULL: sr.crps_ensemble(y, got["nearest10"]),
        BILINEAR: sr.crps_ensemble(y, got["bilinear5"]),
    }
    if var == "t2m":
        oracle = sr.crps_normal(y, got["mean"], got["std"])
    else:
        oracle = sr.crps_tnormal(y, got["loc"], got["scale"], lower=0.0)
    rows = table[table["variable"] == var]
    for i, lead in enumerate((24, 48)):
        at = rows[rows["lead_h"] == lead].set_index("forecast")
        ok = np.isfinite(y[i]) & np.isfinite(oracle[i])
        for c in crps.values():
            ok &= np.isfinite(c[i])
        # the fitted rows are finite wherever their features are: the same pairs
        assert (at["n"] == ok.sum()).all(), (lead, at["n"].unique(), ok.sum())
        for name, c in crps.items():
            assert at.loc[name, "crps"] == pytest.approx(c[i][ok].mean(), rel=1e-5), (name, lead)
        name = next(n for n in at.index if n.startswith("station oracle"))
        assert at.loc[name, "crps"] == pytest.approx(oracle[i][ok].mean(), rel=1e-5)
        # the columns by their definitions
        ref, raw = at.loc[REFERENCE, "crps"], at.loc[RAW, "crps"]
        np.testing.assert_allclose(
            at["skill"], 1 - at["crps"] / ref, rtol=1e-4, atol=1e-6
        )  # 6 digits in the CSV
        np.testing.assert_allclose(at["skill_vs_raw"], 1 - at["crps"] / raw, rtol=1e-4, atol=1e-6)
        np.testing.assert_allclose(
            at["gap_closed"], (raw - at["crps"]) / (raw - at.loc[name, "crps"]), rtol=1e-4, atol=1e-5
        )
        assert at.loc[REFERENCE, "skill_low"] == at.loc[REFERENCE, "skill_high"] == 0.0
        assert (at["skill_low"] <= at["skill"]).all() and (at["skill"] <= at["skill_high"]).all()
        fitted = ["EMOS, global", REFERENCE, "station DRN", "station DRN + flow", "station DRN (bqn)"]
        fitted.append("grid-to-point U-Net")
        assert at.loc[fitted, "fit_s"].gt(0).all() and at.drop(index=fitted)["fit_s"].isna().all()


def test_page_maps_and_verdicts(run: Path) -> None:
    out = run / "out"
    table = pd.read_csv(out / "benchmark.csv")
    page = (out / "benchmark.md").read_text()
    for var in ("t2m", "si10"):
        assert (out / f"station_skill_{var}.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
        assert f"## {var}" in page
        best = best_model(table, var)
        fitted = (
            "EMOS, global",
            "station DRN",
            "station DRN + flow",
            "station DRN (bqn)",
            "grid-to-point U-Net",
        )
        assert best in fitted
        one = table[(table["variable"] == var) & table["fit_s"].notna() & (table["forecast"] != REFERENCE)]
        assert best == one.groupby("forecast")["crps"].mean().idxmin()
    lines = verdicts(table)
    assert len(lines) == 4 and all(line in page for line in lines)
    assert "observations at 40 stations" in page and "0 (reference)" in page


def test_verdicts_by_the_targets() -> None:
    rows = []
    for lead, skill, low, gap in ((24, 0.041, 0.026, 0.85), (48, 0.031, 0.001, 0.79)):
        rows.append(
            {
                "variable": "si10",
                "lead_h": lead,
                "forecast": "DRN",
                "crps": 1.0,
                "skill": skill,
                "skill_low": low,
                "skill_high": skill + 0.01,
                "fit_s": 3.0,
                "gap_closed": gap,
            }
        )
        rows.append(
            {
                "variable": "si10",
                "lead_h": lead,
                "forecast": REFERENCE,
                "crps": 1.05,
                "skill": 0.0,
                "skill_low": 0.0,
                "skill_high": 0.0,
                "fit_s": 1.0,
                "gap_closed": 0.7,
            }
        )
    skill, gap = verdicts(pd.DataFrame(rows))
    assert skill.endswith(": met.") and "24 h +4.1% [+2.6%, +5.1%]; 48 h +3.1%" in skill
    assert gap.endswith(": not met.") and "48 h 79.0%" in gap  # 79 % < 80 % at 48 h
    rows[2]["skill_low"] = -0.001  # the interval reaches zero at 48 h
    assert verdicts(pd.DataFrame(rows))[0].endswith(": not met.")
    for row in rows[1::2]:  # station-wise EMOS the best of all: the gap is its, the skill the DRN's
        row.update(crps=0.9, gap_closed=0.95)
    skill, gap = verdicts(pd.DataFrame(rows))
    assert "beside EMOS, station-wise, DRN, over it" in skill
    assert f"the best station model, {REFERENCE}, closes 24 h 95.0%; 48 h 95.0%" in gap and gap.endswith(
        ": met."
    )


BENCH = "benchmark --config {dir}/{name}.yaml"
BAD: list[Row] = [
    (
        "station benchmark: no station-wise EMOS",
        BENCH.format(dir="{dir}", name="no_reference"),
        1,
        ("'station'", "reference"),
    ),
    (
        "station benchmark: k above the members",
        BENCH.format(dir="{dir}", name="big_k"),
        1,
        ("k=12", "10 members"),
    ),
    ("station benchmark: two models of one name", BENCH.format(dir="{dir}", name="twice"), 1, ("distinct",)),
    (
        "station benchmark: t2m without surface",
        BENCH.format(dir="{dir}", name="no_surface"),
        1,
        ("synth.surface",),
    ),
    (
        "station benchmark: another station count",
        BENCH.format(dir="{dir}", name="other_count"),
        1,
        ("40 stations", "stations=41"),
    ),
    (
        "station benchmark: a predictor the forecast lacks",
        BENCH.format(dir="{dir}", name="no_field"),
        1,
        ("z700",),
    ),
    (
        "station benchmark: a folder of the user's",
        BENCH.format(dir="{dir}", name="users") + " --out_dir sibling",
        1,
        ("sibling",),
    ),
]
CHANGES = {
    "no_reference": {"emos": ["global"]},
    "big_k": {"k": 12},
    "twice": {"models": [{"name": "DRN"}, {"name": "DRN"}]},
    "no_surface": {"synth": {"surface": False}},
    "other_count": {"stations": 41},
    "no_field": {"models": [{"name": "DRN", "predictors": ["z700"], "epochs": 1}]},
    "users": {},
}


@pytest.fixture(scope="module")
def bad_configs(run: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """The smoke config on the run's data, changed one way per row."""
    folder = tmp_path_factory.mktemp("bad-station-benchmark")
    base = yaml.safe_load(SMOKE.read_text())
    base |= {"data_dir": str(run / "data"), "out_dir": str(folder / "out")}
    for name, change in CHANGES.items():
        config = dict(base)
        for key, value in change.items():
            config[key] = {**config[key], **value} if isinstance(value, dict) else value
        (folder / f"{name}.yaml").write_text(yaml.safe_dump(config))
    return {"dir": str(folder), "data": str(run / "data")}


@pytest.mark.timeout(180)
@pytest.mark.parametrize("row", BAD, ids=[row[0] for row in BAD])
def test_bad_station_benchmark_is_one_line_and_harmless(
    row: Row,
    bad_configs: dict[str, str],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture,
) -> None:
    monkeypatch.chdir(tmp_path)
    sandbox(tmp_path)
    roots = (tmp_path, Path(bad_configs["dir"]), Path(bad_configs["data"]))
    before = hashes(*roots)
    status = main(row[1].format(**bad_configs).split())
    check(row, status, capsys.readouterr().err, before, hashes(*roots))


@pytest.mark.parametrize("name", ["stations", "physics_stations"])
def test_shipped_station_configs_parse(name: str) -> None:
    """The guide's station benchmarks parse into the station benchmark, with distinct rows."""
    from jsonargparse import ArgumentParser

    from ensml.cli.verb import config_keys
    from ensml.experiments.benchmark_stations import benchmark_stations

    path = str(CONFIGS / "benchmark" / f"{name}.yaml")
    assert "stations" in config_keys(["--config", path])  # what sends it to the station benchmark
    parser = ArgumentParser(exit_on_error=False)
    parser.add_function_arguments(benchmark_stations)
    cfg = parser.parse_path(path)
    names = [m.name for m in cfg.models]
    assert len(set(names)) == len(names) >= 2 and "station" in cfg.emos
    assert any(m.predictors for m in cfg.models)


def test_physics_station_benchmark_without_an_oracle(tmp_path: Path) -> None:
    """configs/benchmark/physics_stations.yaml as the guide runs it, at its smallest setting: the
    physics testbed's stations, no oracle (no gap column or verdict), the skill verdict made."""
    import json

    models = [
        {"name": "station DRN", "epochs": 2, "hidden": [8]},
        {
            "name": "station DRN + flow",
            "predictors": ["z850"],
            "drop_features": ["doy_sin", "doy_cos"],
            "epochs": 2,
        },
    ]
    small = [
        *("--physics.inits 12 --physics.members 3 --physics.spinup_days 2 --stations 20 --k 3".split()),
        *("--train_period [2000-01-01,2000-01-08] --test_period [2000-01-09,2000-01-12]".split()),
        *("--grid_to_point.val_share 0.5 --grid_to_point.max_epochs 1 --grid_to_point.width 4".split()),
        f"--models={json.dumps(models)}",
        f"--data_dir={tmp_path / 'data'}",
        f"--out_dir={tmp_path / 'out'}",
    ]
    assert main(["benchmark", "--config", str(CONFIGS / "benchmark" / "physics_stations.yaml"), *small]) == 0
    table = pd.read_csv(tmp_path / "out" / "benchmark.csv")
    assert "gap_closed" not in table and set(table["variable"]) == {"si10"}
    assert list(dict.fromkeys(table["forecast"])) == [
        "raw ensemble (3), nearest",
        "raw subset (3), nearest",
        "raw subset (3), bilinear",
        "EMOS, global",
        REFERENCE,
        "station DRN",
        "station DRN + flow",
        "grid-to-point U-Net",
    ]
    at = table.set_index(["lead_h", "forecast"])["crps"]
    for lead in (24, 48):  # three members of three: the subset is the ensemble
        assert at[(lead, "raw ensemble (3), nearest")] == at[(lead, "raw subset (3), nearest")]
    page = (tmp_path / "out" / "benchmark.md").read_text()
    assert "physics data, observations at 20 stations" in page
    assert len(verdicts(table)) == 1 and verdicts(table)[0] in page  # no oracle: no gap verdict
    assert (tmp_path / "out" / "station_skill_si10.png").is_file()
