"""A distributional regression network with learned station embeddings (Rasp & Lerch 2018).

Per sample ``i`` at station ``s(i)``, a multilayer perceptron on the standardised features and
the station's learned embedding gives the raw outputs of a predictive family::

    x̃ = (x − x_loc) / x_scale                                  (F features, standardised)
    h = MLP([x̃, e_s(i)])                                       (e_s: a row of the embedding table)
    μ = y_loc + y_scale · h₀
    σ = y_scale · (softplus(h₁) + SIGMA_FLOOR)
    extra = h₂, …                                              (unconstrained, standardised units)

``(μ, σ, extra)`` are the location, spread and further outputs that a family maps to its
parameters (:meth:`ensml.scores.distributions.Family.from_moments` with ``unit = y_scale``): the
mean and standard deviation of a Gaussian, the location and scale of a truncated normal, the
moments of the gamma and the shift of a censored shifted gamma. The embedding lets one network
serve all stations while learning each one's local behaviour (bias, spread) from its history;
Rasp & Lerch use two dimensions, the default here. The fit (Adam on the mean CRPS, early
stopping) is :func:`ensml.train.drn.fit_drn`: a model here never imports a score.

Stations without history
------------------------
A station that had no training rows has an embedding the fit never moved (its random start).
:meth:`DRN.with_new_stations` adds new stations, and :meth:`DRN.fill_untrained` repairs trained
ones without rows, by one of two rules (:data:`NEW_STATION_METHODS`):

* ``"nearest"`` (the default): the embedding of the nearest trained station on the great circle.
  The network has only ever seen the embeddings of real stations; a neighbour's is one of those,
  and what an embedding learns (local bias and spread: exposure, height, coast) is spatially
  correlated, so a neighbour is the best guess available without history.
* ``"zero"``: a zero vector. Nothing makes zero the embedding of an "average" station (the
  embeddings are not centred by the fit), so the network extrapolates there; it is offered for
  the case where no neighbour is near or like the new station, and for comparison.

References
----------
Rasp, S. and Lerch, S. (2018): Neural networks for postprocessing ensemble weather forecasts.
Monthly Weather Review 146, 3885-3900, doi:10.1175/MWR-D-18-0187.1.
"""

from __future__ import annotations

import copy
from collections.abc import Sequence
from typing import Literal

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from ensml.errors import EnsmlError

NewStationMethod = Literal["nearest", "zero"]
#: How a station without history gets its embedding (see the module's docstring).
NEW_STATION_METHODS: tuple[str, ...] = ("nearest", "zero")
#: The least spread, in standardised target units: keeps σ > 0 where softplus underflows.
SIGMA_FLOOR = 1e-4
#: New stations compared with the trained ones per block (bounds the distance matrix's memory).
_BLOCK = 1024


class DRN(nn.Module):
    """A distributional regression network on (N, F) features and (N,) station indices.

    Parameters
    ----------
    n_features
        F, the number of features per sample (e.g. the ensemble mean and std, the lead time).
    n_stations
        Rows of the embedding table (stations ``0 … n_stations − 1``).
    embedding_dim
        Length of a station's embedding (2 as in Rasp & Lerch 2018); 0: no embedding, one
        network for all stations alike.
    hidden
        Widths of the hidden layers (ReLU): one int for one layer, a sequence for several,
        ``()`` for none (a linear model on the features and the embedding).
    n_raw
        Outputs per sample: location and spread, plus the family's extras
        (:attr:`ensml.scores.distributions.Family.n_raw`: 2, or 3 for ``csg0``); for the
        distribution-free head (``bqn``) the d + 1 outputs its quantile function's
        coefficients are made of.

    Buffers, set by the fit: ``x_loc``, ``x_scale`` (F,) standardise the features, ``y_loc``,
    ``y_scale`` (scalars) the target; ``station_lat``, ``station_lon`` (n_stations,) place the
    stations (degrees; NaN where unknown); ``trained`` (n_stations,) says which stations had
    training rows.
    """

    def __init__(
        self,
        n_features: int,
        n_stations: int,
        embedding_dim: int = 2,
        hidden: int | Sequence[int] = 64,
        n_raw: int = 2,
    ) -> None:
        super().__init__()
        widths = [hidden] if isinstance(hidden, int) else list(hidden)
        for name, value, least in (
            ("n_features", n_features, 1),
            ("n_stations", n_stations, 1),
            ("embedding_dim", embedding_dim, 0),
            ("n_raw", n_raw, 2),
        ):
            if not isinstance(value, int) or value < least:
                raise EnsmlError(f"DRN {name} must be an integer >= {least}, got {value!r}")
        if any(not isinstance(w, int) or w < 1 for w in widths):
            raise EnsmlError(f"DRN hidden must be positive integer widths, got {hidden!r}")
        self.n_features, self.n_stations = n_features, n_stations
        self.embedding_dim, self.hidden, self.n_raw = embedding_dim, tuple(widths), n_raw
        self.embedding = nn.Embedding(n_stations, embedding_dim) if embedding_dim else None
        layers: list[nn.Module] = []
        width = n_features + embedding_dim
        for w in widths:
            layers += [nn.Linear(width, w), nn.ReLU()]
            width = w
        layers.append(nn.Linear(width, n_raw))
        self.mlp = nn.Sequential(*layers)
        self.register_buffer("x_loc", torch.zeros(n_features))
        self.register_buffer("x_scale", torch.ones(n_features))
        self.register_buffer("y_loc", torch.zeros(()))
        self.register_buffer("y_scale", torch.ones(()))
        self.register_buffer("station_lat", torch.full((n_stations,), float("nan")))
        self.register_buffer("station_lon", torch.full((n_stations,), float("nan")))
        self.register_buffer("trained", torch.zeros(n_stations, dtype=torch.bool))

    def station_embedding(self, station: torch.Tensor) -> torch.Tensor:
        """The (N, embedding_dim) embeddings of stations ``station`` (N,) (N × 0 without one)."""
        if self.embedding is None:
            return self.x_loc.new_zeros(station.shape[0], 0)
        return self.embedding(station)

    def outputs(self, features: torch.Tensor, station: torch.Tensor) -> torch.Tensor:
        """The network's (N, n_raw) unconstrained outputs (standardised units) of (N, F)
        ``features`` at (N,) ``station`` indices: what :meth:`forward` maps to ``(μ, σ, extra)``
        and a quantile head (``bqn``) to its coefficients."""
        x = (features - self.x_loc) / self.x_scale
        return self.mlp(torch.cat([x, self.station_embedding(station)], dim=-1))

    def forward(
        self, features: torch.Tensor, station: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
        """Predictive ``(μ, σ, extra)`` of (N, F) ``features`` at (N,) ``station`` indices.

        Returns
        -------
        mu, sigma
            (N,) location and spread (> 0), in the target's units.
        extra
            (N, n_raw − 2) unconstrained further outputs (standardised units; a family maps
            them with ``unit = y_scale``), or ``None`` when ``n_raw == 2``.
        """
        h = self.outputs(features, station)
        mu = self.y_loc + self.y_scale * h[:, 0]
        sigma = self.y_scale * (F.softplus(h[:, 1]) + SIGMA_FLOOR)
        extra = h[:, 2:] if self.n_raw > 2 else None
        return mu, sigma, extra

    # -- stations without history ---------------------------------------------------------------
    def nearest_trained(self, lat: np.ndarray, lon: np.ndarray) -> np.ndarray:
        """Index of the trained station nearest on the great circle to each of (M,) ``lat``, ``lon``.

        Ties go to the lowest index. Needs the trained stations' positions (set by the fit).
        """
        from ensml.data.points import great_circle_m  # ensml.data loads xarray: only needed here

        lat, lon = check_positions(lat, lon, "new station")
        trained = self.trained.cpu().numpy()
        tlat = self.station_lat.cpu().numpy().astype(np.float64)[trained]
        tlon = self.station_lon.cpu().numpy().astype(np.float64)[trained]
        if not trained.any():
            raise EnsmlError("DRN has no trained station: fit it before placing new stations")
        if not (np.isfinite(tlat).all() and np.isfinite(tlon).all()):
            raise EnsmlError("DRN's trained stations have no positions (station_lat/station_lon)")
        index = np.flatnonzero(trained)
        out = np.empty(lat.shape[0], dtype=np.int64)
        for start in range(0, lat.shape[0], _BLOCK):
            block = slice(start, start + _BLOCK)
            dist = great_circle_m(lat[block, None], lon[block, None], tlat[None], tlon[None])
            out[block] = index[np.argmin(dist, axis=1)]
        return out

    def new_station_embedding(
        self, lat: np.ndarray, lon: np.ndarray, method: NewStationMethod = "nearest"
    ) -> torch.Tensor:
        """The (M, embedding_dim) embeddings that stations at (M,) ``lat``, ``lon`` get by ``method``.

        ``"nearest"``: a copy of the nearest trained station's (great circle); ``"zero"``: zeros.
        """
        if method not in NEW_STATION_METHODS:
            raise EnsmlError(
                f"DRN new-station method must be one of {', '.join(NEW_STATION_METHODS)}, got {method!r}"
            )
        lat, lon = check_positions(lat, lon, "new station")
        weight = self.embedding.weight if self.embedding is not None else self.x_loc.new_zeros(0, 0)
        if method == "zero" or self.embedding is None:
            return weight.new_zeros(lat.shape[0], self.embedding_dim)
        nearest = torch.as_tensor(self.nearest_trained(lat, lon), device=weight.device)
        return weight.detach()[nearest].clone()

    def with_new_stations(
        self, lat: np.ndarray, lon: np.ndarray, method: NewStationMethod = "nearest"
    ) -> DRN:
        """A copy of this model with M new stations ``n_stations … n_stations + M − 1`` at
        (M,) ``lat``, ``lon`` (degrees), their embeddings by ``method`` (see the module's
        docstring); the new stations are not marked trained. This model is unchanged."""
        new = self.new_station_embedding(lat, lon, method)
        lat, lon = check_positions(lat, lon, "new station")
        out = copy.deepcopy(self)
        m = lat.shape[0]
        out.n_stations = self.n_stations + m
        if out.embedding is not None:
            table = nn.Embedding(out.n_stations, self.embedding_dim).to(new.device, new.dtype)
            with torch.no_grad():
                table.weight.copy_(torch.cat([self.embedding.weight.detach(), new]))
            out.embedding = table.requires_grad_(self.embedding.weight.requires_grad)
        out.station_lat = torch.cat([self.station_lat, torch.as_tensor(lat).to(self.station_lat)])
        out.station_lon = torch.cat([self.station_lon, torch.as_tensor(lon).to(self.station_lon)])
        out.trained = torch.cat([self.trained, self.trained.new_zeros(m)])
        return out

    def fill_untrained(self, method: NewStationMethod = "nearest") -> int:
        """Give each station of the table without training rows (``trained`` False) an embedding
        by ``method``, in place; returns how many were filled (0 when all were trained)."""
        untrained = np.flatnonzero(~self.trained.cpu().numpy())
        if self.embedding is None or untrained.size == 0:
            return 0
        lat = self.station_lat.cpu().numpy()[untrained]
        lon = self.station_lon.cpu().numpy()[untrained]
        check_positions(lat, lon, "untrained station")
        new = self.new_station_embedding(lat, lon, method)
        with torch.no_grad():
            self.embedding.weight[torch.as_tensor(untrained, device=new.device)] = new
        return int(untrained.size)


def check_positions(lat: np.ndarray, lon: np.ndarray, what: str) -> tuple[np.ndarray, np.ndarray]:
    """(M,) float64 latitudes and longitudes in degrees, or one line naming ``what`` is wrong."""
    lat = np.asarray(lat.cpu() if isinstance(lat, torch.Tensor) else lat, dtype=np.float64)
    lon = np.asarray(lon.cpu() if isinstance(lon, torch.Tensor) else lon, dtype=np.float64)
    if lat.ndim != 1 or lat.shape != lon.shape:
        raise EnsmlError(
            f"{what} lat and lon must be 1-D of one length, got shapes {lat.shape} and {lon.shape}"
        )
    bad = ~np.isfinite(lat) | ~np.isfinite(lon) | (np.abs(lat) > 90)
    if bad.any():
        i = int(np.flatnonzero(bad)[0])
        raise EnsmlError(
            f"{what} positions must be finite with lat in [-90, 90] degrees: {int(bad.sum())} are not "
            f"(first: index {i}, lat {lat[i]:g}, lon {lon[i]:g})"
        )
    return lat, lon


__all__ = ["DRN", "NEW_STATION_METHODS", "SIGMA_FLOOR", "NewStationMethod", "check_positions"]
