"""The physics testbed: the Held–Suarez forcing against the paper's formulas worked by hand, the
model's symmetry, and ``ensml data physics`` end to end on a seconds-long dataset that every
verb reads."""

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
    tendency = HeldSuarezTendency(core.grid, core._sigma.numpy(), np.full(8, 288.0 * core.kelvin),
                                  kelvin=core.kelvin, per_day=1.0, pascal=core.pascal)  # fmt: skip
    d_vort, _d_div, d_temp = tendency(state)
    k_v = friction_rate(core._sigma.numpy())[None, :, None, None]
    np.testing.assert_allclose(d_vort.numpy(), -k_v * state.vorticity.numpy(), rtol=1e-6)
    heating = core.grid.to_nodal(d_temp)[0, -1] / core.kelvin  # lowest layer, (lon, lat)
    lat = np.rad2deg(np.arcsin(core.grid.spec.nodal_axes[1]))
    assert heating[:, np.abs(lat).argmin()].min() > 0  # 288 K is below T_eq ≈ 309 K there
    assert heating[:, np.abs(lat).argmax()].max() < 0  # and above T_eq ≈ 255 K at the poles


def test_rest_state_stays_zonally_symmetric(core) -> None:
    state = core.advance(core.rest(1), 24)
    fields = core.on_pressure(state, [500, 850])
    for name, values in fields.items():
        assert np.isfinite(values).all()
        assert float(values.std(axis=-1).max()) < 1e-3 * float(np.abs(values).mean()), name
    assert float(fields["t"].std(axis=-2).max()) > 0.1  # but not uniform: the forcing works


@pytest.fixture(scope="module")
def tiny(tmp_path_factory) -> dict:
    out = tmp_path_factory.mktemp("physics") / "tiny"
    assert main(["data", "physics", "--out_dir", str(out), *TINY]) == 0
    return {"forecast": out / "forecast.nc", "analysis": out / "analysis.nc", "dir": out}


def test_the_dataset_is_in_ensmls_vocabulary(tiny) -> None:
    from ensml.data.frame import build_frame

    with xr.open_dataset(tiny["forecast"]) as fc, xr.open_dataset(tiny["analysis"]) as an:
        assert dict(fc.sizes) == {"init_time": 3, "lead_time": 5, "member": 3, "level": 2, "latitude": 32,
                                  "longitude": 64}  # fmt: skip
        assert fc["z"].attrs["units"] == "m2 s-2" and fc["t"].attrs["units"] == "K"
        assert fc.attrs["physics_truncation"] == "T21" and fc.attrs["physics_spinup_days"] == 2
        assert np.all(np.diff(fc.latitude) < 0) and fc.latitude[0] > 85  # north to south, Gaussian
        assert an.sizes["time"] == (3 - 1) * 2 + 48 // 12 + 1  # every 12 h, first init to last valid
        z500 = an["z"].sel(level=500)
        assert 4.5e4 < float(z500.min()) and float(z500.max()) < 6.2e4
        assert 180 < float(an["t"].min()) and float(an["t"].max()) < 320
    frame = build_frame(str(tiny["forecast"]), str(tiny["analysis"]), variables=["z", "t"], levels=[500, 850],
                        leads=["0h", "48h"])  # fmt: skip
    at0 = frame.at(np.timedelta64(0, "h"))
    err = (at0.forecast["t"].mean("member") - at0.analysis["t"]).values
    assert 0.01 < float(np.sqrt(np.mean(err**2))) < 1.0  # the analysis error: a fraction of a kelvin


def test_same_seed_same_data_whatever_the_workers(tiny, tmp_path) -> None:
    out = tmp_path / "again"
    args = [*TINY[:-1], "2"]  # two worker processes instead of none
    assert main(["data", "physics", "--out_dir", str(out), *args]) == 0
    for name in ("forecast.nc", "analysis.nc"):
        with xr.open_dataset(tiny["dir"] / name) as a, xr.open_dataset(out / name) as b:
            xr.testing.assert_identical(a.drop_attrs(), b.drop_attrs())


def test_every_verb_reads_it_evaluate(tiny, tmp_path) -> None:
    out = tmp_path / "eval"
    args = ["evaluate", f"--forecast={tiny['forecast']}", f"--analysis={tiny['analysis']}",
            f"--out_dir={out}", "--leads=[24, 48]", "--k=2"]  # fmt: skip
    assert main(args) == 0
    import pandas as pd

    table = pd.read_csv(out / "scores.csv")
    raw = table[table["forecast"] == "raw ensemble (3 members)"]
    assert len(raw) == 2 * 2 * 2  # z and t, 500 and 850 hPa, 24 and 48 h
    assert (raw["crps"] > 0).all() and np.isfinite(raw["crps"]).all()


def test_without_the_extra_one_line_and_nothing_written(tmp_path, monkeypatch, capsys) -> None:
    monkeypatch.setitem(sys.modules, "dinosaur_torch", None)  # import fails, as when not installed
    out = tmp_path / "never"
    assert main(["data", "physics", "--out_dir", str(out), *TINY]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "pip install 'ensml[physics]'" in err[0]
    assert not out.exists()


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
