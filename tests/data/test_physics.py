"""The physics testbed: the Held–Suarez forcing against the paper's formulas worked by hand, the
model's symmetry, its 10 m wind speed against the core's own wind, and ``ensml data physics`` end
to end on a seconds-long dataset that every verb reads."""

from __future__ import annotations

import sys

import numpy as np
import pytest
import torch
import xarray as xr

from ensml.cli.main import main
from ensml.data.physics.forcing import HeldSuarez, cooling_rate, equilibrium_temperature, friction_rate

#: A seconds-long dataset: 3 inits, 3 members, 2 days of spin-up.
TINY = ["--inits", "3", "--members", "3", "--spinup_days", "2", "--workers", "1"]


def test_equilibrium_temperature_by_hand() -> None:
    lat = np.deg2rad([0.0, 90.0, 0.0, 0.0, 45.0])
    p = np.array([1000.0, 1000.0, 500.0, 50.0, 850.0]) * 100.0
    # (315 − 60 sin²φ − 10 ln(p/p0) cos²φ) (p/p0)^(2/7), at least 200 K:
    # 500 hPa at the equator: (315 + 6.9315) · 0.5^(2/7) = 321.9315 · 0.820335 = 264.092;
    # 850 hPa at 45°: (315 − 30 + 0.81259) · 0.85^(2/7) = 285.8126 · 0.954628 = 272.845;
    # 50 hPa: 190.6 K below the floor.
    want = [315.0, 255.0, 264.092, 200.0, 272.845]
    np.testing.assert_allclose(equilibrium_temperature(p, lat), want, atol=2e-3)
    got = equilibrium_temperature(torch.tensor(p), torch.tensor(lat))
    np.testing.assert_allclose(got.numpy(), want, atol=2e-3)  # the model's torch path


def test_cooling_and_friction_rates_by_hand() -> None:
    sigma = np.array([1.0, 1.0, 0.5, 0.85, 0.7])
    lat = np.deg2rad([0.0, 60.0, 0.0, 0.0, 0.0])
    # k_a + (k_s − k_a) · max(0, (σ − 0.7)/0.3) · cos⁴φ; cos⁴ 60° = 1/16
    want = [0.25, 0.025 + 0.225 / 16, 0.025, 0.025 + 0.225 * 0.5, 0.025]
    np.testing.assert_allclose(cooling_rate(sigma, lat), want, rtol=1e-12)
    np.testing.assert_allclose(friction_rate(sigma), [1.0, 1.0, 0.0, 0.5, 0.0], atol=1e-12)
    weak = HeldSuarez(k_f=0.7)
    np.testing.assert_allclose(friction_rate(np.array([1.0]), weak), [0.7])


@pytest.fixture(scope="module")
def core():
    from ensml.data.physics.core import Core, ModelConfig

    return Core(ModelConfig())


def test_forcing_damps_boundary_layer_vorticity_and_heats_the_equator(core) -> None:
    from ensml.data.physics.forcing import HeldSuarezTendency

    gen = torch.Generator().manual_seed(0)
    state = core.perturb(core.rest(1), 0.0, 1e-5, gen)
    tendency = HeldSuarezTendency(
        core.grid,
        core._sigma.numpy(),
        np.full(8, 288.0 * core.kelvin),
        kelvin=core.kelvin,
        per_day=1.0,
        pascal=core.pascal,
    )
    d_vort, _d_div, d_temp = tendency(state)
    k_v = friction_rate(core._sigma.numpy())[None, :, None, None]
    np.testing.assert_allclose(d_vort.numpy(), -k_v * state.vorticity.numpy(), rtol=1e-6)
    heating = core.grid.to_nodal(d_temp)[0, -1] / core.kelvin  # lowest layer, (lon, lat)
    lat = np.rad2deg(np.arcsin(core.grid.spec.nodal_axes[1]))
    assert heating[:, np.abs(lat).argmin()].min() > 0  # 288 K is below T_eq ≈ 309 K there
    assert heating[:, np.abs(lat).argmax()].max() < 0  # and above T_eq ≈ 255 K at the poles


@pytest.mark.slow
def test_rest_state_stays_zonally_symmetric(core) -> None:
    state = core.advance(core.rest(1), 24)
    fields = core.on_pressure(state, [500, 850])
    for name, values in fields.items():
        assert np.isfinite(values).all()
        assert float(values.std(axis=-1).max()) < 1e-3 * float(np.abs(values).mean()), name
    assert float(fields["t"].std(axis=-2).max()) > 0.1  # but not uniform: the forcing works


def test_wind_speed_of_a_solid_body_rotation_is_the_log_law_share_of_it(core) -> None:
    from ensml.data.physics.core import SEA_ROUGHNESS_M

    # z1 = R · 288 K / g · ln(1/σ) at σ = 15/16: 287.0 · 288 / 9.80616 · 0.0645385 = 544 m;
    # ln(10 / 2e-4) / ln(544 / 2e-4) = 10.8198 / 14.8162 = 0.7303
    assert core.wind_layer_m == pytest.approx(544.0, rel=2e-3)
    assert core.wind_factor == pytest.approx(0.7303, abs=2e-4)
    assert core.wind_factor == pytest.approx(
        np.log(10 / SEA_ROUGHNESS_M) / np.log(core.wind_layer_m / SEA_ROUGHNESS_M)
    )
    # u = 20 m/s · cos φ, v = 0 on every layer, through vorticity and divergence and back
    u = (20.0 * core.metre_per_second * core.grid.cos_lat).expand(1, 8, *core.grid.nodal_shape)
    vorticity, divergence = core.grid.uv_nodal_to_vor_div_modal(u, torch.zeros_like(u))
    rest = core.rest(1)
    state = core._pe.State(
        vorticity=vorticity,
        divergence=divergence,
        temperature_variation=rest.temperature_variation,
        log_surface_pressure=rest.log_surface_pressure,
        sim_time=0.0,
    )
    speed = core.wind_speed(state)
    assert speed.shape == (1, 32, 64) and speed.dtype == np.float32
    want = core.wind_factor * 20.0 * np.cos(np.deg2rad(core.latitude))  # north to south
    np.testing.assert_allclose(speed[0], np.broadcast_to(want[:, None], (32, 64)), atol=1e-3)


def test_wind_speed_is_the_cores_own_lowest_layer_wind(core) -> None:
    state = core.perturb(core.rest(2), 0.5, 5e-6, torch.Generator().manual_seed(1))
    state = core.advance(state, 6)
    speed = core.wind_speed(state)
    # the core's diagnostic wind (what its dynamics advect with): cos φ · (u, v), nodal (lon, lat)
    cos_lat_u, cos_lat_v = core._pe.compute_diagnostic_state(state, core.coords).cos_lat_u
    u, v = (x[:, -1] / core.grid.cos_lat / core.metre_per_second for x in (cos_lat_u, cos_lat_v))
    want = core.wind_factor * np.sqrt(u.numpy() ** 2 + v.numpy() ** 2)
    np.testing.assert_allclose(speed, want.transpose(0, 2, 1)[:, ::-1], rtol=1e-5, atol=1e-5)
    assert (speed >= 0).all() and 0.1 < float(speed.max()) < 30
    assert not np.array_equal(speed[0], speed[1])  # each state its own wind
    assert set(core.outputs(state, [500])) == {"z", "t", "si10"}


@pytest.fixture(scope="module")
def tiny(tmp_path_factory) -> dict:
    out = tmp_path_factory.mktemp("physics") / "tiny"
    assert main(["data", "physics", "--out_dir", str(out), *TINY]) == 0
    return {"forecast": out / "forecast.nc", "analysis": out / "analysis.nc", "dir": out}


@pytest.mark.slow
def test_the_dataset_is_in_ensmls_vocabulary(tiny) -> None:
    from ensml.data.frame import build_frame

    with xr.open_dataset(tiny["forecast"]) as fc, xr.open_dataset(tiny["analysis"]) as an:
        sizes = {"init_time": 3, "lead_time": 5, "member": 3, "level": 2, "latitude": 32, "longitude": 64}
        assert dict(fc.sizes) == sizes
        assert fc["z"].attrs["units"] == "m2 s-2" and fc["t"].attrs["units"] == "K"
        assert fc.attrs["physics_truncation"] == "T21" and fc.attrs["physics_spinup_days"] == 2
        assert np.all(np.diff(fc.latitude) < 0) and fc.latitude[0] > 85  # north to south, Gaussian
        assert an.sizes["time"] == (3 - 1) * 2 + 48 // 12 + 1  # every 12 h, first init to last valid
        z500 = an["z"].sel(level=500)
        assert 4.5e4 < float(z500.min()) and float(z500.max()) < 6.2e4
        assert 180 < float(an["t"].min()) and float(an["t"].max()) < 320
    frame = build_frame(
        str(tiny["forecast"]),
        str(tiny["analysis"]),
        variables=["z", "t"],
        levels=[500, 850],
        leads=["0h", "48h"],
    )
    at0 = frame.at(np.timedelta64(0, "h"))
    err = (at0.forecast["t"].mean("member") - at0.analysis["t"]).values
    assert 0.01 < float(np.sqrt(np.mean(err**2))) < 1.0  # the analysis error: a fraction of a kelvin


@pytest.mark.slow  # the tiny physics run (20 s) is the fixture
def test_si10_is_a_surface_wind_speed_for_the_truth_and_every_member(tiny) -> None:
    with xr.open_dataset(tiny["forecast"]) as fc, xr.open_dataset(tiny["analysis"]) as an:
        fc, an = fc.load(), an.load()
    assert fc["si10"].dims == ("init_time", "lead_time", "member", "latitude", "longitude")
    assert an["si10"].dims == ("time", "latitude", "longitude")
    for ds in (fc, an):
        attrs = ds["si10"].attrs
        assert (attrs["standard_name"], attrs["units"]) == ("wind_speed", "m s-1")
        assert "lowest sigma layer" in attrs["comment"]
        values = ds["si10"].values
        assert values.dtype == np.float32 and np.isfinite(values).all() and (values >= 0).all()
        # two days from rest: the circulation is still weak and zonal (0.4 m s⁻¹ on average,
        # at most 2), not yet the jets' 5-20 m s⁻¹ of the spun-up model (120 days)
        assert 0.1 < float(values.mean()) < 2 and float(values.max()) < 10
    truth = an["si10"].sel(time=fc["valid_time"])  # (init, lead, lat, lon)
    spread = fc["si10"].std("member").mean(("init_time", "latitude", "longitude"))
    assert (spread > 0).all()  # every member its own wind
    rmse = np.sqrt(((fc["si10"].mean("member") - truth) ** 2).mean(("init_time", "latitude", "longitude")))
    assert 0 < float(rmse[0]) < 0.1  # the members start off the truth, close to it,
    assert (rmse.diff("lead_time") > 0).all()  # and the imperfect model drifts away
    # Spread does not grow here: two days from rest, the flow is still zonal and its perturbations
    # (drawn from those two days' anomalies) decay; on spun-up data it grows as for z and t.


@pytest.mark.slow
def test_the_analysis_is_the_cores_truth_state(tiny) -> None:
    """The truth's first analysis time, spun up again here: z, t and si10 are the core's fields of
    that state (si10 computed beside z and t, which it leaves as they were)."""
    from ensml.data.physics.generate import _plan
    from ensml.data.physics.runs import core_for, spin_up

    plan = _plan("T21", 8, (500, 850), (0, 12, 24, 36, 48), 3, 3, 24, 2, 0)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # as the generator runs the truth
    try:
        core = core_for(plan.truth)
        state, _ = spin_up(plan, core)
        fields = core.outputs(state, plan.levels)
    finally:
        torch.set_num_threads(threads)
    with xr.open_dataset(tiny["analysis"]) as an:
        first = an.isel(time=0).load()
    for name, values in fields.items():
        np.testing.assert_allclose(first[name].values, values[0], rtol=1e-6, atol=1e-6, err_msg=name)


@pytest.mark.slow  # generates the data twice
def test_same_seed_same_data_whatever_the_workers(tiny, tmp_path) -> None:
    out = tmp_path / "again"
    args = [*TINY[:-1], "2"]  # two worker processes instead of none
    assert main(["data", "physics", "--out_dir", str(out), *args]) == 0
    for name in ("forecast.nc", "analysis.nc"):
        with xr.open_dataset(tiny["dir"] / name) as a, xr.open_dataset(out / name) as b:
            assert set(a.data_vars) == {"z", "t", "si10"}
            xr.testing.assert_identical(a.drop_attrs(), b.drop_attrs())


@pytest.mark.slow
def test_every_verb_reads_it_evaluate(tiny, tmp_path) -> None:
    out = tmp_path / "eval"
    args = [
        "evaluate",
        f"--forecast={tiny['forecast']}",
        f"--analysis={tiny['analysis']}",
        f"--out_dir={out}",
        "--leads=[24, 48]",
        "--k=2",
    ]
    assert main(args) == 0
    import pandas as pd

    table = pd.read_csv(out / "scores.csv")
    raw = table[table["forecast"] == "raw ensemble (3 members)"]
    assert len(raw) == (2 * 2 + 1) * 2  # z and t at 500 and 850 hPa, si10 (no level); 24 and 48 h
    assert (
        set(raw["variable"]) == {"z", "t", "si10"}
        and raw.loc[raw["variable"] == "si10", "level_hPa"].isna().all()
    )
    assert (raw["crps"] > 0).all() and np.isfinite(raw["crps"]).all()


def test_without_the_extra_one_line_and_nothing_written(tmp_path, monkeypatch, capsys) -> None:
    monkeypatch.setitem(sys.modules, "dinosaur_torch", None)  # import fails, as when not installed
    out = tmp_path / "never"
    assert main(["data", "physics", "--out_dir", str(out), *TINY]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "pip install 'ensml[physics]'" in err[0]
    assert not out.exists()


@pytest.mark.slow  # the tiny physics run (20 s) is the fixture
def test_the_benchmark_reuses_it_by_its_attributes_and_refuses_other_options(tiny) -> None:
    from ensml.errors import EnsmlError
    from ensml.experiments.benchmark_data import ensure_data
    from ensml.experiments.options import PhysicsOptions

    made = PhysicsOptions(inits=3, members=3, spinup_days=2)  # the fixture's, read back from its files
    before = {p: p.stat().st_mtime_ns for p in (tiny["forecast"], tiny["analysis"])}
    assert ensure_data(tiny["dir"], made) == {"forecast": tiny["forecast"], "analysis": tiny["analysis"]}
    assert {p: p.stat().st_mtime_ns for p in before} == before  # reused, not made again
    with pytest.raises(EnsmlError, match=r"physics\.seed=0, the config asks for seed=1"):
        ensure_data(tiny["dir"], PhysicsOptions(inits=3, members=3, spinup_days=2, seed=1))
