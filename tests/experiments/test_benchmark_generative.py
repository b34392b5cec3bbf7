"""``ensml benchmark`` with ``generative`` (configs/benchmark/generative_smoke.yaml): generated
members against ECC-Q, the Schaake shuffle and a Gaussian copula of one set of margins, and the
oracle's members; the two-step members by hand, the rows by their definitions against
scoringrules, the verdicts by the targets, and bad options refused in one line."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import scoringrules as sr
import xarray as xr
import yaml

from ensml.cli.main import main
from ensml.experiments import benchmark_generative_members as two_step
from ensml.experiments.benchmark_generative_page import verdicts
from ensml.postprocess.copulas import fit_gaussian_copula
from ensml.postprocess.ecc import ecc_levels
from ensml.scores.distributions import get_family
from tests.cli.bad_rows import Row, check, hashes, sandbox
from tests.conftest import CONFIGS

SMOKE = CONFIGS / "benchmark" / "generative_smoke.yaml"
METHODS = [
    "raw ensemble (10 members)",
    "raw subset (5 members)",
    "ECC-Q",
    "Schaake shuffle",
    "Gaussian copula",
]


def test_templates_are_the_closest_days_of_year() -> None:
    history = np.array(
        ["2017-01-02", "2017-06-30", "2017-12-30", "2018-01-05", "2018-07-01"], "datetime64[ns]"
    )
    valid = np.array(["2020-01-01", "2020-07-02"], "datetime64[ns]")
    # 1 Jan: 2 Jan (1 day), 30 Dec (2 days, across the year's end), 5 Jan (4 days); 2 Jul: 1 Jul
    # (2 days: 2020 is a leap year, day 183 against 181), 30 Jun (3), 5 Jan (179 days back)
    np.testing.assert_array_equal(two_step.templates_by_day(valid, history, 3), [[0, 2, 3], [4, 1, 3]])


def test_the_two_step_members_share_the_margins() -> None:
    family = get_family("normal")
    rng = np.random.default_rng(0)
    params = {"mean": rng.normal(size=(3, 6)), "std": rng.uniform(0.5, 2, size=(3, 6))}
    n = 8
    q = two_step.margins(family, params, n)
    levels = ecc_levels(n, "centred")
    expected = family.quantiles({k: v[:, None] for k, v in params.items()}, levels, axis=1)
    np.testing.assert_allclose(q, expected.reshape(q.shape), rtol=1e-12)
    raw = rng.normal(size=(3, 4, 6))
    ecc = two_step.ecc(q, raw, seed=0)
    templates = rng.normal(size=(3, n, 6))
    schaake = two_step.schaake(q, templates, seed=0)
    for members in (ecc, schaake):  # at every point the sorted members are the margins' quantiles
        np.testing.assert_allclose(np.sort(members, axis=1), q)
    # Schaake: member j has the rank of template j at every point
    np.testing.assert_array_equal(
        np.argsort(np.argsort(schaake, 1), 1), np.argsort(np.argsort(templates, 1), 1)
    )
    # ECC: member j and j + 4 copy raw member j: their ranks among the 8 are its rank's pair
    order = np.argsort(np.argsort(ecc, 1), 1) // 2
    raw_rank = np.argsort(np.argsort(raw, 1), 1)
    np.testing.assert_array_equal(order[:, :4], raw_rank)
    np.testing.assert_array_equal(order[:, 4:], raw_rank)


def test_the_copula_members_have_the_margins_and_the_fitted_correlation() -> None:
    family = get_family("normal")
    rng = np.random.default_rng(1)
    corr = np.array([[1.0, 0.8], [0.8, 1.0]])
    scores = rng.multivariate_normal([0, 0], corr, size=4000)
    params = {"mean": np.array([[10.0, -5.0]]), "std": np.array([[2.0, 0.5]])}
    fitted = fit_gaussian_copula(scores, shrinkage=0.0)
    x = two_step.copula(family, params, fitted, 20000, seed=3)[0]  # (N, D)
    np.testing.assert_allclose(x.mean(0), [10.0, -5.0], atol=0.05)
    np.testing.assert_allclose(x.std(0), [2.0, 0.5], rtol=0.03)
    assert abs(np.corrcoef(x.T)[0, 1] - 0.8) < 0.02
    again = two_step.copula(family, params, fitted, 20000, seed=3)[0]
    np.testing.assert_array_equal(x, again)


def _row(forecast: str, **values: float) -> dict:
    return {"lead_h": 48, "variable": "t", "level_hPa": 850.0, "forecast": forecast, **values}


def test_verdicts_by_the_targets() -> None:
    table = pd.DataFrame(
        [
            _row("ECC-Q", area_mean_flatness=0.9),
            _row(
                "gen",
                variogram_skill=0.05,
                variogram_skill_low=0.01,
                variogram_skill_high=0.09,
                crps_vs_parametric=0.019,
                area_mean_flatness=0.5,
            ),
        ]
    )
    lines = verdicts(table, "gen")
    assert all("**met**" in line for line in lines), lines
    assert "+5.0 % [+1.0, +9.0]" in lines[0] and "+1.9 %" in lines[1] and "0.50 vs 0.90" in lines[2]
    table.loc[1, ["variogram_skill_low", "crps_vs_parametric", "area_mean_flatness"]] = [-0.01, 0.021, 0.95]
    assert all("not met (1 of 1 fields)" in line for line in verdicts(table, "gen"))


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The smoke config run once, as the guide runs a benchmark (its data in a temporary data_dir)."""
    root = tmp_path_factory.mktemp("generative-benchmark")
    args = ["benchmark", "--config", str(SMOKE), f"--data_dir={root / 'data'}", f"--out_dir={root / 'out'}"]
    assert main(args) == 0
    return root


@pytest.mark.slow
def test_every_method_is_scored_in_every_field(run: Path) -> None:
    """The smoke config's ``members: [10, 20]``: every field at 10 members a method, beside the raw
    and oracle rows, and again at 20, each block's skills over its own ECC-Q."""
    table = pd.read_csv(run / "out" / "benchmark.csv")
    assert len(table.groupby(["variable", "level_hPa", "lead_h", "draws"])) == 8
    drawn = ["ECC-Q", "Schaake shuffle", "Gaussian copula", "generative U-Net"]
    for (*_, draws), rows in table.groupby(["variable", "level_hPa", "lead_h", "draws"]):
        names = list(rows["forecast"])
        if draws == 10:
            assert names == ["parametric U-Net (per point)", *METHODS, "generative U-Net", "oracle members"]
        else:
            assert draws == 20 and names == ["parametric U-Net (per point)", *drawn]
        rows = rows.set_index("forecast")
        assert (rows.loc[drawn, "members"] == draws).all()
        # ECC-Q and the Schaake shuffle reorder the same quantiles: the same per-point CRPS
        assert rows.loc["ECC-Q", "crps"] == pytest.approx(rows.loc["Schaake shuffle", "crps"], rel=1e-9)
        assert rows.loc["ECC-Q", "variogram_skill"] == 0.0 and rows.loc["ECC-Q", "energy_skill"] == 0.0
        skill = 1 - rows.loc["generative U-Net", "variogram"] / rows.loc["ECC-Q", "variogram"]
        assert rows.loc["generative U-Net", "variogram_skill"] == pytest.approx(skill)
        assert (
            rows.loc["generative U-Net", "fit_s"] > 0
            and rows.loc["parametric U-Net (per point)", "fit_s"] > 0
        )
    page = (run / "out" / "benchmark.md").read_text()
    assert page.count("**met**") + page.count("**not met") == 6  # the targets at each count
    assert "## 10 members a method" in page and "## 20 members a method" in page
    for var in ("z", "t"):
        for name in (f"members_{var}.png", f"rank_histograms_{var}.png"):
            assert (run / "out" / name).read_bytes()[:4] == b"\x89PNG"


@pytest.mark.slow
def test_the_raw_and_oracle_rows_by_hand(run: Path) -> None:
    """The raw ensemble's and the oracle's fair CRPS and energy score of t850 by scoringrules."""
    config = yaml.safe_load(SMOKE.read_text())
    test = slice(*config["test_period"])
    fc = xr.open_dataset(run / "data" / "forecast.nc")["t"].sel(init_time=test, lead_time="48h", level=850.0)
    inits = fc["init_time"].values
    truth = xr.open_dataset(run / "data" / "analysis.nc")["t"].sel(
        level=850.0, time=inits + np.timedelta64(48, "h")
    )
    oracle = xr.open_dataset(run / "data" / "oracle_members.nc")["t"].sel(
        init_time=inits, lead_time="48h", level=850.0
    )
    lat = fc["latitude"].values
    edges = np.deg2rad(np.clip(np.concatenate([[90], (lat[1:] + lat[:-1]) / 2, [-90]]), -90, 90))
    area = np.abs(np.sin(edges[:-1]) - np.sin(edges[1:]))
    w = area / area.mean()
    rows = pd.read_csv(run / "out" / "benchmark.csv")
    rows = rows[(rows["variable"] == "t") & (rows["level_hPa"] == 850.0)].set_index("forecast")
    y = truth.values
    for name, x in (("raw ensemble (10 members)", fc), ("oracle members", oracle)):
        members = x.transpose("init_time", "latitude", "longitude", "member").values
        crps = sr.crps_ensemble(y, members, estimator="fair")
        np.testing.assert_allclose(rows.loc[name, "crps_fair"], (crps * w[None, :, None]).mean(), rtol=1e-5)
        standard = sr.crps_ensemble(y, members)
        np.testing.assert_allclose(rows.loc[name, "crps"], (standard * w[None, :, None]).mean(), rtol=1e-5)
        root = np.sqrt(w)[:, None]
        vec = (x.transpose("init_time", "member", "latitude", "longitude").values * root).reshape(
            len(inits), -1, lat.size * fc.sizes["longitude"]
        )
        es = sr.es_ensemble((y * root).reshape(len(inits), -1), vec)
        np.testing.assert_allclose(rows.loc[name, "energy"], es.mean(), rtol=1e-5)


BAD: list[Row] = [
    ("benchmark: generative with a spread margin", "spread", 1, ("parametric: task must be 'mixed'",)),
    ("benchmark: generative with both data sources", "both", 1, ("synth or physics options, not both",)),
    ("benchmark: generative with no members", "no_members", 1, ("--members", "out of range")),
    ("benchmark: generative with an empty list of members", "empty_members", 1, ("at least one count",)),
    ("benchmark: generative with a zero in its members", "zero_in_members", 1, ("--members", "out of range")),
    (
        "benchmark: generative with one training member",
        "one_member",
        1,
        ("train_members must be at least 2",),
    ),
]
CHANGES = {
    "spread": {"parametric": {"name": "p", "task": "spread"}},
    "both": {"physics": {"inits": 12}},
    "one_member": {"generative": {"name": "g", "options": {"train_members": 1}}},
    "empty_members": {"members": []},
    "zero_in_members": {"members": [10, 0]},
}


@pytest.mark.timeout(180)
@pytest.mark.parametrize("row", BAD, ids=[row[0] for row in BAD])
def test_bad_generative_benchmark_is_one_line_and_harmless(
    row: Row, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture
) -> None:
    monkeypatch.chdir(tmp_path)
    sandbox(tmp_path)
    config = yaml.safe_load(SMOKE.read_text()) | {
        "data_dir": str(tmp_path / "data"),
        "out_dir": str(tmp_path / "out"),
    }
    config |= CHANGES.get(row[1], {})
    path = tmp_path / "inputs" / "bad.yaml"
    path.parent.mkdir()
    path.write_text(yaml.safe_dump(config))
    args = ["benchmark", "--config", str(path), *(["--members", "0"] if row[1] == "no_members" else [])]
    before = hashes(tmp_path)
    status = main(args)
    check(row, status, capsys.readouterr().err, before, hashes(tmp_path))


@pytest.mark.parametrize("name", ["generative", "physics_generative"])
def test_shipped_generative_configs_parse(name: str) -> None:
    """The guide's generative benchmarks parse into the generative benchmark."""
    from jsonargparse import ArgumentParser

    from ensml.cli.verb import config_keys
    from ensml.experiments.benchmark_generative import benchmark_generative

    path = str(CONFIGS / "benchmark" / f"{name}.yaml")
    assert "generative" in config_keys(["--config", path])  # what sends it to the generative benchmark
    parser = ArgumentParser(exit_on_error=False)
    parser.add_function_arguments(benchmark_generative)
    cfg = parser.parse_path(path)
    assert cfg.generative.options["es_weight"] > 0 and cfg.parametric.task == "mixed"


@pytest.mark.slow
def test_data_with_another_count_of_oracle_members_is_refused(run: Path) -> None:
    from ensml.errors import EnsmlError
    from ensml.experiments.benchmark_data import ensure_data
    from ensml.experiments.options import SynthOptions

    config = yaml.safe_load(SMOKE.read_text())["synth"]
    before = {p.name: p.stat().st_mtime_ns for p in (run / "data").glob("*.nc")}
    assert ensure_data(run / "data", SynthOptions(**config))["oracle_members"].is_file()  # reused
    with pytest.raises(EnsmlError, match="holds 10 oracle members, the config asks for oracle_members=5"):
        ensure_data(run / "data", SynthOptions(**(config | {"oracle_members": 5})))
    assert {p.name: p.stat().st_mtime_ns for p in (run / "data").glob("*.nc")} == before
