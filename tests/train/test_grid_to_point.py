"""The grid-to-point U-Net: the gridded distribution taken at the stations (nearest grid point,
2 m temperature moved to the station's height by hand), its loss scoringrules' CRPS against the
stations' observations, and a short fit that lowers it."""

from __future__ import annotations

import lightning as L
import numpy as np
import pytest
import scoringrules as sr
import torch
import xarray as xr

from ensml.data.datamodule import EnsembleDataModule
from ensml.data.station_frame import build_station_frame
from ensml.data.synth.generate import synth
from ensml.train.grid_to_point import GridToPointTask, station_targets

pytestmark = pytest.mark.slow  # synthetic data and a network (about 15 s)

LAPSE = 0.0065  # K/m, the standard lapse rate


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> dict:
    root = tmp_path_factory.mktemp("grid_to_point")
    paths = synth(
        root / "data",
        n_lat=8,
        n_lon=16,
        start="2019-01-01",
        end="2019-04-30",
        members=4,
        surface=True,
        precip_wind=True,
        stations=12,
    )
    frame = build_station_frame(
        str(paths["forecast"]),
        str(paths["stations"]),
        variables=["t2m", "si10"],
        leads=[24, 48],
        k=2,
        model_height=str(paths["orography"]),
    )
    data = EnsembleDataModule(
        str(paths["forecast"]),
        str(paths["analysis"]),
        variables=["z", "t2m", "si10"],
        levels=[850],
        input_leads=[0, 24, 48],
        target_leads=[24, 48],
        k=2,
        batch_size=4,
        train_period=("2019-01-01", "2019-03-15"),
        val_period=("2019-03-18", "2019-04-10"),
        test_period=("2019-04-13", "2019-04-30"),
    )
    data.setup("fit")
    torch.set_num_threads(1)
    L.seed_everything(0, verbose=False)
    task = GridToPointTask.from_data(data, width=4, depth=2, use_analysis=False, location_inputs=True)
    task.attach(station_targets(frame, data))
    return {"paths": paths, "frame": frame, "data": data, "task": task}


def test_the_grid_is_taken_at_the_stations_and_scored_there(built: dict) -> None:
    paths, frame, data, task = built["paths"], built["frame"], built["data"], built["task"]
    batch = next(iter(data.val_dataloader()))
    with torch.no_grad():
        at, grid = task.at_stations(batch), task.distributions(batch)
    obs = xr.load_dataset(paths["stations"])
    height = xr.load_dataset(paths["orography"])["orog"]
    lat_i, lon_i = (np.asarray(i)[:, 0] for i in frame.points.index)  # nearest: one point each
    stations = frame.observations["station"].values
    elevation = obs["elevation"].sel(station=stations).values
    offset = -LAPSE * (elevation - height.values[lat_i, lon_i])
    mean = grid["t2m"]["mean"][:, :, 0].numpy()[..., lat_i, lon_i] + offset
    np.testing.assert_allclose(at["t2m"]["mean"].numpy(), mean, rtol=1e-5, atol=1e-4)
    np.testing.assert_allclose(
        at["si10"]["loc"].numpy(), grid["si10"]["loc"][:, :, 0].numpy()[..., lat_i, lon_i]
    )
    # the loss: scoringrules' CRPS on the observed station-times, each variable in its spread's units
    inits = data.init_times("val")[batch["index"].numpy()]
    parts = []
    for var in ("t2m", "si10"):
        y = np.stack(
            [
                obs[var]
                .sel(station=stations)
                .reindex(time=inits + np.timedelta64(h, "h"))
                .transpose("time", "station")
                .values
                for h in (24, 48)
            ],
            axis=1,
        )  # (B, T, S)
        ok = np.isfinite(y)
        p = {k: v.numpy() for k, v in at[var].items()}
        if var == "t2m":
            crps = sr.crps_normal(y[ok], p["mean"][ok], p["std"][ok])
        else:
            crps = sr.crps_tnormal(y[ok], p["loc"][ok], p["scale"][ok], lower=0.0)
        parts.append(crps.mean() / task.targets.scale[var])
    with torch.no_grad():
        loss = float(task.station_crps(batch, "val"))
    assert loss == pytest.approx(np.mean(parts), rel=1e-4)


def test_a_short_fit_lowers_the_crps_at_the_stations(built: dict) -> None:
    data, task = built["data"], built["task"]

    def validation() -> float:
        with torch.no_grad():
            return float(np.mean([float(task.station_crps(b, "val")) for b in data.val_dataloader()]))

    before = validation()
    trainer = L.Trainer(
        accelerator="cpu",
        max_epochs=15,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        num_sanity_val_steps=0,
    )
    trainer.fit(task, datamodule=data)
    task.eval()
    assert validation() < 0.95 * before
