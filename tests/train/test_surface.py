"""Surface (single-level) variables beside pressure-level ones: samples, statistics, tasks, output."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import xarray as xr

from ensml.data.datamodule import EnsembleDataModule
from ensml.data.surface import broadcast_levels, check_not_at_level, read_levels, surface_mask
from ensml.errors import EnsmlError
from ensml.train.tasks import MixedTask, SpreadTask
from tests.conftest import SMOKE, TINY_PERIODS, tiny_data_args

VARIABLES = ["z", "t", "t2m"]


@pytest.fixture(scope="module")
def surface_data(tmp_path_factory) -> dict:
    """The tiny dataset of tests/conftest.py with the surface variable t2m."""
    from ensml.data.synth.generate import synth

    out = tmp_path_factory.mktemp("surface") / "synth"
    return synth(
        out, n_lat=16, n_lon=32, start="2017-01-01", end="2017-12-31", every_days=3, seed=1, surface=True
    )


@pytest.fixture(scope="module")
def data(surface_data):
    dm = EnsembleDataModule(
        surface_data["forecast"], surface_data["analysis"], variables=VARIABLES, batch_size=3, **TINY_PERIODS
    )
    dm.setup("fit")
    return dm, next(iter(dm.val_dataloader()))


def make(cls, dm):
    torch.manual_seed(0)
    task = cls(variables=VARIABLES, width=4, depth=2)
    task.set_stats(dm.stats, dm.coords["latitude"])
    return task


def test_synth_t2m_is_the_1000_hpa_temperature_and_leaves_z_t_unchanged(tmp_path) -> None:
    from ensml.data.synth.generate import synth

    kw = dict(n_lat=8, n_lon=16, start="2017-01-01", end="2017-01-20", every_days=2, seed=3)
    plain = synth(tmp_path / "plain", levels=(500, 850), **kw)
    a = synth(tmp_path / "a", levels=(500, 850), surface=True, **kw)
    b = synth(tmp_path / "b", levels=(500, 850, 1000), **kw)
    with xr.open_dataset(a["forecast"]) as fa, xr.open_dataset(b["forecast"]) as fb:
        assert fa["t2m"].dims == ("init_time", "lead_time", "member", "latitude", "longitude")
        np.testing.assert_array_equal(fa["t2m"].values, fb["t"].sel(level=1000).values)
        np.testing.assert_array_equal(fa["z"].values, fb["z"].sel(level=[500, 850]).values)
        with xr.open_dataset(plain["forecast"]) as fp:
            assert "t2m" not in fp  # opt-in
            np.testing.assert_array_equal(fa["t"].values, fp["t"].values)
    with xr.open_dataset(a["analysis"]) as aa, xr.open_dataset(b["analysis"]) as ab:
        np.testing.assert_array_equal(aa["t2m"].values, ab["t"].sel(level=1000).values)
        assert 270 < float(aa["t2m"].mean()) < 290  # K: a warm, near-surface level
    with xr.open_dataset(a["oracle"]) as oa, xr.open_dataset(b["oracle"]) as ob:
        np.testing.assert_array_equal(oa["t2m_std"].values, ob["t_std"].sel(level=1000).values)


@pytest.mark.slow
def test_oracle_of_t2m_is_calibrated(surface_data) -> None:
    """(analysis − oracle mean) / oracle std is standard normal for the surface variable too."""
    with xr.open_dataset(surface_data["oracle"]) as orc, xr.open_dataset(surface_data["analysis"]) as an:
        lead = orc["lead_time"].values[-1]
        mu, sd = orc["t2m_mean"].sel(lead_time=lead), orc["t2m_std"].sel(lead_time=lead)
        obs = an["t2m"].sel(time=orc["init_time"].values + lead).values
        z = (obs - mu.values) / sd.values
    assert abs(z.mean()) < 0.05 and abs(z.std() - 1.0) < 0.05


def test_sample_repeats_the_surface_field_over_levels(data, surface_data) -> None:
    dm, batch = data
    assert batch["mean_k"].shape[1:4] == (3, 3, 2)  # (V, L, D)
    np.testing.assert_array_equal(dm.stats["surface"], [0, 0, 1])
    t2m = batch["mean_k"][:, 2]  # (B, L, D, H, W)
    torch.testing.assert_close(t2m[:, :, 0], t2m[:, :, 1], rtol=0, atol=0)
    init = dm.val_set.init_times[int(batch["index"][0])]
    with xr.open_dataset(surface_data["forecast"]) as fc:
        ref = fc["t2m"].sel(init_time=init).isel(member=slice(0, 5)).mean("member").values
        obs = xr.open_dataset(surface_data["analysis"])["t2m"].sel(time=init + np.timedelta64(48, "h")).values
    np.testing.assert_allclose(t2m[0, :, 0].numpy(), ref, rtol=1e-6)
    np.testing.assert_allclose(batch["obs"][0, 2, 1].numpy(), obs, rtol=1e-6)
    # Statistics: the surface variable's are one field, the same at every level.
    np.testing.assert_array_equal(dm.stats["clim_mean"][2, 0], dm.stats["clim_mean"][2, 1])


@pytest.mark.parametrize("cls", [SpreadTask, MixedTask])
def test_outputs_of_a_surface_variable_are_tied_across_levels(cls, data) -> None:
    dm, batch = data
    task = make(cls, dm)
    out = task(batch)
    for x in out if isinstance(out, tuple) else (out,):
        torch.testing.assert_close(x[:, 2, 0], x[:, 2, 1], rtol=0, atol=0)
        assert not torch.equal(x[:, 0, 0], x[:, 0, 1])  # pressure levels stay free
    loss = task.loss(batch)
    loss.backward()
    assert torch.isfinite(loss) and all(torch.isfinite(p.grad).all() for p in task.parameters())


def test_checkpoint_without_surface_buffer_loads(data) -> None:
    dm, _ = data
    old = make(MixedTask, dm)
    state = {k: v for k, v in old.state_dict().items() if k != "surface"}  # as saved before
    new = MixedTask(variables=VARIABLES, width=4, depth=2)
    new.load_state_dict(state)
    assert new.surface.tolist() == [0, 0, 0]


@pytest.fixture(scope="module")
def surface_fit(surface_data, tmp_path_factory):
    """A smoke MixedTask trained and run on the test split with z, t and t2m."""
    from ensml.cli.main import main

    work = tmp_path_factory.mktemp("surface_fit")
    args = [*tiny_data_args(surface_data), "--data.variables=[z, t, t2m]"]
    with pytest.MonkeyPatch.context() as mp:
        mp.chdir(work)
        assert main(["fit", "--config", SMOKE, *args]) == 0
        assert (
            main(["predict", "--config", SMOKE, *args, "--ckpt_path=runs/smoke/checkpoints/best.ckpt"]) == 0
        )
    return work / "runs/smoke"


@pytest.mark.slow
def test_fit_and_predict_write_the_surface_variable_without_level(surface_fit) -> None:
    with xr.open_dataset(surface_fit / "predictions.nc") as pred:
        assert pred["t2m_mean"].dims == ("init_time", "latitude", "longitude")
        assert pred["t_mean"].dims == ("init_time", "level", "latitude", "longitude")
        assert float(pred["t2m_std"].min()) > 0
        assert 250 < float(pred["t2m_mean"].mean()) < 300


def test_postprocess_products_of_a_surface_variable(surface_data, surface_fit, tmp_path) -> None:
    from ensml.cli.main import main
    from ensml.data.archive import archive
    from tests.postprocess.conftest import pp_args

    archive(str(surface_data["forecast"]), str(tmp_path / "in"), period=("2017-12-01", "2017-12-10"))
    ckpt = surface_fit / "checkpoints/best.ckpt"
    assert (
        main(pp_args([ckpt], tmp_path / "in" / "*.nc", tmp_path / "out", analysis=surface_data["analysis"]))
        == 0
    )
    outputs = sorted((tmp_path / "out").glob("*.nc"))
    assert outputs
    with xr.open_dataset(outputs[0]) as out, xr.open_dataset(surface_fit / "predictions.nc") as pred:
        assert out["t2m_mean"].dims == ("init_time", "lead_time", "latitude", "longitude")
        assert "level" not in out["t2m_quantile"].dims and "level" in out["t_quantile"].dims
        assert "level" not in out["t2m"].dims  # the ECC members
        init = out["init_time"].values[0]
        np.testing.assert_allclose(
            out["t2m_mean"].sel(init_time=init).isel(lead_time=0).values,
            pred["t2m_mean"].sel(init_time=init).values,
            rtol=1e-5,
        )


def test_postprocess_refuses_a_surface_variable_on_levels(surface_data, surface_fit, tmp_path) -> None:
    from ensml.cli.main import main
    from tests.postprocess.conftest import pp_args

    with xr.open_dataset(surface_data["forecast"]) as fc:
        bad = fc.isel(init_time=slice(-3, None)).load()
    bad["t2m"] = bad["t"]
    bad.to_netcdf(tmp_path / "bad.nc")
    ckpt = surface_fit / "checkpoints/best.ckpt"
    args = pp_args([ckpt], tmp_path / "bad.nc", tmp_path / "out", analysis=surface_data["analysis"])
    assert main(args) == 2  # the file fails alone (ensml.errors.EXIT_CODES: part of the work failed)
    assert not list((tmp_path / "out").glob("*.nc"))


def test_helpers_on_a_hand_made_dataset() -> None:
    ds = xr.Dataset(
        {
            "t": (("time", "level", "latitude", "longitude"), np.zeros((2, 3, 4, 1))),
            "t2m": (("time", "latitude", "longitude"), np.ones((2, 4, 1))),
        },
        coords={"level": [300.0, 500.0, 850.0]},
    )
    np.testing.assert_array_equal(surface_mask(ds, ["t", "t2m"]), [0, 1])
    out = broadcast_levels(ds)
    assert out["t2m"].dims == ("time", "level", "latitude", "longitude") and float(out["t2m"].sum()) == 24
    np.testing.assert_array_equal(read_levels(np.arange(4.0), 3, 0), np.tile(np.arange(4.0), (3, 1)))
    with pytest.raises(EnsmlError, match="need at least one pressure-level variable"):
        broadcast_levels(ds[["t2m"]])
    with pytest.raises(EnsmlError, match=r"^case x: variable 't2m' is a surface .* no level 850 hPa"):
        check_not_at_level(ds["t2m"], 850, "case x")
    check_not_at_level(ds["t"], 850, "case x")  # a pressure-level variable at a level: fine


def test_surface_in_forecast_but_levels_in_analysis(surface_data, tmp_path) -> None:
    with xr.open_dataset(surface_data["analysis"]) as an:
        bad = an.load()
    bad["t2m"] = bad["t"]  # the analysis holds t2m on pressure levels
    bad.to_netcdf(tmp_path / "analysis.nc")
    dm = EnsembleDataModule(
        surface_data["forecast"], tmp_path / "analysis.nc", variables=VARIABLES, **TINY_PERIODS
    )
    with pytest.raises(
        EnsmlError, match=r"^variable 't2m' has no level dimension in forecast .* but has levels in analysis"
    ):
        dm.setup("fit")
    assert not (tmp_path / "runs").exists()


def test_a_case_study_of_a_surface_variable_at_a_level(surface_data) -> None:
    from ensml.verify.cases import case_from_dict
    from ensml.verify.casestudy import score_case

    case = case_from_dict(
        {
            "name": "warm spell",
            "variable": "t2m",
            "level": 850,
            "lead": 48,
            "region": {"lat": [30, 60], "lon": [0, 40]},
            "window": ["2017-11-01", "2017-11-30"],
            "threshold": {"quantile": 0.9, "tail": "upper"},
        }
    )
    message = r"^case 'warm spell' \(forecast .*\): variable 't2m' is a surface .* has no level 850 hPa"
    with pytest.raises(EnsmlError, match=message):
        score_case(case, str(surface_data["forecast"]), str(surface_data["analysis"]))


def test_evaluate_scores_a_surface_variable_once(surface_data, tmp_path) -> None:
    """Raw-ensemble CRPS of t2m against properscoring, area-weighted by hand; oracle rows too."""
    import properscoring as ps

    from ensml.verify.evaluate import evaluate
    from tests.conftest import cell_area_weights

    table = evaluate(
        str(surface_data["forecast"]),
        str(surface_data["analysis"]),
        oracle=str(surface_data["oracle"]),
        variables=["z", "t2m"],
        leads=48,
        out_dir=str(tmp_path / "eval"),
    ).table
    t2m = table[table["variable"] == "t2m"]
    assert len(t2m) == 3 and t2m["level_hPa"].isna().all()  # raw, subset, oracle: one row each
    assert len(table[table["variable"] == "z"]) == 6  # two levels
    with xr.open_dataset(surface_data["forecast"]) as fc, xr.open_dataset(surface_data["analysis"]) as an:
        lead = np.timedelta64(48, "h")
        inits = fc["init_time"].values[np.isin(fc["init_time"].values + lead, an["time"].values)]
        x = fc["t2m"].sel(init_time=inits, lead_time=lead).transpose(..., "member").values
        y = an["t2m"].sel(time=inits + lead).values
    w = cell_area_weights(fc["latitude"].values)[None, :, None]
    expected = float((ps.crps_ensemble(y, x) * w).sum() / (w * np.ones_like(y)).sum())
    raw = t2m[t2m["forecast"].str.startswith("raw ensemble")]["crps"].item()
    np.testing.assert_allclose(raw, expected, rtol=1e-5)
    oracle = t2m[t2m["forecast"] == "oracle (Gaussian)"]["crps"].item()
    assert oracle < raw  # the oracle of the surface variable beats the raw ensemble
    assert "| t2m | surface | 48 | raw ensemble" in (tmp_path / "eval" / "scores.md").read_text()


@pytest.mark.slow
def test_report_scores_a_surface_variable_at_every_lead(surface_data, tmp_path) -> None:
    """The report's by-lead sections hold t2m as one 'surface' field: its CRPS at each lead scored
    (those evaluate scores: 24 and 48 h, no 0 h without a run) is properscoring's, and the charts,
    rank histograms and reliability diagrams draw it."""
    import properscoring as ps

    from ensml.report.assemble import report
    from tests.conftest import cell_area_weights

    out = report(
        str(surface_data["forecast"]),
        str(surface_data["analysis"]),
        oracle=str(surface_data["oracle"]),
        variables=["z", "t2m"],
        levels=[500.0],
        out_dir=str(tmp_path / "report"),
    ).path
    text = (out / "report.md").read_text()
    with xr.open_dataset(surface_data["forecast"]) as fc, xr.open_dataset(surface_data["analysis"]) as an:
        w = cell_area_weights(fc["latitude"].values)[None, :, None]
        inits = fc["init_time"].values[
            np.isin(fc["init_time"].values + np.timedelta64(48, "h"), an["time"].values)
        ]
        assert not any(r.startswith("| t2m | surface | 0 |") for r in text.splitlines())
        for lead_h in (24, 48):
            lead = np.timedelta64(lead_h, "h")
            x = fc["t2m"].sel(init_time=inits, lead_time=lead).transpose(..., "member").values
            y = an["t2m"].sel(time=inits + lead).values
            crps = float((ps.crps_ensemble(y, x) * w).sum() / (w * np.ones_like(y)).sum())
            # the by-lead table: | t2m | surface | lead | raw ensemble (10 members) | crps | spread | ...
            # (the global table at 48 h has an estimator column before the CRPS)
            row = next(
                r
                for r in text.splitlines()
                if r.startswith(f"| t2m | surface | {lead_h} | raw ensemble") and "empirical" not in r
            )
            np.testing.assert_allclose(float(row.split("|")[5]), crps, rtol=1e-3)
    assert "score table only" not in text
    for png in ("crps_by_lead.png", "spread_skill.png", "rank_histograms.png", "reliability.png"):
        assert (out / "figures" / png).stat().st_size > 10_000
