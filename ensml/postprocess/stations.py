"""Post-processing at stations: a station model (``ensml fit`` with a station config) applied to
forecast files, one products file per input, through the same run as grid checkpoints.

:class:`StationModels` stands where :class:`~ensml.postprocess.models.ModelSet` stands for grid
checkpoints: the client reads the model and the station list once and checks them before any
side effect; each worker reads the model once per process (:func:`load_station_model`) and
makes a unit's products with :class:`StationForecast`: the station table of the forecast at
the stations (the model's features, :func:`ensml.data.station_table.station_table`), the
model's distribution there, and the products of
:func:`ensml.postprocess.products.station_product_dataset` (CF discrete sampling geometry,
``featureType: timeSeries``) or their CSV (:func:`products_csv`).

The station list is the model's own (the stations it was trained on) or ``--stations FILE``:
any file :func:`ensml.data.stations.read_stations` reads. A station the model was not trained
on gets an embedding by the model's rule (the nearest trained station's, or zero); a station
id the model knows at another place is refused. Stations outside the forecast's grid are left
out with a note naming them. Every products file records the identity of the stations it
holds (``ensml_station_set``) and the model's SHA-256 (``ensml_checkpoint_sha256``).
"""

from __future__ import annotations

import functools
import io
import os
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import xarray as xr

from ensml.data.heights import check_heights
from ensml.data.station_frame import build_station_frame
from ensml.data.station_table import station_table
from ensml.data.stations import EMBEDDING, on_grid, read_stations, station_set_id
from ensml.data.subset import Subset
from ensml.errors import EnsmlError
from ensml.names import ELEVATION, INIT_TIME, LATITUDE, LEAD_TIME, LEVEL, LONGITUDE, MEMBER, STATION
from ensml.postprocess.options import Products, ThresholdSet
from ensml.postprocess.products import station_product_dataset
from ensml.predictions import RunMeta
from ensml.progress import note
from ensml.times import hours_of
from ensml.train.station_model import TASK, StationModel, read_station_model


@dataclass(frozen=True)
class StationModels:
    """A station model and the stations to forecast for, checked on the client."""

    path: str
    sha256: str
    stations_file: str | None  # None: the model's own stations
    stations: xr.Dataset
    meta: RunMeta

    @classmethod
    def from_path(cls, path: str | Path, stations: str | None = None) -> StationModels:
        """Read the model and the station list, and check that every id of the list that the
        model knows is where the model knows it (no side effect)."""
        model = read_station_model(path)
        listed = model.stations if stations is None else read_stations(stations)
        what = f"stations {stations}" if stations is not None else f"station model {path}"
        _, new = model.placed(listed, what)
        grid = model.grid_field()
        if grid is not None:  # those outside the model's grid are listed and left out
            listed, _ = on_grid(
                listed, grid.to_dataset(name="grid"), model.extraction, (what, "station model's grid")
            )
            new = model.placed(listed, what)[1]
        elevation = listed[ELEVATION].values if ELEVATION in listed.coords else None
        if model.model_height is not None:
            check_heights(model.variables, elevation, listed[STATION].values, what)
        elif {ELEVATION, "height_difference"} & set(model.features):
            missing = elevation is None or not np.isfinite(elevation).all()
            if missing:
                raise EnsmlError(f"{what}: the station model reads the stations' elevations; give every one")
        if new.any():
            how = "the nearest trained station's" if model.untrained == "nearest" else "a zero"
            note(
                f"postprocess: {int(new.sum())} of {new.size} stations of {stations} were not in the "
                f"station model's training; each gets {how} embedding"
            )
        return cls(str(path), model.sha256, stations, listed, model.run_meta())

    def with_absolute_paths(self) -> StationModels:
        """The same model named by an absolute path (for workers in another folder)."""
        return replace(self, path=os.path.abspath(self.path))

    # -- what the run asks of its models (as ModelSet) ---------------------------------------
    task = TASK
    uses_analysis = False

    @property
    def variables(self) -> list[str]:
        return list(self.meta.variables)

    @property
    def levels(self) -> list[float]:
        return list(self.meta.levels)

    @property
    def surface(self) -> list[str]:
        return list(self.meta.surface)

    @property
    def leads(self) -> np.ndarray:
        return np.asarray(self.meta.leads, dtype="timedelta64[ns]")

    @property
    def k(self) -> int:
        return self.meta.k

    def run_meta(self) -> RunMeta:
        """The run metadata of the products (each file's names the stations it holds)."""
        return self.meta

    @property
    def station_set(self) -> str:
        """The identity of the station list asked for."""
        return station_set_id(self.stations)

    @property
    def identity(self) -> list[str]:
        """What an output depends on: the model's SHA-256 and the station list's identity."""
        return [self.sha256, self.station_set]

    @property
    def digest(self) -> dict[str, str]:
        return {self.path: self.sha256}


def is_station_model(path: str | Path) -> bool:
    """Whether ``path`` names a station model: a ``.pt`` file, as the station fit writes
    (Lightning's checkpoints end in ``.ckpt``); :func:`read_station_model` checks what it holds."""
    return str(path).endswith(".pt")


@functools.lru_cache(maxsize=1)
def _load(path: str, sha256: str) -> StationModel:
    model = read_station_model(path)
    if model.sha256 != sha256:
        raise EnsmlError(f"station model {path} changed while post-processing ran")
    return model


def load_station_model(models: StationModels) -> StationModel:
    """The station model of ``models``, read once per process (and checked unchanged)."""
    return _load(models.path, models.sha256)


class StationForecast:
    """One forecast file at the stations: its station table with the model's features, and
    the model's distribution there; :meth:`products` gives one init's products."""

    def __init__(self, path: str, models: StationModels) -> None:
        model = load_station_model(models)
        self.what = f"forecast file {path}"
        frame = build_station_frame(
            path,
            models.stations,
            variables=list(model.variables),
            levels=None if model.level is None else [model.level],
            leads=list(model.leads),
            k=model.k,
            extraction=model.extraction,
            model_height=model.model_height,
            lapse_rate=model.lapse_rate,
            observed=False,
            predictors=model.predictors,
        )
        self.members = int(frame.forecast.sizes[MEMBER])
        table = station_table(
            frame, Subset(model.members), radius_km=model.radius_km or None, static=model.static or None
        )
        self.table = table
        self.inits = table[INIT_TIME].values.astype("datetime64[ns]")
        self.params = model.distribution(table, self.what)
        self.model = model
        keep = [c for c in (LATITUDE, LONGITUDE, ELEVATION) if c in table.coords]
        self.stations = xr.Dataset(coords={STATION: table[STATION].values, **{c: table[c] for c in keep}})
        self.meta = replace(models.meta, station_set=station_set_id(self.stations))
        new = model.placed(self.stations, self.what)[1]  # stated in the products: own, nearest or zero
        self.stations = self.stations.assign_coords(
            {EMBEDDING: (STATION, np.where(new, model.untrained, "own"))}
        )

    def products(
        self, init: np.datetime64, products: Products, thresholds: tuple[ThresholdSet, ...]
    ) -> xr.Dataset:
        """The products of init ``init`` at the stations (see :func:`station_product_dataset`)."""
        one = self.table.sel({INIT_TIME: init})
        params, raw = [], []
        for var in self.model.variables:
            p = {
                k: v.sel({INIT_TIME: init}).transpose(LEAD_TIME, STATION).values
                for k, v in self.params[var].items()
            }
            members = one[var]
            if LEVEL in members.dims:
                members = members.sel({LEVEL: self.model.level})
            params.append({k: v[:, None, :] for k, v in p.items()})  # (L, D=1, S)
            raw.append(members.transpose(LEAD_TIME, MEMBER, STATION).values[:, :, None, :])  # (L, M, 1, S)
        return station_product_dataset(
            init, self.meta, self.stations, params, np.stack(raw), products, thresholds
        )


def products_csv(datasets: list[xr.Dataset]) -> str:
    """Station products as CSV text: one row per station, init time and lead time, one column
    per product (``t2m_mean``, ``t2m_quantile_0.1``, ``t2m_member_3``, ``tp_exceedance_1`` …),
    with the station's id, latitude, longitude (and elevation), the origin of its embedding
    (``embedding``: own, nearest or zero), the init and valid times (ISO 8601, UTC) and the lead
    in hours.

    A product with a level (an upper-air variable) names it last: ``t_mean_850``.
    """
    frames = [_csv_frame(ds) for ds in datasets]
    buffer = io.StringIO()
    pd.concat(frames, ignore_index=True).to_csv(buffer, index=False, float_format="%.6g", lineterminator="\n")
    return buffer.getvalue()


def _csv_frame(ds: xr.Dataset) -> pd.DataFrame:
    st = ds[STATION].values
    inits, leads = ds[INIT_TIME].values, ds[LEAD_TIME].values
    index = pd.MultiIndex.from_product([range(inits.size), range(leads.size), range(st.size)])
    i, t, s = (index.get_level_values(n).to_numpy() for n in range(3))
    columns: dict[str, Any] = {STATION: st[s]}
    for coord in (LATITUDE, LONGITUDE, ELEVATION, EMBEDDING):
        if coord in ds.coords:
            columns[coord] = ds[coord].values[s]
    columns["init_time"] = pd.to_datetime(inits[i]).strftime("%Y-%m-%dT%H:%MZ")
    columns["lead_hours"] = hours_of(leads)[t]
    columns["valid_time"] = pd.to_datetime(inits[i] + leads[t]).strftime("%Y-%m-%dT%H:%MZ")
    for name, da in ds.data_vars.items():
        extra = [d for d in da.dims if d not in (INIT_TIME, LEAD_TIME, STATION)]
        values = da.transpose(INIT_TIME, LEAD_TIME, STATION, *extra).values.reshape(i.size, -1)
        labels = _labels(da, extra)
        for j, label in enumerate(labels):
            columns[f"{name}_{label}" if label else str(name)] = values[:, j]
    return pd.DataFrame(columns)


def _labels(da: xr.DataArray, extra: list[str]) -> list[str]:
    """Column suffixes of the extra dims' values (``0.1``, ``3``, ``850``), in C order."""
    if not extra:
        return [""]
    values = [
        [
            f"member_{v}" if d == MEMBER else f"{v:g}" if isinstance(v, float | np.floating) else str(v)
            for v in da[d].values
        ]
        for d in extra
    ]
    out = [""]
    for vals in values:
        out = [f"{a}_{b}" if a else b for a in out for b in vals]
    return out


__all__ = ["StationForecast", "StationModels", "is_station_model", "load_station_model", "products_csv"]
