"""What ``evaluate --observations`` scores at the stations beside the raw ensemble: station
products of ``ensml postprocess`` (:class:`StationProducts`) and the synthetic data's station
oracle (:class:`StationOracle`), each read, checked against the observations' stations (one id,
one place: :func:`ensml.data.stations.match_stations`) and scored pair by pair at one lead.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np
import xarray as xr

from ensml.data.open import load_dataset
from ensml.data.runfiles import RunFiles, scan_run
from ensml.data.station_frame import StationFrame, StationLead
from ensml.data.stations import match_stations, station_set_id
from ensml.errors import EnsmlError
from ensml.names import INIT_TIME, LATITUDE, LEAD_TIME, LEVEL, LONGITUDE, MEMBER, STATION
from ensml.predictions import PREFIX
from ensml.progress import note
from ensml.scores.distributions import Family, family_for
from ensml.times import format_lead
from ensml.verify.families import oracle_families


@dataclass(frozen=True)
class StationProducts:
    """Station products of ``ensml postprocess`` (:data:`ensml.data.runfiles.ROLES`'s ``station
    predictions``), scanned and checked against the observations' stations."""

    run: RunFiles
    variables: list[str]  # scored: the products' variables among the frame's

    def family(self, var: str) -> str:
        return self.run.meta.family_of(var)

    def name(self, var: str) -> str:
        """The forecast's name in the tables: ``station DRN (normal)``."""
        return f"station DRN ({self.family(var)})"

    def score(self, var: str, sl: StationLead, y: xr.DataArray) -> tuple[str, xr.DataArray, xr.DataArray]:
        """The name, the per-pair CRPS and the predictive mean of ``var`` at ``sl``'s lead."""
        inits = y[INIT_TIME].values
        levels = {LEVEL: [float(x) for x in y[LEVEL].values]} if LEVEL in y.dims else {}
        got = self.run.read(sl.lead, inits, levels, lambda ds: ds.sel({STATION: y[STATION].values}), None)
        family = family_for(var, self.family(var))
        params = {p: got[f"{var}_{p}"].transpose(*y.dims) for p in family.params}
        crps = family.crps({k: v.values for k, v in params.items()}, y.values)
        mean = (
            family.mean({k: v.values for k, v in params.items()})
            if family.name != "normal"
            else params["mean"].values
        )
        like = y.copy(data=np.asarray(crps, dtype=np.float64))
        return self.name(var), like, y.copy(data=np.asarray(mean, dtype=np.float64))


def read_station_products(first: RunFiles, frame: StationFrame) -> tuple[StationProducts, StationFrame]:
    """The station products ``first`` (their files scanned for no variable: ``scan_run(paths,
    "station predictions", [])``, which the caller has read the run's subset from) and
    ``frame`` restricted to what they cover: the stations they share with the observations and
    their init times.

    Raises
    ------
    EnsmlError
        Files that are not station products (or of two runs), products whose stations differ
        from the station list they record, a station id at another place than in the
        observations, no station or init time in common, no variable in common.
    """
    predictions, meta = first.paths, first.meta
    variables = [v for v in frame.variables if v in meta.variables]
    if not variables:
        raise EnsmlError(
            f"predictions {predictions} hold {', '.join(meta.variables)}; the observations "
            f"{', '.join(frame.variables)}: nothing to score"
        )
    run = scan_run(predictions, "station predictions", variables)
    coords = run.coords
    where = f"predictions {predictions}"
    if station_set_id(coords) != meta.station_set:
        raise EnsmlError(
            f"{where}: the stations the files hold are not the station list they record "
            "(ensml_station_set): changed after ensml postprocess wrote them"
        )
    obs = frame.observations
    keep = same_places(coords, frame, where)
    missing = np.setdiff1d(coords[STATION].values.astype(str), obs[STATION].values.astype(str))
    if not keep.size:
        raise EnsmlError(
            f"{where}: none of their {missing.size} stations is among {frame.names['observations']}"
        )
    if missing.size:
        note(f"evaluate: {missing.size} stations of {where} have no observations and are not scored")
    inits = np.intersect1d(frame.forecast[INIT_TIME].values, coords[INIT_TIME].values)
    if inits.size == 0:
        raise EnsmlError(f"{where}: no init time in common with {frame.names['forecast']}")
    if run.meta.k > frame.forecast.sizes[MEMBER]:
        raise EnsmlError(f"{where} were made from {run.meta.k} members; {frame.names['forecast']} has fewer")
    restricted = replace(
        frame,
        forecast=frame.forecast.sel({INIT_TIME: inits}),
        observations=obs.isel({STATION: keep}),
        points=frame.points.subset(keep),
        model_height=None if frame.model_height is None else frame.model_height.isel({STATION: keep}),
    )
    return StationProducts(run, variables), restricted


@dataclass(frozen=True)
class StationOracle:
    """The exact predictive distribution at the stations (``stations_oracle.nc`` of ``ensml data
    synth --stations``): the best CRPS any forecast could reach there."""

    ds: xr.Dataset  # (init_time, lead_time, station) parameters, the observations' stations
    families: dict[str, Family]

    def name(self, var: str) -> str:
        return f"station oracle ({self.families[var].name})"

    def parameters(self, var: str, lead: np.timedelta64, y: xr.DataArray) -> dict[str, np.ndarray]:
        """``var``'s oracle parameters at ``lead`` on the pairs of ``y`` (its init times and
        stations, in its dims' order; NaN at an init time the oracle lacks)."""
        at = self.ds.sel({LEAD_TIME: lead}).reindex({INIT_TIME: y[INIT_TIME].values})
        return {
            p: at[f"{var}_{p}"].sel({STATION: y[STATION].values}).transpose(*y.dims).values
            for p in self.families[var].params
        }

    def score(self, var: str, sl: StationLead, y: xr.DataArray) -> tuple[str, xr.DataArray, xr.DataArray]:
        """The name, the per-pair CRPS and the mean of ``var``'s oracle at ``sl``'s lead."""
        family = self.families[var]
        params = self.parameters(var, sl.lead, y)
        crps = np.asarray(family.crps(params, y.values), dtype=np.float64)
        mean = np.asarray(family.mean(params), dtype=np.float64)
        return self.name(var), y.copy(data=crps), y.copy(data=mean)


def read_station_oracle(oracle: str, frame: StationFrame) -> StationOracle:
    """The station oracle of the file ``oracle``, for the frame's variables it names.

    Raises
    ------
    EnsmlError
        An unreadable file, one without ``station`` or a lead of the frame, a station of the
        observations it lacks or has at another place, a variable's parameter missing.
    """
    where = f"oracle {oracle}"
    ds = load_dataset(oracle, "oracle")
    if STATION not in ds.dims or LEAD_TIME not in ds.dims or INIT_TIME not in ds.dims:
        raise EnsmlError(
            f"{where} is no station oracle (dims {', '.join(map(str, ds.dims))}; it needs init_time, "
            "lead_time and station: synth --stations writes stations_oracle.nc)"
        )
    text = str(ds.attrs.get(f"{PREFIX}distribution", ""))
    named = [
        v
        for v in frame.variables
        if f"{v}:" in text.split() or any(w.startswith(f"{v}:") for w in text.split())
    ]
    families = oracle_families(ds.attrs, named, where)
    for var, family in families.items():
        missing = [f"{var}_{p}" for p in family.params if f"{var}_{p}" not in ds]
        if missing:
            raise EnsmlError(f"{where} has no {', '.join(missing)}")
    lacking = np.setdiff1d(frame.leads, ds[LEAD_TIME].values)
    if lacking.size:
        raise EnsmlError(f"{where} has no lead {format_lead(lacking[0])}")
    keep = same_places(ds, frame, where)
    if keep.size != frame.observations.sizes[STATION]:
        absent = np.setdiff1d(frame.observations[STATION].values.astype(str), ds[STATION].values.astype(str))
        raise EnsmlError(
            f"{where} lacks {absent.size} station(s) of {frame.names['observations']}, e.g. {absent[0]!r}"
        )
    return StationOracle(ds, families)


def same_places(ds: xr.Dataset, frame: StationFrame, where: str) -> np.ndarray:
    """The positions in the frame's observations of the stations of ``ds`` they share (sorted);
    a shared id at another place is an error naming both places."""
    obs = frame.observations
    index, conflict = match_stations(obs, ds)
    if conflict is not None:
        j, i = conflict
        lat, lon = float(ds[LATITUDE][j]), float(ds[LONGITUDE][j])
        raise EnsmlError(
            f"{where} are for another station list: station {str(ds[STATION].values[j])!r} is at "
            f"{lat:.4f}°N {lon:.4f}°E there and at {float(obs[LATITUDE][i]):.4f}°N "
            f"{float(obs[LONGITUDE][i]):.4f}°E in {frame.names['observations']}"
        )
    return np.sort(index[index >= 0])


__all__ = ["StationOracle", "StationProducts", "read_station_oracle", "read_station_products", "same_places"]
