"""Fit a distributional regression network (:class:`ensml.models.drn.DRN`) by minimum CRPS.

Rasp & Lerch (2018) train the network on the closed-form CRPS of its predictive distribution
with Adam, in mini-batches, and stop early on held-out data. Here the family is any of
:mod:`ensml.scores.distributions`: for a parametric one the network's ``(μ, σ, extra)`` become
the family's parameters through :meth:`~ensml.scores.distributions.Family.from_moments`; for the
distribution-free head (``bqn``, Bremnes 2020) its d + 1 outputs become the non-decreasing
coefficients of a Bernstein quantile function (:meth:`~ensml.scores.distributions.bqn.BQN.link`
around the training observations' mean and standard deviation: zero outputs give their normal).
The loss is the mean of :meth:`~ensml.scores.distributions.Family.crps` over the batch (the
quantile head's by the pinball loss over quantile levels)::

    L = (1 / |B|) Σ_{i ∈ B} CRPS(F_θ(x_i, s_i), y_i) / y_scale

(divided by the target's standard deviation so that one learning rate suits any variable).

References
----------
Rasp, S. and Lerch, S. (2018): Neural networks for postprocessing ensemble weather forecasts.
Monthly Weather Review 146, 3885-3900, doi:10.1175/MWR-D-18-0187.1.
"""

from __future__ import annotations

import copy
import math
from collections.abc import Sequence
from typing import Any

import numpy as np
import torch

from ensml.errors import EnsmlError
from ensml.models.drn import DRN, NEW_STATION_METHODS, NewStationMethod, check_positions
from ensml.progress import EVERY_S, Progress, note
from ensml.scores.distributions import Family, get_family
from ensml.scores.distributions.bqn import BQN
from ensml.seeds import check_seed

#: The fewest rows (with finite features and observation) a fit takes: fewer cannot be split
#: into training and validation rows that say anything.
MIN_ROWS = 10


def fit_drn(
    features: Any,
    station: Any,
    obs: Any,
    *,
    family: str | Family = "normal",
    n_stations: int,
    station_lat: Any,
    station_lon: Any,
    hidden: int | Sequence[int] = 64,
    embedding_dim: int = 2,
    epochs: int = 300,
    batch_size: int = 4096,
    lr: float = 5e-3,
    val_fraction: float = 0.2,
    patience: int = 20,
    seed: int = 0,
    untrained: NewStationMethod = "nearest",
) -> DRN:
    """Fit a DRN by minimising the mean CRPS of ``family`` with Adam, stopping early.

    Parameters
    ----------
    features
        (N, F) float features of N rows (numpy or torch), e.g. the ensemble mean and std.
    station
        (N,) integer station index of each row, in ``0 … n_stations − 1``.
    obs
        (N,) observations, in the variable's units (within the family's support).
    family
        The predictive family (:func:`ensml.scores.distributions.get_family`): ``normal``,
        ``truncnormal``, ``trunclogistic``, ``cnormal``, ``clogistic`` or ``csg0``.
    n_stations
        Rows of the embedding table.
    station_lat, station_lon
        (n_stations,) station positions in degrees, kept in the model for stations without
        history (:meth:`ensml.models.drn.DRN.with_new_stations`).
    hidden, embedding_dim
        The network (:class:`ensml.models.drn.DRN`): hidden widths, embedding length (0: none).
    epochs, batch_size, lr
        At most ``epochs`` passes over the training rows in shuffled mini-batches of
        ``batch_size``, Adam with learning rate ``lr``. On 425,000 rows of synthetic stations
        (one thread), batches of 4,096 reached a lower test CRPS than 256 in 149 s instead of
        376 s (0.597 against 0.600 K; docs/guide/stations.md).
    val_fraction
        Share of the rows (random by ``seed``) held out for early stopping: the weights of the
        epoch with the lowest mean validation CRPS are kept; training stops after ``patience``
        epochs without a lower one.
    seed
        Makes the initial weights, the split and the shuffling deterministic (on CPU); the
        caller's global torch generator is left as it was.
    untrained
        How stations of the table without training rows get an embedding: ``"nearest"``
        (the nearest trained station's) or ``"zero"`` (see :mod:`ensml.models.drn`).

    Rows whose observation or any feature is NaN are dropped (a note says how many); infinite
    values are refused.

    Returns
    -------
    DRN
        The fitted module (float32, evaluation mode, no gradients), with the weights of the
        best validation epoch; :func:`drn_distribution` gives its family's parameters.
    """
    family = get_family(family)
    x, s, y = _inputs(features, station, obs)
    n_stations = _stations(n_stations, s)
    lat, lon = check_positions(station_lat, station_lon, "fit_drn station")
    if lat.shape != (n_stations,):
        raise EnsmlError(
            f"fit_drn station_lat and station_lon must have n_stations = {n_stations} values, "
            f"got {lat.shape[0]}"
        )
    _hyper(epochs=epochs, batch_size=batch_size, patience=patience, embedding_dim=embedding_dim)
    if not (isinstance(lr, int | float) and math.isfinite(lr) and lr > 0):
        raise EnsmlError(f"fit_drn lr must be a finite number > 0, got {lr!r}")
    if not (isinstance(val_fraction, int | float) and 0 < val_fraction < 1):
        raise EnsmlError(f"fit_drn val_fraction must lie strictly between 0 and 1, got {val_fraction!r}")
    if untrained not in NEW_STATION_METHODS:
        raise EnsmlError(
            f"fit_drn untrained must be one of {', '.join(NEW_STATION_METHODS)}, got {untrained!r}"
        )
    seed = check_seed(seed, "fit_drn seed")

    keep = ~(torch.isnan(x).any(dim=1) | torch.isnan(y))
    n_all, n = int(keep.numel()), int(keep.sum())
    if n < n_all:
        note(f"fit_drn: dropped {n_all - n} of {n_all} rows with a NaN feature or observation")
    x, s, y = x[keep], s[keep], y[keep]
    family.check_obs(y.numpy(), "fit_drn observations")
    if n < MIN_ROWS:
        raise EnsmlError(
            f"fit_drn needs at least {MIN_ROWS} rows with finite features and observation, got {n} "
            f"(of {n_all})"
        )

    gen = torch.Generator().manual_seed(seed)
    order = torch.randperm(n, generator=gen)
    n_val = max(1, round(val_fraction * n))
    val, train = order[:n_val], order[n_val:]
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = DRN(x.shape[1], n_stations, embedding_dim, hidden, family.n_raw)
    _standardise(model, x[train], y[train])
    with torch.no_grad():
        model.station_lat.copy_(torch.from_numpy(lat))
        model.station_lon.copy_(torch.from_numpy(lon))
        model.trained[s[train]] = True
        if not isinstance(family, BQN):  # σ starts at one standard deviation
            model.mlp[-1].bias[1] = math.log(math.expm1(1.0))

    opt = torch.optim.Adam(model.parameters(), lr=lr)
    best, best_epoch, best_state = math.inf, 0, copy.deepcopy(model.state_dict())
    with Progress("fit_drn", epochs, "epochs", every_s=EVERY_S) as bar:
        for epoch in range(1, epochs + 1):
            model.train()
            for batch in train[torch.randperm(train.numel(), generator=gen)].split(batch_size):
                opt.zero_grad()
                loss = _mean_crps(model, family, x[batch], s[batch], y[batch]) / model.y_scale
                loss.backward()
                opt.step()
            model.eval()
            with torch.no_grad():
                score = float(_mean_crps(model, family, x[val], s[val], y[val]))
            if not math.isfinite(score):
                raise EnsmlError(
                    f"the DRN fit of family {family.name} diverged at epoch {epoch} (validation CRPS "
                    f"{score}); lower lr (now {lr:g})"
                )
            if score < best:
                best, best_epoch, best_state = score, epoch, copy.deepcopy(model.state_dict())
            bar.advance(f"validation CRPS {score:.4g} (best {best:.4g} at epoch {best_epoch})")
            if epoch - best_epoch >= patience:
                break
    model.load_state_dict(best_state)
    stop = f"stopped early at epoch {epoch}" if epoch < epochs else f"ran all {epochs} epochs"
    note(
        f"fit_drn: {family.name}, {train.numel()} training and {n_val} validation rows, {stop}; "
        f"kept epoch {best_epoch}, validation CRPS {best:.4g} (units of the observations)"
    )
    filled = model.fill_untrained(untrained)
    if filled:
        note(f"fit_drn: {filled} station(s) without training rows take the {untrained} embedding")
    return model.eval().requires_grad_(False)


def drn_distribution(model: DRN, family: str | Family, features: Any, station: Any) -> dict[str, Any]:
    """The family's parameters ``{param: (N,)}`` that a fitted ``model`` predicts.

    ``features`` (N, F) and ``station`` (N,) as for :func:`fit_drn` (numpy or torch; NaN
    features give NaN parameters); a station beyond the model's table is refused (see
    :meth:`ensml.models.drn.DRN.with_new_stations` for new ones). Torch tensors out.
    """
    family = get_family(family)
    if family.n_raw != model.n_raw:
        raise EnsmlError(
            f"drn_distribution: the {family.name} family needs {family.n_raw} outputs per sample, "
            f"the model gives {model.n_raw}"
        )
    x, s = _features(features, model.n_features), _station_index(station)
    if s.shape != (x.shape[0],):
        raise EnsmlError(
            f"drn_distribution needs station of shape ({x.shape[0]},) beside features "
            f"{tuple(x.shape)}, got {tuple(s.shape)}"
        )
    _stations(model.n_stations, s)
    ref = model.x_loc
    return _params(model, family, x.to(ref), s.to(ref.device))


def _params(model: DRN, family: Family, x: torch.Tensor, s: torch.Tensor) -> dict[str, torch.Tensor]:
    if isinstance(family, BQN):  # the quantile head: zero outputs give the training climatology's normal
        h = model.outputs(x, s)
        centre, spread = model.y_loc.expand(h.shape[0]), model.y_scale.expand(h.shape[0])
        return family.link(list(h.unbind(dim=1)), centre, spread, model.y_scale)
    mu, sigma, extra = model(x, s)
    return family.from_moments(mu, sigma, extra[:, 0] if extra is not None else None, model.y_scale)


def _mean_crps(model: DRN, family: Family, x: torch.Tensor, s: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    return family.crps(_params(model, family, x, s), y).mean()


def _standardise(model: DRN, x: torch.Tensor, y: torch.Tensor) -> None:
    """Set the model's feature and target standardisation from the training rows."""
    with torch.no_grad():
        scale = x.std(0, unbiased=False) if x.shape[0] > 1 else torch.ones(x.shape[1])
        model.x_loc.copy_(x.mean(0))
        model.x_scale.copy_(torch.where(scale > 0, scale, torch.ones_like(scale)))
        y_scale = y.std(unbiased=False) if y.numel() > 1 else torch.ones(())
        model.y_loc.copy_(y.mean())
        model.y_scale.copy_(y_scale if y_scale > 0 else torch.ones(()))


def _features(features: Any, n_features: int | None = None) -> torch.Tensor:
    x = torch.as_tensor(features)
    if x.ndim != 2 or not (x.is_floating_point() or x.dtype in (torch.int32, torch.int64)):
        raise EnsmlError(
            f"features must be a float (N, F) array, got shape {tuple(x.shape)}, dtype {x.dtype}"
        )
    if n_features is not None and x.shape[1] != n_features:
        raise EnsmlError(f"features has {x.shape[1]} columns, the model takes {n_features}")
    return x.detach().cpu().to(torch.float32) if n_features is None else x.to(torch.float32)


def _station_index(station: Any) -> torch.Tensor:
    s = torch.as_tensor(station)
    if s.is_floating_point() or s.is_complex() or s.dtype == torch.bool:
        raise EnsmlError(f"station must hold integer station indices, got dtype {s.dtype}")
    return s.to(torch.int64)


def _inputs(features: Any, station: Any, obs: Any) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(N, F) float32 features, (N,) int64 stations, (N,) float32 obs on the CPU, or one line."""
    x, s = _features(features), _station_index(station).detach().cpu()
    y = torch.as_tensor(obs).detach().cpu().to(torch.float32)
    if s.shape != (x.shape[0],) or y.shape != (x.shape[0],):
        raise EnsmlError(
            f"fit_drn needs features (N, F), station (N,) and obs (N,) of one N, got shapes "
            f"{tuple(x.shape)}, {tuple(s.shape)}, {tuple(y.shape)}"
        )
    for name, v in (("features", x), ("obs", y)):
        n_inf = int(torch.isinf(v).sum())
        if n_inf:
            raise EnsmlError(f"fit_drn {name} hold {n_inf} infinite value(s); give NaN for a missing one")
    return x, s, y


def _stations(n_stations: Any, s: torch.Tensor) -> int:
    if isinstance(n_stations, bool) or not isinstance(n_stations, int | np.integer) or n_stations < 1:
        raise EnsmlError(f"n_stations must be an integer >= 1, got {n_stations!r}")
    bad = (s < 0) | (s >= n_stations)
    if bad.any():
        raise EnsmlError(
            f"station index out of range 0..{n_stations - 1} in {int(bad.sum())} row(s) "
            f"(first: {int(s[bad][0])})"
        )
    return int(n_stations)


def _hyper(**values: int) -> None:
    least = {"embedding_dim": 0}
    for name, value in values.items():
        low = least.get(name, 1)
        if isinstance(value, bool) or not isinstance(value, int | np.integer) or value < low:
            raise EnsmlError(f"fit_drn {name} must be an integer >= {low}, got {value!r}")


__all__ = ["MIN_ROWS", "drn_distribution", "fit_drn"]
