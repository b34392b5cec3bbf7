"""``ensml evaluate --observations``: station scores against properscoring/scoringrules on the pairs
extracted independently, values not observed left out and counted, the lapse-rate correction's closed
form, and an end-to-end run of the CLI on the tiny dataset."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import properscoring as ps
import pytest
import scoringrules as sr
import xarray as xr

from ensml.cli.main import main
from ensml.data.heights import GRAVITY
from ensml.data.points import great_circle_m
from ensml.data.station_frame import build_station_frame
from ensml.errors import EnsmlError
from ensml.verify.evaluate import evaluate

LAT = np.array([60.0, 57.5, 55.0, 52.5, 50.0])
LON = np.array([0.0, 2.5, 5.0, 7.5, 10.0, 12.5])
INITS = pd.date_range("2017-01-01", periods=4, freq="D").values
LEADS = np.array([0, 24, 48], "timedelta64[h]").astype("timedelta64[ns]")
MEMBERS = 8
#: id: (lat, lon, elevation m)
STATIONS = {"A": (58.1, 1.2, 40.0), "B": (55.0, 5.0, 310.0), "C": (51.3, 11.9, 1200.0), "D": (56.6, 8.8, 0.0)}


def write_forecast(folder: Path, seed: int = 0) -> Path:
    """t2m (surface) on a 2.5° grid over the North Sea, 4 daily inits, +0/24/48 h, 8 members."""
    rng = np.random.default_rng(seed)
    shape = (INITS.size, LEADS.size, MEMBERS, LAT.size, LON.size)
    base = 280.0 - 0.5 * (LAT[:, None] - 50.0) + 0.1 * LON[None, :]
    t2m = base + rng.normal(0.0, 1.5, shape)
    ds = xr.Dataset(
        {"t2m": (("init_time", "lead_time", "member", "latitude", "longitude"), t2m, {"units": "K"})},
        coords={
            "init_time": INITS,
            "lead_time": LEADS,
            "member": np.arange(MEMBERS),
            "latitude": LAT,
            "longitude": LON,
        },
    )
    folder.mkdir(parents=True, exist_ok=True)
    ds.to_netcdf(folder / "forecast.nc")
    return folder / "forecast.nc"


def write_observations(folder: Path, seed: int = 1) -> tuple[Path, pd.DataFrame]:
    """Hourly-free daily observations at the stations, some not observed (empty), one time unused."""
    rng = np.random.default_rng(seed)
    times = [*pd.date_range("2017-01-02", periods=5, freq="D"), pd.Timestamp("2017-02-01")]
    rows = [
        {
            "station": s,
            "lat": la,
            "lon": lo,
            "elevation": el,
            "time": t.isoformat(),
            "t2m": 280.0 - 0.5 * (la - 50) + rng.normal(0.0, 2.0),
        }
        for s, (la, lo, el) in STATIONS.items()
        for t in times
    ]
    df = pd.DataFrame(rows)
    df.loc[[1, 6, 7, 15], "t2m"] = np.nan  # not observed
    df.to_csv(folder / "obs.csv", index=False, na_rep="")
    return folder / "obs.csv", df


@pytest.fixture
def data(tmp_path: Path) -> dict:
    fc = write_forecast(tmp_path)
    obs, df = write_observations(tmp_path)
    return {"forecast": fc, "observations": obs, "table": df, "dir": tmp_path}


def reference_at_stations(fc_path: Path, method: str) -> xr.DataArray:
    """The forecast at the stations, made independently: brute-force great-circle nearest over every
    grid point, or xarray's linear interpolation in latitude/longitude."""
    fc = xr.open_dataset(fc_path)["t2m"].load()
    out = []
    for la, lo, _ in STATIONS.values():
        if method == "nearest":
            g_lat, g_lon = np.meshgrid(LAT, LON, indexing="ij")
            i, j = np.unravel_index(np.argmin(great_circle_m(la, lo, g_lat, g_lon)), g_lat.shape)
            out.append(fc.isel(latitude=i, longitude=j, drop=True))
        else:
            out.append(
                fc.interp(latitude=la, longitude=lo, method="linear").drop_vars(["latitude", "longitude"])
            )
    return xr.concat(out, dim="station").assign_coords(station=list(STATIONS))


def pairs(data: dict, method: str) -> pd.DataFrame:
    """Every (lead, init, station) with an observation: the observation and the members."""
    ref = reference_at_stations(data["forecast"], method)
    obs = data["table"].assign(time=pd.to_datetime(data["table"]["time"]))
    rows = []
    for lead in LEADS[1:]:  # every lead but 0 h, the default
        for init in INITS:
            for s in STATIONS:
                hit = obs[(obs["station"] == s) & (obs["time"] == init + lead)]
                if len(hit) and np.isfinite(hit["t2m"].iloc[0]):
                    members = ref.sel(station=s, init_time=init, lead_time=lead).values
                    rows.append(
                        {
                            "lead_h": int(lead / np.timedelta64(1, "h")),
                            "station": s,
                            "obs": hit["t2m"].iloc[0],
                            "members": members,
                        }
                    )
    return pd.DataFrame(rows)


@pytest.mark.parametrize("method", ["nearest", "bilinear"])
def test_pooled_and_per_station_crps_against_properscoring(data: dict, method: str) -> None:
    scores = evaluate(
        str(data["forecast"]), observations=str(data["observations"]), extraction=method, out_dir=None, k=3
    )
    ref = pairs(data, method)
    for lead_h, group in ref.groupby("lead_h"):
        for k, name in ((MEMBERS, f"raw ensemble ({MEMBERS} members)"), (3, "raw subset (3 members)")):
            ens = np.stack(group["members"].to_list())[:, :k]
            y = group["obs"].to_numpy()
            row = scores.table[(scores.table["lead_h"] == lead_h) & (scores.table["forecast"] == name)].iloc[
                0
            ]
            assert row["n_pairs"] == len(group)
            assert row["crps"] == pytest.approx(ps.crps_ensemble(y, ens).mean(), rel=1e-10)
            err = ens.mean(1) - y
            assert row["rmse"] == pytest.approx(np.sqrt((err**2).mean()), rel=1e-10)
            assert row["mae"] == pytest.approx(np.abs(err).mean(), rel=1e-10)
            spread = np.sqrt(ens.var(1, ddof=1).mean())
            assert row["spread"] == pytest.approx(spread, rel=1e-10)
            assert row["spread_skill"] == pytest.approx(
                np.sqrt((k + 1) / k) * spread / np.sqrt((err**2).mean())
            )
            for s, one in group.groupby("station"):
                st = scores.stations
                srow = st[(st["lead_h"] == lead_h) & (st["forecast"] == name) & (st["station"] == s)].iloc[0]
                one_ens = np.stack(one["members"].to_list())[:, :k]
                assert srow["n_pairs"] == len(one)
                assert srow["crps"] == pytest.approx(ps.crps_ensemble(one["obs"].to_numpy(), one_ens).mean())
    assert set(scores.table["lead_h"]) == {24, 48}


def test_values_not_observed_are_left_out_and_counted(data: dict) -> None:
    scores = evaluate(str(data["forecast"]), observations=str(data["observations"]), out_dir=None)
    raw = scores.table[scores.table["forecast"].str.startswith("raw ensemble")]
    # by hand: valid times 01-02 … 01-05 at +24 h and 01-03 … 01-06 at +48 h; 4 stations; the
    # observations left empty are A 01-03, B 01-02, B 01-03, C 01-05 (rows 1, 6, 7, 15)
    assert dict(zip(raw["lead_h"], raw["n_pairs"])) == {24: 16 - 4, 48: 16 - 3}
    crps = scores.per_pair["crps_raw_ensemble_t2m"]
    assert crps.dims == ("lead_time", "init_time", "station")
    assert int(np.isfinite(crps).sum()) == 12 + 13
    assert np.isnan(crps.sel(station="B", init_time="2017-01-01", lead_time=np.timedelta64(24, "h")))


def test_fair_crps_against_scoringrules(data: dict) -> None:
    scores = evaluate(str(data["forecast"]), observations=str(data["observations"]), out_dir=None, fair=True)
    ref = pairs(data, "nearest")
    group = ref[ref["lead_h"] == 48]
    expected = sr.crps_ensemble(
        group["obs"].to_numpy(), np.stack(group["members"].to_list()), estimator="fair"
    )
    row = scores.table[
        (scores.table["lead_h"] == 48) & scores.table["forecast"].str.startswith("raw ensemble")
    ]
    assert row["estimator"].iloc[0] == "fair ensemble"
    assert row["crps"].iloc[0] == pytest.approx(expected.mean(), rel=1e-10)


# -- the lapse-rate correction -------------------------------------------------------------------------
def write_height(folder: Path, kind: str) -> Path:
    """The model's surface height on the forecast grid: a geopotential (m2 s-2) or an orography (m)."""
    h = 100.0 + 50.0 * np.arange(LAT.size)[:, None] + 10.0 * np.arange(LON.size)[None, :]  # metres
    values, name, units = (h * GRAVITY, "z", "m2 s-2") if kind == "geopotential" else (h, "orog", "m")
    ds = xr.Dataset(
        {name: (("time", "latitude", "longitude"), values[None], {"units": units})},
        coords={"time": INITS[:1], "latitude": LAT, "longitude": LON},
    )
    ds.to_netcdf(folder / f"{kind}.nc")
    return folder / f"{kind}.nc"


@pytest.mark.parametrize("kind", ["geopotential", "orography"])
@pytest.mark.parametrize("gamma", [0.0065, 0.0098])
def test_lapse_rate_correction_closed_form(data: dict, kind: str, gamma: float) -> None:
    height = write_height(data["dir"], kind)
    plain = build_station_frame(str(data["forecast"]), str(data["observations"])).at(LEADS[1])
    frame = build_station_frame(
        str(data["forecast"]), str(data["observations"]), model_height=str(height), lapse_rate=gamma
    )
    corrected = frame.at(LEADS[1])
    for s, (la, lo, el) in enumerate(STATIONS.values()):
        i, j = (
            int(np.argmin(np.abs(LAT - la))),
            int(np.argmin(np.abs(LON - lo))),
        )  # nearest, away from the pole
        z_model = 100.0 + 50.0 * i + 10.0 * j
        np.testing.assert_allclose(
            corrected.forecast["t2m"].isel(station=s).values,
            plain.forecast["t2m"].isel(station=s).values + gamma * (z_model - el),
            rtol=0,
            atol=1e-9,
        )


def test_model_height_needs_elevations_and_2m_temperature(data: dict, tmp_path: Path) -> None:
    height = write_height(data["dir"], "orography")
    no_elev = tmp_path / "no-elevation.csv"
    data["table"].drop(columns="elevation").to_csv(no_elev, index=False)
    with pytest.raises(EnsmlError, match=r"model_height needs the stations' elevations.*no elevation column"):
        evaluate(str(data["forecast"]), observations=str(no_elev), model_height=str(height), out_dir=None)
    one_missing = tmp_path / "one-missing.csv"
    data["table"].assign(elevation=lambda d: d["elevation"].where(d["station"] != "C")).to_csv(
        one_missing, index=False
    )
    with pytest.raises(EnsmlError, match=r"lacks it for 1 station.*'C'"):
        evaluate(str(data["forecast"]), observations=str(one_missing), model_height=str(height), out_dir=None)
    bad = data["dir"] / "bad-height.nc"
    xr.open_dataset(height).load().pipe(lambda d: d.assign(orog=d["orog"] * 100)).to_netcdf(bad)  # in cm
    with pytest.raises(EnsmlError, match="outside -500 … 9000 m: check its units"):
        evaluate(
            str(data["forecast"]), observations=str(data["observations"]), model_height=str(bad), out_dir=None
        )


# -- options ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("kwargs", "says"),
    [
        ({"analysis": "an.nc", "observations": "obs.csv"}, "not both"),
        (
            {"observations": "obs.csv", "spread_predictions": "p.nc"},
            "--spread_predictions does not apply to --observations",
        ),
        ({"observations": "obs.csv", "cases": ["c.yaml"]}, "--cases does not apply"),
        ({"analysis": "an.nc", "model_height": "h.nc"}, "--model_height applies with --observations only"),
        ({"analysis": "an.nc", "extraction": "bilinear"}, "--extraction applies with --observations only"),
        ({"observations": "obs.csv", "lapse_rate": float("nan")}, "is not a lapse rate"),
    ],
)
def test_options_that_do_not_fit_fail_before_any_work(kwargs: dict, says: str, tmp_path: Path) -> None:
    with pytest.raises(EnsmlError, match=says):
        evaluate("fc.nc", out_dir=str(tmp_path / "out"), **kwargs)
    assert not (tmp_path / "out").exists()


def test_stations_outside_a_regional_grid_are_dropped_with_a_note(data: dict, tmp_path: Path, capsys) -> None:
    far = pd.concat([data["table"], data["table"].query("station == 'A'").assign(station="Z", lat=40.0)])
    far.to_csv(tmp_path / "far.csv", index=False)
    scores = evaluate(str(data["forecast"]), observations=str(tmp_path / "far.csv"), out_dir=None)
    assert scores.n_stations == 4 and "Z" not in set(scores.stations["station"])
    err = capsys.readouterr().err
    assert "1 of 5 stations" in err and "'Z' (40.00°N 1.20°E)" in err and "left out" in err


# -- end to end on the tiny dataset ---------------------------------------------------------------------
@pytest.mark.slow
def test_cli_on_the_tiny_dataset(tiny_data: dict[str, Path], tmp_path: Path, monkeypatch, capsys) -> None:
    """Stations sampled from the analysis at grid points (some not observed): exit 0, the four files,
    the table on the terminal, and pairs counted as the file's values at the forecast's valid times."""
    an = xr.open_dataset(tiny_data["analysis"])
    fc_inits = xr.open_dataset(tiny_data["forecast"])["init_time"].values
    points = [(2, 3), (5, 30), (9, 0), (13, 17)]  # (row, column) of the 16 × 32 grid
    rows = []
    for n, (i, j) in enumerate(points):
        for t in an["time"].values[:60]:
            value = float(an["t"].sel(level=850).isel(latitude=i, longitude=j).sel(time=t))
            lat, lon = float(an["latitude"][i]), float(an["longitude"][j])
            rows.append(
                {"station": f"S{n}", "lat": lat, "lon": lon, "level": 850, "time": str(t)[:19], "t": value}
            )
    df = pd.DataFrame(rows)
    df.loc[df.index % 5 == 0, "t"] = np.nan
    df.to_csv(tmp_path / "stations.csv", index=False)
    monkeypatch.chdir(tmp_path)
    args = ["evaluate", f"--forecast={tiny_data['forecast']}", "--observations=stations.csv", "--out_dir=out"]
    assert main(args) == 0
    out = capsys.readouterr()
    assert "CRPS at 4 stations" in out.out and "n_pairs" in out.out
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == [
        ".ensml",
        "scores.csv",
        "scores.md",
        "stations.csv",
        "stations.nc",
    ]
    table = pd.read_csv(tmp_path / "out" / "scores.csv")
    df["time"] = pd.to_datetime(df["time"])
    for lead_h in (24, 48):
        valid = set(fc_inits + np.timedelta64(lead_h, "h"))
        expected = int(df[df["time"].isin(valid)]["t"].notna().sum())
        got = table[(table["lead_h"] == lead_h) & table["forecast"].str.startswith("raw ensemble")]["n_pairs"]
        assert got.tolist() == [expected] and expected > 0
    per_pair = xr.open_dataset(tmp_path / "out" / "stations.nc")
    assert per_pair["crps_raw_ensemble_t"].dims == ("lead_time", "init_time", "level", "station")
    assert list(per_pair["station"].values) == ["S0", "S1", "S2", "S3"]
    assert main(args) == 0  # a rerun replaces evaluate's own files
