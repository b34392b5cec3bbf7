"""``ensml benchmark``: the smoke setting runs, is reproducible, and bad inputs fail up front."""

from __future__ import annotations

import re
from pathlib import Path

import pandas as pd
import pytest

from ensml.cli.main import main
from tests.conftest import CONFIGS, SMOKE, tiny_data_args

BENCH_SMOKE = str(CONFIGS / "benchmark" / "smoke.yaml")


def run(data: dict[str, Path], out: Path, *extra: str) -> int:
    # The smoke config's synth options are those of the session's tiny dataset: it is reused.
    data_dir = data["forecast"].parent
    return main(["benchmark", "--config", BENCH_SMOKE, f"--data_dir={data_dir}", f"--out_dir={out}", *extra])


@pytest.mark.slow  # two benchmark runs end to end
def test_smoke_benchmark_is_reproducible(tiny_data: dict[str, Path], tmp_path: Path, capfd) -> None:
    assert run(tiny_data, tmp_path / "a") == 0
    # Without a terminal: a line per model, with the time it took and what remains.
    lines = [line for line in capfd.readouterr().err.splitlines() if line.startswith("benchmark: ")]
    assert lines[0] == f"benchmark: 2 EMOS variants and 5 networks to train on {tiny_data['forecast'].parent}"
    emos = r"benchmark: 1/6 models, global EMOS and local EMOS fitted in \d+ s; .* about \d+ s left"
    assert re.fullmatch(emos, lines[1])
    assert lines[6].startswith("benchmark: 6/6 models, temporal spread trained in") and lines[6].endswith(
        "finished"
    )
    assert len(lines) == 7
    assert run(tiny_data, tmp_path / "b") == 0
    a, b = (pd.read_csv(tmp_path / d / "benchmark.csv") for d in ("a", "b"))
    clock = ["train_s", "time_to_baseline_s"]  # wall-clock columns
    pd.testing.assert_frame_equal(a.drop(columns=clock), b.drop(columns=clock))

    models = set(a["model"])
    expected = [
        "raw ensemble (10 members)",
        "raw subset (5 members)",
        "raw ensemble (10 members, Gaussian of mean/std)",
        "global EMOS (Gaussian)",
        "local EMOS (Gaussian)",
        "U-Net mixed (Gaussian)",
        "two-stage mixed (Gaussian)",
        "temporal mixed (Gaussian)",
        "per-point bound from K members (Gaussian)",
        "oracle (Gaussian)",
        "U-Net spread",
        "temporal spread",
        "5-member sample std (ddof 1)",
        "per-point bound of the M-member spread",
    ]
    for name in expected:
        assert name in models, name
    crps = a[a["crps"].notna()]
    assert len(crps) == 11 * 2 * 2 * 2  # sources × variables × levels × leads
    assert sorted(set(crps["lead_h"])) == [24, 48]
    raw = crps[crps["model"] == "raw ensemble (10 members)"]
    assert (raw["skill_vs_raw_ensemble"] == 0).all() and (raw["gap_closed"] == 0).all()
    assert (crps[crps["model"] == "oracle (Gaussian)"]["gap_closed"] == 1).all()
    # every skill but the reference's own has its 95 % interval and DM test (ensml.scores.significance)
    assert raw[["skill_low", "skill_high", "dm_p"]].isna().all().all()
    tested = crps[crps["model"] != "raw ensemble (10 members)"]
    assert tested[["skill_low", "skill_high", "dm_p"]].notna().all().all()
    assert (
        (tested["skill_low"] <= tested["skill_vs_raw_ensemble"])
        & (tested["skill_vs_raw_ensemble"] <= tested["skill_high"])
    ).all()
    oracle = tested[tested["model"] == "oracle (Gaussian)"]
    assert (oracle["skill_low"] > 0).all() and (oracle["dm_p"] < 0.05).all()
    assert set(crps["estimator"]) == {"empirical ensemble", "Gaussian closed form"}
    assert crps["crps_events"].notna().all()
    spread = a[a["spread_corr"].notna()]
    assert set(spread["model"]) >= {"U-Net spread", "temporal spread"}
    trained = a[a["model"] == "temporal mixed (Gaussian)"]
    assert (trained["params"] > 0).all() and (trained["train_s"] > 0).all()
    # time to quality: one validation score per epoch, the best epoch's weights scored
    unet = a[a["model"] == "U-Net mixed (Gaussian)"].iloc[0]
    assert unet["epochs"] in (1, 2) and 1 <= unet["best_epoch"] <= unet["epochs"]
    assert unet["val_score"] > 0 and unet["baseline_val_score"] > 0
    reached = unet["val_score"] <= unet["baseline_val_score"]
    assert reached == (unet["time_to_baseline_s"] > 0) and reached == pd.notna(unet["samples_to_baseline"])
    summary = pd.read_csv(tmp_path / "a" / "benchmark_summary.csv").set_index("model")
    assert {"skill_24h", "skill_48h", "time_to_baseline_s", "spread_rmse_reduction"} <= set(summary.columns)
    assert summary.loc["oracle (Gaussian)", "mean_gap_closed"] == 1
    assert summary.loc["oracle (Gaussian)", "better_95"] == "4/4"  # z, t at 500 and 850 hPa
    text = (tmp_path / "a" / "benchmark.md").read_text()
    assert "## Summary" in text and "local EMOS (Gaussian)" in text
    # the columns of the physics testbed's table, filled here too; the oracle is calibrated
    calibration = ["skill_vs_local_emos", "spread_skill_ratio", "ssr_low", "ssr_high", "flatness"]
    assert crps[calibration].notna().all().all()
    assert oracle["spread_skill_ratio"].between(0.8, 1.2).all() and (oracle["flatness"] < 0.2).all()
    assert (tmp_path / "a" / "crps_difference.png").stat().st_size > 0
    assert not list((tmp_path / "a").glob(".tmp-*"))


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--levels=[500, 700]"], "has no level(s) [700"),
        (["--input_leads=[0, 12, 24, 48]"], "has no lead time(s) 12 h"),
        (["--variables=[z, q]"], "has no variable 'q'"),
        (["--k=11"], "k=11"),
        (
            [
                "--input_leads=[48]",
                "--target_leads=48",
                '--models=[{"name": "t", "arch": "unet3d_time"}]',
            ],
            "at least 2 input lead",
        ),
        (["--synth.seed=7"], "seed=7"),
    ],
)
def test_bad_input_fails_before_training(tiny_data, tmp_path, capsys, args, message) -> None:
    out = tmp_path / "out"
    assert run(tiny_data, out, *args) == 1
    err = capsys.readouterr().err.strip()
    assert err.startswith("ensml: ") and message in err and "\n" not in err
    assert not out.exists()


def test_checkpoint_from_another_model(fitted: Path, tiny_data, monkeypatch, capsys) -> None:
    monkeypatch.chdir(fitted)
    args = [
        "predict",
        "--config",
        SMOKE,
        *tiny_data_args(tiny_data),
        "--model.init_args.arch=unet3d_time",
        "--ckpt_path=runs/smoke/checkpoints/best.ckpt",
    ]
    assert main(args) == 1
    err = capsys.readouterr().err.strip()
    assert "holds a MixedTask 'unet3d' model, the config asks for a MixedTask 'unet3d_time'" in err


@pytest.mark.slow
@pytest.mark.parametrize("name", ["default", "ablation", "physics"])
def test_shipped_configs_build_every_model(name: str, tiny_data: dict[str, Path]) -> None:
    """The benchmark guide's configs parse and each of their models builds (no training)."""
    from jsonargparse import ArgumentParser

    from ensml.data.datamodule import EnsembleDataModule
    from ensml.experiments.benchmark import _build, benchmark
    from ensml.experiments.options import ModelSpec
    from tests.conftest import TINY_PERIODS

    parser = ArgumentParser(exit_on_error=False)
    parser.add_function_arguments(benchmark)
    cfg = parser.parse_path(str(CONFIGS / "benchmark" / f"{name}.yaml"))
    dm = EnsembleDataModule(
        str(tiny_data["forecast"]),
        str(tiny_data["analysis"]),
        variables=cfg.variables,
        levels=cfg.levels,
        input_leads=[0, 24, 48],  # the tiny set's leads
        target_leads=cfg.target_leads,
        k=cfg.k,
        batch_size=2,
        **{key: list(period) for key, period in TINY_PERIODS.items()},
    )
    dm.setup("fit")
    specs = [ModelSpec(**vars(m)) if not isinstance(m, ModelSpec) else m for m in cfg.models]
    assert len({s.name for s in specs}) == len(specs) >= 5
    for spec in specs:
        task = _build(spec, dm, cfg.seed)
        wanted = (spec.options or {}).get("location_inputs", False)
        assert task.hparams.get("location_inputs", False) == wanted


@pytest.mark.parametrize(
    ("period", "message"),
    [
        ('--test_period=["2020-12-31", "2020-01-01"]', "test_period ends before it starts"),
        ('--val_period=["2017-08-01", "2017-10-31"]', "overlaps"),
    ],
)
def test_bad_periods_are_refused_before_any_data_is_made(tmp_path: Path, capsys, period, message) -> None:
    """The dataset (tens of seconds, megabytes) is made only for a run that can go on."""
    user = tmp_path / "mine.txt"
    user.write_text("a user's file\n")
    data_dir, out = tmp_path / "data", tmp_path / "out"
    args = ["benchmark", "--config", BENCH_SMOKE, f"--data_dir={data_dir}", f"--out_dir={out}", period]
    assert main(args) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("ensml: ") and message in err[0], err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["mine.txt"]
    assert user.read_text() == "a user's file\n"
