"""The grid-to-point U-Net's row of the station benchmark (:mod:`ensml.experiments.benchmark_stations`).

:func:`fit_grid_to_point` trains :class:`ensml.train.grid_to_point.GridToPointTask` on the
benchmark's data (its training init times, the last ``val_share`` of them validating for early
stopping, the best validation epoch's weights kept) and returns its parameters at the stations
on the test init times, as the station rows of the benchmark hold them.
"""

from __future__ import annotations

import logging
from pathlib import Path

import lightning as L
import numpy as np
import torch
import xarray as xr

from ensml.data.datamodule import EnsembleDataModule
from ensml.data.station_frame import StationFrame
from ensml.errors import EnsmlError
from ensml.experiments.options import GridToPointSpec
from ensml.experiments.quality import fit_best
from ensml.names import INIT_TIME, LEAD_TIME, STATION
from ensml.train.grid_to_point import GridToPointTask, predict_at_stations, station_targets
from ensml.train.lightning_cli import quiet_lightning


def _periods(train: np.ndarray, test: np.ndarray, share: float) -> dict[str, tuple[str, str]]:
    """The data module's periods: the training inits split into train and validation (the last
    ``share``), and the test inits, as ``[start, end]`` dates."""
    n_val = round(share * train.size)
    if not 0 < n_val < train.size - 1:
        raise EnsmlError(
            f"grid_to_point.val_share {share:g} leaves {n_val} of {train.size} training init times "
            "to validate on; choose a share that leaves some for each"
        )

    def day(t: np.datetime64) -> str:
        return str(t)[:10]

    return {
        "train_period": (day(train[0]), day(train[-n_val - 1])),
        "val_period": (day(train[-n_val]), day(train[-1])),
        "test_period": (day(test[0]), day(test[-1])),
    }


def fit_grid_to_point(
    spec: GridToPointSpec,
    paths: dict[str, Path],
    frame: StationFrame,
    chosen: dict[str, np.ndarray],
    k: int,
    seed: int,
    test: xr.Dataset,
) -> tuple[dict[str, dict[str, xr.DataArray]], float]:
    """Train the grid-to-point U-Net; its parameters ``{var: {param: (lead_time, init_time,
    station)}}`` on ``test``'s init times and stations (NaN where it gave none), and the
    training's wall time in seconds.

    ``frame``: the station frame whose points (``spec.extraction``) and observations it trains
    on; ``chosen``: the benchmark's ``train`` and ``test`` init times.
    """
    data = EnsembleDataModule(
        str(paths["forecast"]),
        str(paths["analysis"]),
        variables=[*spec.inputs, *frame.variables],
        levels=list(spec.levels),
        input_leads=list(spec.input_leads),
        target_leads=list(frame.leads),
        k=k,
        batch_size=spec.batch_size,
        seed=seed,
        **_periods(chosen["train"], chosen["test"], spec.val_share),
    )
    data.setup("fit")
    L.seed_everything(seed, verbose=False)
    task = GridToPointTask.from_data(
        data,
        arch="unet3d",
        width=spec.width,
        depth=spec.depth,
        lr=spec.lr,
        use_analysis=False,
        location_inputs=True,
        local_affine=True,
    )
    task.check_data(data)
    task.attach(station_targets(frame, data))
    quiet_lightning()  # Lightning's tips and info lines at ensml's verbosity, as the grid benchmark's
    logging.getLogger("lightning.pytorch").setLevel(logging.WARNING)
    took = fit_best(task, data, spec.max_epochs, spec.patience, seed)
    inits = data.init_times("test")
    with torch.random.fork_rng(devices=[]):
        params = predict_at_stations(task, data.test_dataloader(), inits.size)
    leads = np.asarray(data.spec.target_leads, dtype="timedelta64[ns]")
    coords = {LEAD_TIME: leads, INIT_TIME: inits, STATION: frame.observations[STATION].values}
    wanted = {
        LEAD_TIME: test[LEAD_TIME].values,
        INIT_TIME: test[INIT_TIME].values,
        STATION: test[STATION].values,
    }
    out = {}
    for var, by_param in params.items():
        out[var] = {
            p: xr.DataArray(
                np.moveaxis(x, 0, 1), dims=(LEAD_TIME, INIT_TIME, STATION), coords=coords
            ).reindex(wanted)
            for p, x in by_param.items()
        }
    return out, took


__all__ = ["fit_grid_to_point"]
