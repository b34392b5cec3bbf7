"""Fit EMOS (:class:`ensml.models.emos.EMOS`) by minimising a family's closed-form CRPS.

Full-batch L-BFGS over all samples and points at once: local EMOS on a 32 × 64 grid fits in
seconds because the per-point problems are solved together as one vectorised objective.
"""

from __future__ import annotations

import torch

from ensml.errors import EnsmlError
from ensml.models.emos import EMOS, Mode
from ensml.scores.distributions import Family, get_family
from ensml.scores.gaussian import crps_gaussian


def fit_emos(
    mean: torch.Tensor,
    std: torch.Tensor,
    obs: torch.Tensor,
    mode: Mode = "local",
    weights: torch.Tensor | None = None,
    max_iter: int = 50,
    family: str | Family = "normal",
) -> EMOS:
    """Fit EMOS by minimising the mean CRPS of ``family`` with full-batch L-BFGS.

    Parameters
    ----------
    mean, std, obs
        (N, V, D, H, W) ensemble mean, ensemble std and verifying analysis of N training samples.
        An observation may be missing (NaN, a station's gap): it weighs nothing in the fit; every
        point (local EMOS) needs one observation at least.
    mode
        ``"global"``: one (a, b, c, d) per variable and level; ``"local"``: per grid point too.
    weights
        (H,) latitude weights of the objective (global EMOS; local fits are per point anyway).
    max_iter
        L-BFGS iterations (each evaluates all samples and points). They start from the method
        of moments (least squares of the observation on the mean, then of the squared residual
        on the variance), which is close, so a few dozen suffice.
    family
        The predictive family (:func:`ensml.scores.distributions.get_family`): ``normal``
        (the Gaussian CRPS, float32, as always), ``truncnormal``, ``trunclogistic``, ``cnormal``,
        ``clogistic`` or ``csg0``; :func:`emos_distribution` gives the fitted parameters.

    Returns
    -------
    EMOS
        The fitted module (float32, on the inputs' device).
    """
    if mean.ndim != 5 or mean.shape != std.shape or mean.shape != obs.shape:
        raise EnsmlError(
            f"fit_emos needs mean, std and obs of one (N, V, D, H, W) shape, got "
            f"{tuple(mean.shape)}, {tuple(std.shape)}, {tuple(obs.shape)}"
        )
    if mode not in ("global", "local"):
        raise EnsmlError(f"EMOS mode must be 'global' or 'local', got {mode!r}")
    family = get_family(family)
    if family.name.startswith("bqn"):
        raise EnsmlError("EMOS fits parametric families; a quantile network (bqn) is a MixedTask")
    family.check_obs(obs.detach().cpu().numpy(), "the EMOS training observations")
    _, v, d, h, w = mean.shape
    model = EMOS(v, d, (h, w) if mode == "local" else None, n_extra=family.n_raw - 2).to(mean.device)
    dims = (0, 3, 4)
    # Observations may be missing (NaN: a station's gaps): they weigh 0, with a placeholder value.
    seen = torch.isfinite(obs)
    seen = None if bool(seen.all()) else seen.to(mean.dtype)
    if seen is not None:
        if not bool((seen.sum(0) > 0).all() if mode == "local" else seen.sum() > 0):
            raise EnsmlError(
                f"the {mode} EMOS fit needs an observation at every point (station); "
                "leave out those never observed"
            )
        obs = torch.where(seen > 0, obs, mean)
    model.loc.copy_(_mean(mean, dims, seen)[0, ..., 0, 0][..., None, None])
    model.scale.copy_(_std(obs - mean, dims, seen).clamp_min(1e-12)[..., None, None])
    with torch.no_grad():
        _moment_start(model, mean, std, obs, (0,) if mode == "local" else dims, seen)
    wt = torch.ones(h, device=mean.device) if weights is None else weights.to(mean.device, mean.dtype)
    wt = (wt / wt.mean())[:, None]
    opt = torch.optim.LBFGS(
        model.parameters(), lr=1.0, max_iter=max_iter, history_size=20, line_search_fn="strong_wolfe"
    )

    def closure() -> torch.Tensor:
        opt.zero_grad()
        if family.name == "normal":
            mu, sigma = model(mean, std)
            crps = crps_gaussian(mu / model.scale, sigma / model.scale, obs / model.scale, check=False)
        else:
            crps = family.crps(emos_distribution(model, family, mean, std), obs) / model.scale
        # Local EMOS: the sum over points keeps each point's problem at its own scale.
        if seen is None:
            loss = (crps * wt).mean(0).sum() if mode == "local" else (crps * wt).mean()
        elif mode == "local":
            loss = ((crps * wt * seen).sum(0) / seen.sum(0)).sum()
        else:
            loss = (crps * wt * seen).sum() / seen.sum()
        loss.backward()
        return loss

    opt.step(closure)
    bad = [name for name, p in model.named_parameters() if not torch.isfinite(p).all()]
    if bad:
        raise EnsmlError(
            f"the {mode} EMOS fit of family {family.name} diverged: non-finite coefficients "
            f"{', '.join(bad)}; check the training data for constant or extreme fields"
        )
    return model.requires_grad_(False)


def emos_distribution(model: EMOS, family: str | Family, mean: torch.Tensor, std: torch.Tensor) -> dict:
    """The family's parameters ``{param: (N, V, D, H, W)}`` that a fitted ``model`` predicts."""
    family = get_family(family)
    mu, sigma = model(mean, std)
    extra = model.extra[0] if model.extra is not None else None
    return family.from_moments(mu, sigma, extra, model.scale)


def _mean(x: torch.Tensor, dims, seen: torch.Tensor | None) -> torch.Tensor:
    """The mean over ``dims`` (kept), of the observed samples only when ``seen`` is given."""
    if seen is None:
        return x.mean(dims, keepdim=True)
    return (x * seen).sum(dims, keepdim=True) / seen.sum(dims, keepdim=True).clamp_min(1)


def _std(x: torch.Tensor, dims, seen: torch.Tensor | None) -> torch.Tensor:
    """The standard deviation (ddof 1) over ``dims``, of the observed samples when ``seen`` is given."""
    if seen is None:
        return x.std(dims)
    n = seen.sum(dims, keepdim=True)
    var = (seen * (x - _mean(x, dims, seen)) ** 2).sum(dims, keepdim=True) / (n - 1).clamp_min(1)
    return var.sqrt().squeeze(dims)


def _moment_start(
    model: EMOS, mean: torch.Tensor, std: torch.Tensor, obs: torch.Tensor, dims, seen: torch.Tensor | None
) -> None:
    """Method-of-moments starting point, in the model's standardised units, reducing ``dims``
    (over the observed samples, ``seen``, when some are missing)."""
    m = (mean - model.loc) / model.scale
    y = (obs - model.loc) / model.scale
    s2 = (std / model.scale) ** 2

    def regress(x: torch.Tensor, t: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        xm, tm = _mean(x, dims, seen), _mean(t, dims, seen)
        slope = _mean((x - xm) * (t - tm), dims, seen) / _mean((x - xm) ** 2, dims, seen).clamp_min(1e-12)
        return (tm - slope * xm)[0], slope[0]

    a, b = regress(m, y)
    c, d = regress(s2, (y - a - b * m) ** 2)
    d = d.clamp(0.05, 10.0)
    c = torch.maximum(c, 1e-3 * _mean((y - a - b * m) ** 2, dims, seen)[0]).clamp_min(1e-6)
    model.a.copy_(a.expand_as(model.a))
    model.b.copy_(b.expand_as(model.b))
    model.c_raw.copy_((c + torch.log(-torch.expm1(-c))).expand_as(model.c_raw))
    model.d_raw.copy_((d + torch.log(-torch.expm1(-d))).expand_as(model.d_raw))
