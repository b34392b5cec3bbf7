"""``ensml benchmark`` on the physics testbed: no oracle, skill against local EMOS, spread/skill,
rank-histogram flatness, the CRPS-difference map; and its data source checks.

The testbed's generator (``ensml.data.physics.generate.physics``) is replaced by a stand-in: a tiny
synthetic dataset (8 × 16 grid, 44 daily inits) with ``physics_<option>`` attributes and no
oracle, the layout the generator writes.
"""

from __future__ import annotations

import sys
import types
from dataclasses import asdict
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import xarray as xr
from scipy import stats

from ensml.cli.main import main
from ensml.errors import EnsmlError
from ensml.experiments.benchmark_data import ensure_data
from ensml.experiments.options import PhysicsOptions, SynthOptions
from tests.conftest import cell_area_weights

OPTIONS = PhysicsOptions(levels=[500, 850], leads=[0, 24, 48], members=6, start="2000-01-01", inits=44)
PERIODS = {
    "train_period": "[2000-01-01, 2000-01-22]",
    "val_period": "[2000-01-23, 2000-01-29]",
    "test_period": "[2000-01-30, 2000-02-13]",
}
MODEL = '[{"name": "tiny", "task": "mixed", "arch": "unet3d", "width": 4, "depth": 2, "max_epochs": 1}]'


def stand_in(out_dir: str | Path, *, overwrite: bool = False, **opts: object) -> dict[str, Path]:
    """The physics generator's files from ``synth`` on a tiny grid: forecast and analysis with
    ``physics_<option>`` attributes, no oracle."""
    from ensml.data.synth.generate import synth

    assert overwrite
    out, every = Path(out_dir), int(opts["every_hours"]) // 24
    end = np.datetime64(str(opts["start"])) + (int(opts["inits"]) - 1) * np.timedelta64(every, "D")
    made = synth(
        str(out) + "-synth",
        n_lat=8,
        n_lon=16,
        levels=opts["levels"],
        leads=opts["leads"],
        members=opts["members"],
        start=str(opts["start"]),
        end=str(end),
        every_days=every,
        seed=opts["seed"],
    )
    out.mkdir(parents=True, exist_ok=True)
    paths = {}
    for name in ("forecast", "analysis"):
        with xr.open_dataset(made[name]) as ds:
            ds = ds.load()
        attrs = {k: v for k, v in ds.attrs.items() if not k.startswith("synth_")}
        attrs.update({f"physics_{k}": v for k, v in opts.items()}, physics_leads=ds.attrs["synth_leads"])
        paths[name] = out / f"{name}.nc"
        ds.attrs = attrs
        ds.to_netcdf(paths[name])
    CALLS.append(dict(opts))
    return paths


CALLS: list[dict] = []


@pytest.fixture
def physics_generator(monkeypatch: pytest.MonkeyPatch) -> list[dict]:
    """The stand-in in place of ``ensml.data.physics.generate``; its calls, in order."""
    module = types.ModuleType("ensml.data.physics.generate")
    module.physics = stand_in  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "ensml.data.physics.generate", module)
    CALLS.clear()
    return CALLS


def physics_args(data_dir: Path, out: Path) -> list[str]:
    args = [
        "benchmark",
        f"--data_dir={data_dir}",
        f"--out_dir={out}",
        "--bound=false",
        "--k=3",
        "--input_leads=[0, 24, 48]",
        "--target_leads=[48]",
        "--variables=[z, t]",
        "--levels=[500, 850]",
        "--batch_size=4",
        "--limit_train_batches=1",
        "--emos=[local]",
        f"--models={MODEL}",
    ]
    args += [f"--physics.{key}={value}" for key, value in asdict(OPTIONS).items()]
    return args + [f"--{key}={value}" for key, value in PERIODS.items()]


def by_hand(data_dir: Path) -> dict[str, float]:
    """The raw ensemble's spread/skill ratio and rank-histogram flatness, and the PIT flatness of
    its Gaussian (mean, ddof-1 std) in M + 1 bins, of z at 500 hPa and 48 h, by numpy and scipy."""
    fc = xr.open_dataset(data_dir / "forecast.nc").load()
    an = xr.open_dataset(data_dir / "analysis.nc").load()
    inits = fc.init_time.values[
        (fc.init_time.values >= np.datetime64("2000-01-30"))
        & (fc.init_time.values <= np.datetime64("2000-02-13"))
    ]
    lead = np.timedelta64(48, "h")
    x = fc.z.sel(init_time=inits, lead_time=lead, level=500).transpose("init_time", "member", ...).values
    y = an.z.sel(time=inits + lead, level=500).values
    x, y = x.astype(np.float64), y.astype(np.float64)
    m = x.shape[1]
    w = np.broadcast_to(cell_area_weights(fc.latitude.values)[:, None], y.shape[1:])
    w = np.broadcast_to(w, y.shape)
    mean, var = x.mean(1), x.var(1, ddof=1)
    ssr = np.sqrt((w * var * (m + 1) / m).sum() / (w * (mean - y) ** 2).sum())
    ranks = (x < y[:, None]).sum(1)
    counts = np.array([(w * (ranks == r)).sum() for r in range(m + 1)])
    flat = np.mean(np.abs(counts / counts.mean() - 1))
    pit = stats.norm.cdf(y, mean, np.sqrt(var))
    bins = np.minimum((pit * (m + 1)).astype(int), m)
    pit_counts = np.array([(w * (bins == b)).sum() for b in range(m + 1)])
    return {"ssr": ssr, "flatness": flat, "pit_flatness": np.mean(np.abs(pit_counts / pit_counts.mean() - 1))}


@pytest.mark.slow  # a whole benchmark
def test_physics_benchmark_end_to_end(physics_generator, tmp_path: Path) -> None:
    data_dir, out = tmp_path / "physics", tmp_path / "out"
    assert main(physics_args(data_dir, out)) == 0
    assert len(physics_generator) == 1 and physics_generator[0] == asdict(OPTIONS)
    assert ensure_data(data_dir, OPTIONS) == {n: data_dir / f"{n}.nc" for n in ("forecast", "analysis")}
    assert len(physics_generator) == 1  # reused, not generated again

    table = pd.read_csv(out / "benchmark.csv")
    for col in ("gap_closed", "crps_events", "events_skill_vs_raw"):
        assert col not in table
    assert not table["model"].str.contains("oracle|bound").any()
    text = (out / "benchmark.md").read_text()
    assert "oracle" not in text and "skill_vs_local_emos" in text
    assert (out / "crps_difference.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"

    crps = table[table["crps"].notna()]
    assert len(crps) == 6 * 2 * 2  # raw, subset, their Gaussians, local EMOS, tiny × variables × levels
    emos = crps[crps["model"] == "local EMOS (Gaussian)"]
    assert (emos["skill_vs_local_emos"] == 0).all() and emos["emos_skill_low"].isna().all()
    fields = ["variable", "level_hPa"]
    others = crps[crps["model"] != "local EMOS (Gaussian)"].merge(
        emos[[*fields, "crps"]].rename(columns={"crps": "emos_crps"}), on=fields
    )
    skill = others["skill_vs_local_emos"]
    np.testing.assert_allclose(skill, 1 - others["crps"] / others["emos_crps"], rtol=1e-12)
    assert ((others["emos_skill_low"] <= skill) & (skill <= others["emos_skill_high"])).all()
    calib = crps[["spread_skill_ratio", "ssr_low", "ssr_high", "flatness", "flatness_low", "flatness_high"]]
    assert calib.notna().all().all() and (calib >= 0).all().all()
    ssr = crps["spread_skill_ratio"]
    assert ((crps["ssr_low"] <= ssr) & (ssr <= crps["ssr_high"])).all()

    ref = by_hand(data_dir)
    z500 = crps[(crps["variable"] == "z") & (crps["level_hPa"] == 500)].set_index("model")
    raw = z500.loc["raw ensemble (6 members)"]
    assert raw["spread_skill_ratio"] == pytest.approx(ref["ssr"], rel=1e-5)
    assert raw["flatness"] == pytest.approx(ref["flatness"], rel=1e-6)
    gauss = z500.loc["raw ensemble (6 members, Gaussian of mean/std)"]
    assert gauss["spread_skill_ratio"] == pytest.approx(ref["ssr"] * np.sqrt(6 / 7), rel=1e-5)  # no (M+1)/M
    assert gauss["flatness"] == pytest.approx(ref["pit_flatness"], abs=2e-3)  # a point on a bin edge may move

    summary = pd.read_csv(out / "benchmark_summary.csv")
    assert {"mean_skill_vs_local_emos", "mean_spread_skill_ratio", "mean_flatness"} <= set(summary.columns)
    assert "mean_gap_closed" not in summary and "mean_events_skill_vs_raw" not in summary


def test_data_source_checks(physics_generator, tmp_path: Path) -> None:
    data_dir = tmp_path / "physics"
    stand_in(data_dir, overwrite=True, **asdict(OPTIONS))
    with pytest.raises(EnsmlError, match=r"physics.seed=0, the config asks for seed=3"):
        ensure_data(data_dir, PhysicsOptions(**{**asdict(OPTIONS), "seed": 3}))
    with pytest.raises(EnsmlError, match="holds data of the physics generator"):
        ensure_data(data_dir, SynthOptions())
