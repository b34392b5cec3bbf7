"""EMOS at stations: the baselines of station post-processing (global and station-wise).

On a station table (:func:`ensml.data.station_table.station_table`), EMOS (Gneiting et al.
2005; :func:`ensml.train.emos.fit_emos`) predicts ``μ = a + b·m``, ``σ² = c + d·s²`` from the
raw subset's mean ``m`` and std ``s`` at the station, one fit per lead time:

* ``global``: one set of coefficients for all stations (what a new station gets too);
* ``station``: a set per station (station-wise, "local" EMOS), the usual benchmark of station
  post-processing (Rasp & Lerch 2018; EUPPBench).

Missing observations weigh nothing; a station never observed in training gets the global
coefficients in the station-wise fit (counted in :attr:`StationEMOS.global_stations`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

import numpy as np
import torch
import xarray as xr

from ensml.data.station_table import variable_table
from ensml.errors import EnsmlError
from ensml.models.emos import EMOS
from ensml.names import INIT_TIME, LEAD_TIME, STATION
from ensml.scores.distributions import get_family
from ensml.train.emos import emos_distribution, fit_emos

StationMode = Literal["global", "station"]


@dataclass
class StationEMOS:
    """EMOS fitted at stations for ``var`` (at ``level``), one fit per lead: ``global_models[lead]``
    for every station (global mode), and (station-wise) ``models[lead]`` for the stations observed
    at that lead in training (``observed[lead]``, a mask over :attr:`stations`); station-wise, a
    global fit is made only when some station was never observed, and gives it its coefficients."""

    var: str
    family: str
    mode: StationMode
    stations: np.ndarray  # the ids the station-wise coefficients belong to
    global_models: dict[np.timedelta64, EMOS] = field(default_factory=dict)
    models: dict[np.timedelta64, EMOS] = field(default_factory=dict)
    observed: dict[np.timedelta64, np.ndarray] = field(default_factory=dict)
    level: float | None = None

    @property
    def global_stations(self) -> list[str]:
        """Stations that get the global coefficients at some lead (station-wise: never observed)."""
        if self.mode == "global":
            return []
        alone = np.zeros(self.stations.size, dtype=bool)
        for mask in self.observed.values():
            alone |= ~mask
        return [str(x) for x in self.stations[alone]]

    def distribution(self, table: xr.Dataset) -> dict[str, xr.DataArray]:
        """The family's parameters ``{param: (lead_time, init_time, station)}`` on ``table``'s
        raw subset (its stations must be the fitted ones for ``station`` mode).

        Raises
        ------
        EnsmlError
            A lead that was not fitted, or (station-wise) a station list that differs.
        """
        mean, std, _ = _arrays(table, self.var, self.level)
        if self.mode == "station" and not np.array_equal(table[STATION].values, self.stations):
            raise EnsmlError(
                f"station-wise EMOS of {self.var} was fitted on {self.stations.size} other stations; "
                "apply it to the station list it was fitted on"
            )
        family = get_family(self.family)
        out: dict[str, list[np.ndarray]] = {p: [] for p in family.params}
        fitted = self.observed if self.mode == "station" else self.global_models
        for i, lead in enumerate(table[LEAD_TIME].values):
            if lead not in fitted:
                raise EnsmlError(f"EMOS of {self.var} was not fitted at lead {lead}")
            m, s = _tensor(mean[i]), _tensor(std[i])
            cols = self.observed.get(lead, np.zeros(mean.shape[2], dtype=bool))  # station-wise
            params = {k: np.empty(mean.shape[1:]) for k in family.params}
            if not cols.all():
                for k, v in emos_distribution(self.global_models[lead], family, m, s).items():
                    params[k][:] = v.detach().numpy()[:, 0, 0, 0, :]
            if cols.any():
                local = emos_distribution(self.models[lead], family, m[..., cols], s[..., cols])
                for k, v in local.items():
                    params[k][:, cols] = v.detach().numpy()[:, 0, 0, 0, :]
            for k, v in params.items():
                out[k].append(v)
        coords = {LEAD_TIME: table[LEAD_TIME], INIT_TIME: table[INIT_TIME], STATION: table[STATION]}
        dims = (LEAD_TIME, INIT_TIME, STATION)
        return {k: xr.DataArray(np.stack(v), dims=dims, coords=coords) for k, v in out.items()}


def _arrays(table: xr.Dataset, var: str, level: float | None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Mean, std and observation ``(lead, init, station)`` of ``var`` in the table."""
    one = variable_table(table, var, level)
    return one[f"{var}_mean"].values, one[f"{var}_std"].values, one[f"{var}_obs"].values


def _tensor(x: np.ndarray) -> torch.Tensor:
    """(init, station) as EMOS's (N, V=1, D=1, H=1, W=station), float64."""
    return torch.from_numpy(np.ascontiguousarray(x, dtype=np.float64))[:, None, None, None, :]


def fit_station_emos(
    table: xr.Dataset,
    var: str,
    mode: StationMode = "station",
    family: str = "normal",
    level: float | None = None,
    max_iter: int = 50,
) -> StationEMOS:
    """Fit EMOS of ``var`` at the stations of ``table``, one fit per lead (see the module).

    Raises
    ------
    EnsmlError
        An unknown mode or family, a variable the table lacks, or a lead without any observation.
    """
    if mode not in ("global", "station"):
        raise EnsmlError(f"station EMOS mode must be 'global' or 'station', got {mode!r}")
    get_family(family)
    mean, std, obs = _arrays(table, var, level)
    stations = table[STATION].values
    fitted = StationEMOS(var, family, mode, stations, level=level)
    for i, lead in enumerate(table[LEAD_TIME].values):
        seen = np.isfinite(obs[i]).any(axis=0)  # (station,): observed at least once
        if not seen.any():
            raise EnsmlError(f"no observation of {var} at lead {lead} to fit EMOS on")
        rows = np.isfinite(mean[i]).all(axis=1)  # the inits that verify at this lead
        m, s, y = (_tensor(a[i][rows]) for a in (mean, std, obs))
        if mode == "global" or not seen.all():  # station-wise: only for the stations never observed
            fitted.global_models[lead] = fit_emos(m, s, y, mode="global", family=family, max_iter=max_iter)
        if mode == "station":
            cols = torch.from_numpy(seen)
            fitted.observed[lead] = seen
            local = (m[..., cols], s[..., cols], y[..., cols])
            fitted.models[lead] = fit_emos(*local, mode="local", family=family, max_iter=max_iter)
    return fitted


__all__ = ["StationEMOS", "fit_station_emos"]
