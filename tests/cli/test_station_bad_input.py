"""Bad inputs of the station verbs (``ensml fit`` with a station config, ``ensml postprocess`` of
a station model): one ``ensml:`` line, exit status 1, and a sandbox of user files, the inputs
and the fitted model byte-identical afterwards (the table of ``test_cli_table.py``, for the
inputs that only stations have).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
import xarray as xr
import yaml

from ensml import names
from ensml.cli.main import main
from ensml.data.stations import read_stations
from ensml.data.synth.generate import synth
from ensml.train.station_model import read_station_model
from tests.cli.bad_rows import Row, run_row
from tests.train.test_station_fit import station_config

SYNTH = {"n_lat": 8, "n_lon": 16, "start": "2019-01-01", "end": "2019-03-31", "members": 4, "surface": True}
pytestmark = pytest.mark.slow  # the fixture fits a station model (about 10 s)

PP = "postprocess --checkpoints [{model}] --forecasts {fc} --out_dir out"
FIT = "fit --config {dir}/"
EV = "evaluate --forecast {fc} --observations {obs} --out_dir out --predictions "

ROWS: list[Row] = [
    (
        "postprocess: a station id at another place",
        PP + " --stations {dir}/moved.csv",
        1,
        ("SYN", "knows it at", "a station id names one place"),
    ),
    (
        "postprocess: one id at two places in the list",
        PP + " --stations {dir}/twice.csv",
        1,
        ("twice.csv", "PLACE", "a station has one position"),
    ),
    (
        "postprocess: no elevation for the height correction",
        PP + " --stations {dir}/no_elevation.csv",
        1,
        ("no_elevation.csv", "elevation"),
    ),
    (
        "postprocess: no station inside the grid",
        PP.replace("{model}", "{dir}/regional.pt") + " --stations {dir}/far.csv",
        1,
        ("none of its", "far.csv"),
    ),
    (
        "postprocess: stations with a grid checkpoint",
        PP.replace("{model}", "{dir}/no.ckpt") + " --stations {dir}/far.csv",
        1,
        ("station model",),
    ),
    ("postprocess: station products as zarr", PP + " --format zarr", 1, ("zarr",)),
    (
        "postprocess: grid products as csv",
        PP.replace("{model}", "{dir}/no.ckpt") + " --format csv",
        1,
        ("csv",),
    ),
    (
        "postprocess: a damaged station model",
        PP.replace("{model}", "{dir}/damaged.pt"),
        1,
        ("damaged.pt", "station model"),
    ),
    (
        "postprocess: a station model and a checkpoint",
        PP.replace("{model}", "{model},{dir}/no.ckpt"),
        1,
        ("alone",),
    ),
    (
        "evaluate: station products whose stations were changed",
        EV + "{dir}/edited.nc",
        1,
        ("edited.nc", "not the station list they record"),
    ),
    (
        "evaluate: station products of another station list",
        EV.replace("{obs}", "{dir}/moved_obs.nc") + "{products}",
        1,
        ("another station list", "moved_obs.nc"),
    ),
    ("evaluate: grid predictions at stations", EV + "{dir}/mixed.nc", 1, ("mixed.nc", "station products")),
    (
        "evaluate: the grid's oracle as the station oracle",
        EV + "{products} --oracle {grid_oracle}",
        1,
        ("is no station oracle", "stations_oracle.nc"),
    ),
    (
        "evaluate: station products against a gridded analysis",
        "evaluate --forecast {fc} --analysis {an} --out_dir out --predictions {products}",
        1,
        ("station products", "--observations"),
    ),
    ("fit stations: a predictor the forecast lacks", FIT + "z300.yaml", 1, ("predictor 'z300' is no field",)),
    (
        "fit stations: no init in the train period",
        FIT + "empty_period.yaml",
        1,
        ("train_period", "no init time"),
    ),
    ("fit stations: observations the forecasts miss", FIT + "late.yaml", 1, ("holds no time among them",)),
    ("fit stations: an unknown family", FIT + "gauss.yaml", 1, ("distribution", "gauss")),
    ("fit stations: out_dir holds a user's files", FIT + "into_sibling.yaml", 1, ("sibling",)),
    ("fit stations: no elevation for the height correction", FIT + "no_elevation.yaml", 1, ("elevation",)),
    (
        "report: observations and an analysis",
        "report --forecast {fc} --observations {obs} --analysis {fc} --out_dir out",
        1,
        ("report:", "not both"),
    ),
    (
        "report: cases at stations",
        "report --forecast {fc} --observations {obs} --n_storm_cases 2 --out_dir out",
        1,
        ("report: --n_storm_cases does not apply to --observations",),
    ),
    (
        "report: neither analysis nor observations",
        "report --forecast {fc} --out_dir out",
        1,
        ("report: give --analysis", "--observations"),
    ),
    (
        "report: a model height on the grid",
        "report --forecast {fc} --analysis {fc} --model_height {fc} --out_dir out",
        1,
        ("report: --model_height applies with --observations only",),
    ),
]


@pytest.fixture(scope="module")
def inputs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """The synthetic data, a fitted station model and the bad files of the rows."""
    work = tmp_path_factory.mktemp("station-bad")
    paths = synth(work / "data", **SYNTH, stations=12)
    folder = work / "inputs"
    folder.mkdir()
    run = work / "runs" / "stations"
    good = station_config(paths, run, train_period=["2019-01-01", "2019-02-28"], test_period=None, epochs=2)
    (folder / "good.yaml").write_text(yaml.safe_dump(good))
    torch.set_num_threads(1)
    assert main(["fit", "--config", str(folder / "good.yaml")]) == 0
    st = read_stations(paths["stations"])
    first = st.isel({names.STATION: 0})
    sid, lat, lon = first.station.item(), first.latitude.item(), first.longitude.item()
    (folder / "moved.csv").write_text(f"station,lat,lon,elevation\n{sid},{lat + 5:.4f},{lon:.4f},10\n")
    (folder / "twice.csv").write_text("station,lat,lon,elevation\nPLACE,10,10,5\nPLACE,11,10,5\n")
    (folder / "no_elevation.csv").write_text("station,lat,lon\nNEW,10,10\n")
    (folder / "far.csv").write_text("station,lat,lon,elevation\nSOUTH,-60,0,5\n")
    (folder / "damaged.pt").write_bytes(b"PK\x03\x04 not really a model")
    model = read_station_model(run / "station_model.pt")  # as if trained on the northern half
    model.model_height = model.model_height.where(model.model_height[names.LATITUDE] > 0, drop=True)
    (folder / "regional.pt").write_bytes(model.to_bytes())
    configs = {
        "empty_period": {"train_period": ["2018-01-01", "2018-06-30"]},
        "gauss": {"distribution": {"t2m": "gauss"}},
        "z300": {"predictors": ["z300"]},
        "into_sibling": {"out_dir": "sibling"},
    }
    obs = xr.load_dataset(paths["stations"])
    late = obs.assign_coords({names.TIME: obs[names.TIME].values + np.timedelta64(3650, "D")})
    late.to_netcdf(folder / "late.nc")
    configs["late"] = {"observations": str(folder / "late.nc")}
    table = "station,lat,lon,time,t2m\n" + "".join(
        f"{s},{a:.4f},{o:.4f},2019-01-03T00:00,280\n"
        for s, a, o in zip(st.station.values, st.latitude.values, st.longitude.values)
    )
    (folder / "obs_no_elevation.csv").write_text(table)
    configs["no_elevation"] = {"observations": str(folder / "obs_no_elevation.csv")}
    products = work / "products"
    args = [
        "postprocess",
        "--checkpoints",
        f"[{run / 'station_model.pt'}]",
        "--forecasts",
        str(paths["forecast"]),
    ]
    assert main([*args, "--out_dir", str(products), "--cluster", "none"]) == 0
    made = xr.load_dataset(products / "forecast.nc")
    made.assign_coords({names.LATITUDE: made[names.LATITUDE] + 1.0}).to_netcdf(folder / "edited.nc")
    made.assign_attrs(ensml_task="MixedTask").to_netcdf(folder / "mixed.nc")
    moved = obs.assign_coords(
        {names.LATITUDE: obs[names.LATITUDE] + np.where(np.arange(obs.sizes[names.STATION]) == 0, 2.0, 0.0)}
    )
    moved.to_netcdf(folder / "moved_obs.nc")
    for name, change in configs.items():
        (folder / f"{name}.yaml").write_text(yaml.safe_dump({**good, "out_dir": str(work / name), **change}))
    return {
        "fc": str(paths["forecast"]),
        "an": str(paths["analysis"]),
        "grid_oracle": str(paths["oracle"]),
        "obs": str(paths["stations"]),
        "products": str(products / "forecast.nc"),
        "dir": str(folder),
        "model": str(run / "station_model.pt"),
        "work": str(work),
    }


@pytest.mark.timeout(120)
@pytest.mark.parametrize("row", ROWS, ids=[row[0] for row in ROWS])
def test_bad_station_input_is_one_line_and_harmless(
    row: Row,
    inputs: dict[str, str],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture,
) -> None:
    args = [word.format(**inputs) for word in row[1].split()]
    run_row(row, inputs, tmp_path, monkeypatch, capsys, roots=(tmp_path, Path(inputs["work"])), args=args)
