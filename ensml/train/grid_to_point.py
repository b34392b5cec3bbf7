"""The grid-to-point U-Net: the gridded post-processing network trained on station observations.

:class:`GridToPointTask` is a :class:`~ensml.train.tasks.MixedTask` (the modified 3D U-Net and
its per-variable families) whose loss is not the CRPS against the gridded analysis but against
station observations: each station variable's predictive distribution on the grid is
interpolated to the stations (nearest grid point or bilinear, the weights of
:class:`ensml.data.points.Points`: each parameter is the weighted sum of the grid points'),
2 m temperature's location moved to the station's height (the lapse-rate offset of
:meth:`ensml.data.station_frame.StationFrame.at_station_height`), and scored with its family's
CRPS where the station observed, each variable's CRPS in units of its observations' standard
deviation. So the network learns what the stations see, everywhere at once, and gives a
distribution at any place on its grid.

:func:`station_targets` gathers what the task needs from a station frame and a data module: where
the stations are, their height offsets and, for each split, the observation of every station
variable at each init time and target lead, by the split's sample index.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
import xarray as xr

from ensml.data.station_frame import StationFrame
from ensml.errors import EnsmlError
from ensml.names import STATION, TIME
from ensml.train.tasks import MixedTask


@dataclass(frozen=True)
class StationTargets:
    """The stations of a grid-to-point fit: ``index`` (lat and lon positions, each (S, P)) and
    ``weights`` (S, P) of the P grid points that make each station's value, ``offset`` of each
    variable's location at the stations (S,) (zero but for height-corrected 2 m temperature),
    ``scale`` of each variable (its training observations' standard deviation), and ``obs`` of
    each split: (N, T, V, S), the observation of each station variable at each of the split's
    samples and target leads (NaN: not observed)."""

    variables: tuple[str, ...]
    index: tuple[torch.Tensor, torch.Tensor]
    weights: torch.Tensor
    offset: dict[str, torch.Tensor]
    scale: dict[str, float]
    obs: dict[str, torch.Tensor]


def station_targets(
    frame: StationFrame, data: Any, splits: tuple[str, ...] = ("train", "val", "test")
) -> StationTargets:
    """What :class:`GridToPointTask` trains on: the frame's stations and observations, by the
    sample index of each of ``splits`` of the data module ``data`` (its target leads).

    Raises
    ------
    EnsmlError
        A station variable the data module does not predict, or a grid that differs from the
        frame's.
    """
    spec = data.spec
    missing = [v for v in frame.variables if v not in spec.variables]
    if missing:
        raise EnsmlError(f"grid-to-point: the network does not predict {', '.join(missing)}")
    shape = tuple(frame.forecast.sizes[d] for d in frame.points.dims)
    if tuple(data.grid_shape) != shape:
        raise EnsmlError(
            f"grid-to-point: the network's grid {tuple(data.grid_shape)} is not the stations' {shape}"
        )
    obs = frame.observations
    offset = {}
    for var in frame.variables:
        zero = xr.zeros_like(obs[STATION], dtype=np.float64)
        offset[var] = torch.from_numpy(np.asarray(frame.at_station_height(var, zero).values, np.float32))
    per_split = {}
    for split in splits:
        inits = data.init_times(split)
        cube = np.full((inits.size, len(spec.target_leads), len(frame.variables), obs.sizes[STATION]), np.nan)
        for t, lead in enumerate(spec.target_leads):
            at = obs.reindex({TIME: inits + np.timedelta64(lead, "ns")})
            for v, var in enumerate(frame.variables):
                cube[:, t, v, :] = at[var].transpose(TIME, STATION).values
        per_split[split] = torch.from_numpy(cube.astype(np.float32))
    train = per_split.get("train", next(iter(per_split.values())))
    scale = {}
    for v, var in enumerate(frame.variables):
        seen = train[:, :, v][torch.isfinite(train[:, :, v])]
        scale[var] = float(seen.std()) if seen.numel() > 1 and float(seen.std()) > 0 else 1.0
    index = tuple(torch.from_numpy(np.asarray(i, dtype=np.int64)) for i in frame.points.index)
    weights = torch.from_numpy(np.asarray(frame.points.weights, dtype=np.float32))
    return StationTargets(tuple(frame.variables), index, weights, offset, scale, per_split)


class GridToPointTask(MixedTask):
    """A :class:`~ensml.train.tasks.MixedTask` trained on the CRPS at stations (see the module).

    Give it its :class:`StationTargets` with :meth:`attach` before training; its loss and
    validation quality are the mean CRPS at the stations (each variable in units of its
    observations' spread); there are no gridded scores (the analysis is not its target).
    """

    targets: StationTargets | None = None
    _split: str = "train"

    def attach(self, targets: StationTargets) -> None:
        """Train and score on ``targets``' stations."""
        unknown = [v for v in targets.variables if v not in self.hparams.variables]
        if unknown:
            raise EnsmlError(f"grid-to-point: the network does not predict {', '.join(unknown)}")
        self.targets = targets

    def at_stations(self, batch: dict[str, torch.Tensor]) -> dict[str, dict[str, torch.Tensor]]:
        """Each station variable's family parameters at the stations, ``{var: {param: (B, T, S)}}``."""
        if self.targets is None:
            raise EnsmlError("grid-to-point: attach the station targets before training or predicting")
        t = self.targets
        lat, lon = (i.to(batch["mean_k"].device) for i in t.index)
        weights = t.weights.to(batch["mean_k"].device)
        grids = self.distributions(batch)
        out = {}
        for var in t.variables:
            params = {p: (v[:, :, 0][..., lat, lon] * weights).sum(-1) for p, v in grids[var].items()}
            where = next((p for p in ("mean", "loc") if p in params), None)
            offset = t.offset[var].to(weights)
            if where is None and bool((offset != 0).any()):
                raise EnsmlError(f"grid-to-point: {var} is height-corrected, its family has no location")
            if where is not None:
                params[where] = params[where] + offset
            out[var] = params
        return out

    def station_crps(self, batch: dict[str, torch.Tensor], split: str) -> torch.Tensor:
        """The mean CRPS over the observed station-times of the batch, each variable in units of
        its observations' spread, averaged over the variables."""
        t = self.targets
        assert t is not None
        obs = t.obs[split][batch["index"].cpu()].to(batch["mean_k"].device)  # (B, T, V, S)
        total = []
        for v, (var, params) in enumerate(self.at_stations(batch).items()):
            y = obs[:, :, v]
            seen = torch.isfinite(y)
            if not bool(seen.any()):
                continue
            family = self.families[list(self.hparams.variables).index(var)]
            crps = family.crps({p: x[seen] for p, x in params.items()}, y[seen])
            total.append(crps.mean() / t.scale[var])
        if not total:
            return batch["mean_k"].new_zeros(()) * sum(p.sum() for p in self.parameters())
        return torch.stack(total).mean()

    def training_step(self, batch: dict[str, torch.Tensor], batch_idx: int) -> torch.Tensor:
        self._split = "train"
        return super().training_step(batch, batch_idx)

    def validation_step(self, batch: dict[str, torch.Tensor], batch_idx: int) -> None:
        self._split = "val"
        super().validation_step(batch, batch_idx)

    def loss(self, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        return self.station_crps(batch, self._split)

    def quality(self, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        return self.station_crps(batch, self._split)

    def scores(self, batch: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        return {}


def predict_at_stations(task: GridToPointTask, loader: Any, n: int) -> dict[str, dict[str, np.ndarray]]:
    """The task's parameters at the stations for the ``n`` samples of ``loader``, ``{var: {param:
    (n, T, S)}}`` by sample index (NaN where the loader gave none)."""
    out: dict[str, dict[str, np.ndarray]] = {}
    task.eval()
    with torch.no_grad():
        for batch in loader:
            index = batch["index"].numpy()
            for var, params in task.at_stations(batch).items():
                for p, x in params.items():
                    if p not in out.setdefault(var, {}):
                        out[var][p] = np.full((n, *x.shape[1:]), np.nan)
                    out[var][p][index] = x.numpy()
    return out


__all__ = ["GridToPointTask", "StationTargets", "predict_at_stations", "station_targets"]
