r"""Fair scores of samples as torch tensors: the losses of generated members.

A generator trained on a proper score of a finite sample must use the score's *fair* (unbiased)
estimator, or it learns to be over-dispersed: with N members, the plain ensemble CRPS rewards a
spread larger than the truth's by a factor that vanishes only as N → ∞ (Ferro 2014, Q. J. R.
Meteorol. Soc. 140, 1917). ECMWF's AIFS-CRPS trains on a near-fair CRPS for the same reason
(Lang et al. 2024, arXiv 2412.15832). Both scores here are differentiable in the members (the
gradient of ``|x|`` at 0 is taken as 0, as torch does).

* :func:`crps_fair` (per component):
  ``CRPS_f(x, y) = (1/N) Σ_i |x_i − y| − 1/(2 N (N−1)) Σ_{i,j} |x_i − x_j|``, computed with the
  members sorted, ``Σ_{i,j} |x_i − x_j| = 2 Σ_i (2i − N + 1) x_(i)`` (i from 0): O(N log N).
* :func:`energy_score_fair` (over a vector of D components):
  ``ES_f(x, y) = (1/N) Σ_i ‖x_i − y‖ − 1/(2 N (N−1)) Σ_{i≠j} ‖x_i − x_j‖`` with the Euclidean
  norm (Gneiting & Raftery 2007, JASA 102, 359; the fair form as scoringrules'
  ``es_ensemble(..., estimator="fair")``). For D = 1 it is the fair CRPS.

Units: those of the members (the energy score's grow like √D with the vector's length).
Both need N ≥ 2 members; a NaN anywhere gives NaN (the caller masks what is not observed).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ensml.errors import EnsmlError

if TYPE_CHECKING:
    import torch

__all__ = ["crps_fair", "energy_score_fair", "variogram_score_fair"]


def _check_members(n: int, func: str) -> None:
    if n < 2:
        raise EnsmlError(f"{func}: the fair estimator needs at least 2 members, got {n}")


def crps_fair(members: torch.Tensor, obs: torch.Tensor, dim: int = 0) -> torch.Tensor:
    """The fair CRPS of each component: ``members`` (…, N, …) with the member axis ``dim``,
    ``obs`` of the members' shape without that axis. Returns the score of ``obs``'s shape.

    Raises
    ------
    EnsmlError
        Fewer than 2 members.
    """
    import torch

    n = members.shape[dim]
    _check_members(n, "crps_fair")
    x = members.movedim(dim, 0)
    skill = (x - obs.unsqueeze(0)).abs().mean(0)
    ordered = torch.sort(x, dim=0).values
    rank = torch.arange(n, device=x.device, dtype=x.dtype).reshape(-1, *([1] * (x.ndim - 1)))
    pairs = 2.0 * ((2.0 * rank - n + 1.0) * ordered).sum(0)  # Σ_{i,j} |x_i − x_j|
    return skill - pairs / (2.0 * n * (n - 1))


def energy_score_fair(members: torch.Tensor, obs: torch.Tensor, member_dim: int = 0) -> torch.Tensor:
    """The fair energy score of each vector: ``members`` (…, N, …, D) with the member axis
    ``member_dim`` and the vector's components on the last axis, ``obs`` of the members' shape
    without the member axis. Returns the score per case (``obs``'s shape without its last axis).

    Raises
    ------
    EnsmlError
        Fewer than 2 members, or the member axis given as the last (the components') axis.
    """
    import torch

    if member_dim % members.ndim == members.ndim - 1:
        raise EnsmlError("energy_score_fair: the last axis holds the components, not the members")
    n = members.shape[member_dim]
    _check_members(n, "energy_score_fair")
    x = members.movedim(member_dim, -2)  # (…, N, D)
    skill = torch.linalg.vector_norm(x - obs.unsqueeze(-2), dim=-1).mean(-1)
    i, j = torch.triu_indices(n, n, offset=1, device=x.device)
    spread = torch.linalg.vector_norm(x[..., i, :] - x[..., j, :], dim=-1).sum(-1)  # Σ_{i<j}
    return skill - spread / (n * (n - 1))


def variogram_score_fair(
    members: torch.Tensor, obs: torch.Tensor, member_dim: int = 0, p: float = 0.5, smooth: float = 0.0
) -> torch.Tensor:
    """The fair variogram score of order ``p`` of each vector, every ordered pair of components
    weighted 1: ``members`` (…, N, …, D) with the member axis ``member_dim`` and the components on
    the last axis, ``obs`` of the members' shape without the member axis. Returns the score per
    case (``obs``'s shape without its last axis); ``smooth`` > 0 smooths ``|d|^p`` at 0 (see the
    module). Memory: N × D(D − 1)/2 values per case.

    Raises
    ------
    EnsmlError
        Fewer than 2 members, the member axis given as the components' axis, or ``p`` or
        ``smooth`` out of range.
    """
    import torch

    if member_dim % members.ndim == members.ndim - 1:
        raise EnsmlError("variogram_score_fair: the last axis holds the components, not the members")
    if not p > 0 or not smooth >= 0:
        raise EnsmlError(f"variogram_score_fair: need p > 0 and smooth >= 0, got p={p}, smooth={smooth}")
    n = members.shape[member_dim]
    _check_members(n, "variogram_score_fair")
    x = members.movedim(member_dim, -2)  # (…, N, D)
    i, j = torch.triu_indices(x.shape[-1], x.shape[-1], offset=1, device=x.device)

    def variogram(v: torch.Tensor) -> torch.Tensor:  # (…, D) → (…, D(D − 1)/2): |v_i − v_j|^p
        d = v[..., i] - v[..., j]
        if smooth == 0:
            return d.abs().pow(p)
        return (d * d + smooth * smooth).pow(p / 2)

    forecast = variogram(x)  # (…, N, P)
    mean, var = forecast.mean(-2), forecast.var(-2, correction=1)
    return 2.0 * ((mean - variogram(obs)) ** 2 - var / n).sum(-1)  # Σ_{i<j} twice: Σ_{i≠j}
