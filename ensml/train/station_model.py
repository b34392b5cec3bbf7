"""A station model as a file: fitted DRNs with every fact needed to apply them elsewhere.

``ensml fit`` with a station config (:mod:`ensml.train.station_fit`) writes
``station_model.pt``; ``ensml postprocess`` applies it to forecast files
(:mod:`ensml.postprocess.stations`). The file holds, beside one
:class:`~ensml.models.drn.DRN` per variable (its weights and shape), what the network's
features were made of, so that the same features are made again wherever it is applied:

* the run: the raw subset (``k``, the member positions, the ensemble size), the variables,
  their families, the pressure level of the variables on levels, the leads trained on;
* the features: their names (:func:`ensml.data.station_table.table_features`), the extraction
  (``nearest`` or ``bilinear``), the neighbourhood radius, the further forecast fields read
  (``predictors``), and the fields the features read
  from the grid: the model's surface height (for the lapse-rate correction of 2 m temperature
  and the stations' height difference) and the static fields (a land fraction …), kept whole
  on the training grid;
* the stations trained on: ids, latitudes, longitudes, elevations and their identity
  (:func:`ensml.data.stations.station_set_id`), and how a station without history gets its
  embedding (``nearest`` or ``zero``, :mod:`ensml.models.drn`).

It is a ``torch.save`` of plain containers, tensors and text, read back with
``weights_only=True`` (no code is unpickled).
"""

from __future__ import annotations

import io
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
import xarray as xr

from ensml.data.station_table import table_features
from ensml.data.stations import match_stations, station_set_id
from ensml.errors import EnsmlError
from ensml.models.drn import DRN, NewStationMethod
from ensml.names import ELEVATION, INIT_TIME, LATITUDE, LEAD_TIME, LONGITUDE, STATION
from ensml.predictions import RunMeta, file_sha256
from ensml.scores.distributions import family_for
from ensml.times import format_leads, iso_lead, parse_leads
from ensml.train.drn import drn_distribution

#: What the file says it is, and the layout's version.
FORMAT, VERSION = "ensml station model", 1
#: The task name in the run metadata of station products.
TASK = "StationDRN"


@dataclass
class StationModel:
    """Fitted DRNs (one per variable) and what they were fitted on (see the module docstring)."""

    variables: tuple[str, ...]
    families: tuple[str, ...]
    level: float | None  # the level of the variables on levels (hPa), None: surface only
    surface: tuple[str, ...]  # the variables without levels
    k: int
    members: tuple[int, ...]
    ensemble_size: int
    leads: np.ndarray  # timedelta64[ns], the leads trained on
    features: tuple[str, ...]
    extraction: str
    radius_km: float
    lapse_rate: float
    predictors: tuple[str, ...]  # further forecast fields read (ensml.data.station_frame.parse_predictors)
    stations: xr.Dataset  # station coords: ids, latitude, longitude, [elevation]
    nets: dict[str, DRN]
    untrained: NewStationMethod = "nearest"
    model_height: xr.DataArray | None = None
    static: dict[str, xr.DataArray] = field(default_factory=dict)
    fit: dict[str, Any] = field(default_factory=dict)  # how it was fitted (periods, seed, epochs …)
    sha256: str = ""  # of the file it was read from ("" before it is saved)
    path: str = ""

    @property
    def station_set(self) -> str:
        return station_set_id(self.stations)

    @property
    def levels(self) -> tuple[float, ...]:
        return () if self.level is None else (float(self.level),)

    def run_meta(self, leads: Sequence[np.timedelta64] | None = None) -> RunMeta:
        """The run metadata its products carry (at ``leads``, default the trained ones)."""
        return RunMeta(
            task=TASK,
            k=self.k,
            members=self.members,
            ensemble_size=self.ensemble_size,
            variables=self.variables,
            levels=self.levels,
            leads=tuple(self.leads if leads is None else leads),
            checkpoints=(self.sha256,) if self.sha256 else (),
            surface=self.surface,
            families=self.families,
            station_set=self.station_set,
        )

    def grid_field(self) -> xr.DataArray | None:
        """A field on the training grid (the model height, or a static field), if it keeps one."""
        if self.model_height is not None:
            return self.model_height
        return next(iter(self.static.values()), None)

    def describe(self) -> str:
        """One line: what it predicts, from what, for how many stations."""
        fams = ", ".join(f"{v} ({f})" for v, f in zip(self.variables, self.families))
        return (
            f"station DRN of {fams} at {self.stations.sizes[STATION]} stations, leads "
            f"{format_leads(self.leads)}, from members 0-{self.k - 1}"
        )

    # -- applying ------------------------------------------------------------------------------
    def placed(self, stations: xr.Dataset, what: str) -> tuple[np.ndarray, np.ndarray]:
        """Where each of ``stations`` is in the model: its index (new stations after the trained
        ones) and whether it is new (no history; it gets an embedding by :attr:`untrained`).

        Raises
        ------
        EnsmlError
            A station id the model knows at another place (a list for other stations than
            its ids say), naming the id and both places.
        """
        index, conflict = match_stations(self.stations, stations)
        if conflict is not None:
            j, i = conflict
            lat, lon = stations[LATITUDE].values[j], stations[LONGITUDE].values[j]
            klat, klon = self.stations[LATITUDE].values[i], self.stations[LONGITUDE].values[i]
            raise EnsmlError(
                f"{what}: station {str(stations[STATION].values[j])!r} is at {lat:.4f}°N {lon:.4f}°E, the "
                f"station model {self.path or ''} knows it at {klat:.4f}°N {klon:.4f}°E; a station id names "
                "one place (give the model's station list, or new ids for new places)"
            )
        new = index < 0
        index[new] = self.stations.sizes[STATION] + np.arange(int(new.sum()))  # after the trained ones
        return index, new

    def distribution(self, table: xr.Dataset, what: str = "stations") -> dict[str, dict[str, xr.DataArray]]:
        """Each variable's family parameters ``{var: {param: (lead_time, init_time, station)}}``
        on a station table of the model's features (:func:`ensml.data.station_table.station_table`
        with the model's subset, radius, model height and static fields).

        Stations the model was not trained on get embeddings by :attr:`untrained`.

        Raises
        ------
        EnsmlError
            A lead the model was not trained at, features that differ from the model's, or a
            station id the model knows at another place (:meth:`placed`).
        """
        leads = table[LEAD_TIME].values
        missing = np.setdiff1d(leads, self.leads)
        if missing.size:
            raise EnsmlError(
                f"the station model {self.path} was trained at leads {format_leads(self.leads)}, "
                f"not at {format_leads(missing)}"
            )
        index, new = self.placed(table, what)
        coords = {LEAD_TIME: table[LEAD_TIME], INIT_TIME: table[INIT_TIME], STATION: table[STATION]}
        out: dict[str, dict[str, xr.DataArray]] = {}
        for var, family in zip(self.variables, self.families):
            names, x = table_features(table, var, self.level if var not in self.surface else None)
            missing = [f for f in self.features if f not in names]
            if missing:
                raise EnsmlError(
                    f"the station model {self.path} reads the features {', '.join(self.features)}; "
                    f"the table lacks {', '.join(missing)}"
                )
            x = x[..., [names.index(f) for f in self.features]]  # the model's, in its order
            net = self.nets[var]
            if new.any():
                net = net.with_new_stations(
                    table[LATITUDE].values[new], table[LONGITUDE].values[new], self.untrained
                )
            shape = x.shape[:3]
            s = np.broadcast_to(index, shape).reshape(-1)
            params = drn_distribution(net, family_for(var, family), x.reshape(-1, x.shape[-1]), s)
            dims = (LEAD_TIME, INIT_TIME, STATION)
            out[var] = {
                k: xr.DataArray(v.detach().cpu().numpy().reshape(shape), dims=dims, coords=coords)
                for k, v in params.items()
            }
        return out

    # -- the file ------------------------------------------------------------------------------
    def to_bytes(self) -> bytes:
        """The model as the bytes of ``station_model.pt``."""
        state = {
            "format": FORMAT,
            "version": VERSION,
            "variables": list(self.variables),
            "families": list(self.families),
            "level": self.level,
            "surface": list(self.surface),
            "k": int(self.k),
            "members": [int(m) for m in self.members],
            "ensemble_size": int(self.ensemble_size),
            "leads": [iso_lead(lead) for lead in self.leads],
            "features": list(self.features),
            "extraction": self.extraction,
            "radius_km": float(self.radius_km),
            "predictors": list(self.predictors),
            "lapse_rate": float(self.lapse_rate),
            "untrained": self.untrained,
            "stations": _stations_state(self.stations),
            "station_set": self.station_set,
            "model_height": None if self.model_height is None else _field_state(self.model_height),
            "static": {k: _field_state(v) for k, v in self.static.items()},
            "nets": {var: _net_state(net) for var, net in self.nets.items()},
            "fit": dict(self.fit),
        }
        buffer = io.BytesIO()
        torch.save(state, buffer)
        return buffer.getvalue()


def read_station_model(path: str | Path) -> StationModel:
    """The station model of ``path`` (``ensml fit`` with a station config wrote it), checked.

    Raises
    ------
    EnsmlError
        One line: the file does not exist, cannot be read, is not a station model of this
        ensml, or its station list does not match the identity it recorded.
    """
    p = Path(path)
    what = f"station model {p}"
    if not p.is_file():
        raise EnsmlError(f"{what} does not exist" if not p.exists() else f"{what} is not a file")
    try:
        state = torch.load(p, map_location="cpu", weights_only=True)
    except Exception as exc:  # torch raises what its unpickler or zip reader raises
        reason = " ".join(str(exc).split())[:120]
        raise EnsmlError(f"{what} cannot be read, truncated or not a station model ({reason})") from None
    if not isinstance(state, dict) or state.get("format") != FORMAT:
        raise EnsmlError(f"{what} is not an ensml station model (ensml fit with a station config writes one)")
    if state.get("version") != VERSION:
        raise EnsmlError(f"{what} is of layout version {state.get('version')}, this ensml reads {VERSION}")
    try:
        model = StationModel(
            variables=tuple(state["variables"]),
            families=tuple(state["families"]),
            level=None if state["level"] is None else float(state["level"]),
            surface=tuple(state["surface"]),
            k=int(state["k"]),
            members=tuple(int(m) for m in state["members"]),
            ensemble_size=int(state["ensemble_size"]),
            leads=parse_leads(state["leads"]),
            features=tuple(state["features"]),
            extraction=str(state["extraction"]),
            radius_km=float(state["radius_km"]),
            predictors=tuple(str(p) for p in state["predictors"]),
            lapse_rate=float(state["lapse_rate"]),
            untrained=state["untrained"],
            stations=_stations_from(state["stations"], p),
            model_height=None if state["model_height"] is None else _field_from(state["model_height"]),
            static={k: _field_from(v) for k, v in state["static"].items()},
            nets={var: _net_from(v) for var, v in state["nets"].items()},
            fit=dict(state["fit"]),
            sha256=file_sha256(p),
            path=str(p),
        )
    except (KeyError, TypeError, ValueError, RuntimeError) as exc:
        raise EnsmlError(f"{what} is damaged ({type(exc).__name__}: {exc})") from None
    if model.station_set != state.get("station_set"):
        raise EnsmlError(f"{what} is damaged: its station list does not match the identity it recorded")
    return model


def _stations_state(stations: xr.Dataset) -> dict[str, Any]:
    out: dict[str, Any] = {"ids": [str(s) for s in stations[STATION].values]}
    for coord in (LATITUDE, LONGITUDE, ELEVATION):
        if coord in stations.coords:
            out[coord] = torch.from_numpy(np.asarray(stations[coord].values, np.float64).copy())
    return out


def _stations_from(state: Mapping[str, Any], path: Path) -> xr.Dataset:
    coords: dict[str, Any] = {STATION: np.array(state["ids"], dtype=str)}
    for coord in (LATITUDE, LONGITUDE, ELEVATION):
        if coord in state:
            coords[coord] = (STATION, state[coord].numpy())
    return xr.Dataset(coords=coords, attrs={"source": f"of the station model {path}"})


def _field_state(da: xr.DataArray) -> dict[str, Any]:
    """A field on the grid (its values, dims and coordinates) as tensors and text."""
    coords = {
        str(name): {"dims": list(c.dims), "values": torch.from_numpy(np.asarray(c.values, np.float64).copy())}
        for name, c in da.coords.items()
        if np.issubdtype(c.dtype, np.number)
    }
    values = torch.from_numpy(np.asarray(da.values, np.float64).copy())
    return {
        "dims": list(da.dims),
        "values": values,
        "coords": coords,
        "attrs": {k: str(v) for k, v in da.attrs.items()},
    }


def _field_from(state: Mapping[str, Any]) -> xr.DataArray:
    coords = {name: (c["dims"], c["values"].numpy()) for name, c in state["coords"].items()}
    return xr.DataArray(
        state["values"].numpy(), dims=state["dims"], coords=coords, attrs=dict(state["attrs"])
    )


def _net_state(net: DRN) -> dict[str, Any]:
    shape = {
        "n_features": int(net.n_features),
        "n_stations": int(net.n_stations),
        "embedding_dim": int(net.embedding_dim),
        "hidden": [int(w) for w in net.hidden],
        "n_raw": int(net.n_raw),
    }
    return {"shape": shape, "weights": {k: v.detach().cpu().clone() for k, v in net.state_dict().items()}}


def _net_from(state: Mapping[str, Any]) -> DRN:
    shape = dict(state["shape"])
    net = DRN(
        int(shape["n_features"]),
        int(shape["n_stations"]),
        embedding_dim=int(shape["embedding_dim"]),
        hidden=[int(w) for w in shape["hidden"]],
        n_raw=int(shape["n_raw"]),
    )
    net.load_state_dict(state["weights"])
    return net.eval().requires_grad_(False)


__all__ = ["FORMAT", "TASK", "StationModel", "read_station_model"]
