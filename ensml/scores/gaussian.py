"""Closed-form CRPS of a Gaussian forecast, for numpy, torch and xarray.

The torch path is the training loss (``from ensml.scores.gaussian import crps_gaussian``): it is
differentiable, with analytic gradients that stay finite as σ → 0, and it imports no scipy.

NaN/Inf as every ensml score (:mod:`ensml.scores`): NaN in μ, σ or y gives NaN (a missing
point); with ``check=True`` (the default) ±Inf in any of them is an error.
"""

from __future__ import annotations

import math
from collections.abc import Hashable, Iterable
from typing import Any

import numpy as np
import xarray as xr

from ensml.errors import EnsmlError
from ensml.scores.reduce import aligned_fields, check_no_inf, infinite_error, reduce_score

_SQRT2 = math.sqrt(2.0)
_INV_SQRT_PI = 1.0 / math.sqrt(math.pi)
_INV_SQRT_2PI = 1.0 / math.sqrt(2.0 * math.pi)

__all__ = ["crps_gaussian", "crps_gaussian_xr"]


def _is_torch(x: Any) -> bool:
    mod = type(x).__module__
    return mod.startswith("torch") and hasattr(x, "requires_grad")


def crps_gaussian(mu: Any, sigma: Any, obs: Any, *, check: bool = True) -> Any:
    r"""CRPS of the Gaussian N(μ, σ²) for the observation y, elementwise.

    .. math::
        \mathrm{CRPS}(\mathcal N(\mu, \sigma^2), y)
        = \sigma\,[z\,(2\Phi(z) - 1) + 2\varphi(z) - 1/\sqrt{\pi}], \qquad z = (y - \mu)/\sigma

    (Gneiting, Raftery, Westveld & Goldman 2005, Mon. Wea. Rev. 133, 1098, eq. 5). It is
    evaluated as ``d·erf(z/√2) + σ(2φ(z) − 1/√π)`` with ``d = y − μ``, which at σ = 0 gives
    ``|y − μ|`` exactly (the CRPS of a point forecast, i.e. the absolute error).

    Parameters
    ----------
    mu, sigma, obs
        Mean, standard deviation (≥ 0) and observation in the same units; numpy arrays,
        scalars, torch tensors or xarray DataArrays, broadcast together. If any input is a
        torch tensor the result is a torch tensor (differentiable in all three, gradients
        ∂/∂μ = −erf(z/√2), ∂/∂σ = 2φ(z) − 1/√π, ∂/∂y = erf(z/√2), finite at σ = 0); if any is
        a DataArray the result is a DataArray (elementwise, lazy under dask).
    check
        Raise :class:`EnsmlError` when some σ < 0 or an input holds ±Inf. In torch this costs
        a device sync; pass ``False`` inside a compiled or performance-critical loss.

    Returns
    -------
    CRPS in the units of ``obs``, with the broadcast shape; numpy results keep a float32
    dtype when all float inputs are float32 (computed in float64), torch results have the
    tensors' dtype. NaN in any input gives NaN.
    """
    if any(isinstance(a, xr.DataArray) for a in (mu, sigma, obs)):
        return _crps_gaussian_xr_elementwise(mu, sigma, obs, check=check)
    if any(_is_torch(a) for a in (mu, sigma, obs)):
        return _crps_gaussian_torch(mu, sigma, obs, check=check)
    return _crps_gaussian_numpy(mu, sigma, obs, check=check)


# --------------------------------------------------------------------------------------------
# numpy


def _crps_gaussian_numpy(mu: Any, sigma: Any, obs: Any, *, check: bool = True) -> np.ndarray:
    from scipy.special import erf  # numpy path only: torch users never import scipy

    arrays = [np.asarray(a) for a in (mu, sigma, obs)]
    for name, a in zip(("mu", "sigma", "obs"), arrays):
        if not (np.issubdtype(a.dtype, np.number) or a.dtype == bool):
            raise EnsmlError(f"crps_gaussian: {name} must be numeric, got dtype {a.dtype}")
    out_dtype = np.result_type(*arrays, np.float32)
    if not np.issubdtype(out_dtype, np.floating):
        out_dtype = np.dtype(np.float64)
    try:
        m, s, y = np.broadcast_arrays(*(a.astype(np.float64) for a in arrays))
    except ValueError as exc:
        shapes = ", ".join(str(a.shape) for a in arrays)
        raise EnsmlError(f"crps_gaussian: mu, sigma, obs shapes {shapes} do not broadcast") from exc
    if check:
        for name, a in zip(("mu", "sigma", "obs"), (m, s, y)):
            n = int(np.count_nonzero(np.isinf(a)))
            if n:  # counted on the broadcast inputs
                raise infinite_error("crps_gaussian", name, n)
        if np.any(s < 0):
            raise EnsmlError(f"crps_gaussian: sigma must be >= 0 (min {np.nanmin(s):.6g})")
    d = y - m
    with np.errstate(divide="ignore", invalid="ignore"):
        # σ = 0: z = ±∞ (or 0 when d = 0), so that erf and φ take their limits, not NaN.
        z = np.where(s > 0, d / np.where(s > 0, s, 1.0), np.where(d == 0, 0.0, np.sign(d) * np.inf))
    pdf = _INV_SQRT_2PI * np.exp(-0.5 * z * z)
    crps = d * erf(z / _SQRT2) + s * (2.0 * pdf - _INV_SQRT_PI)
    crps = np.where(np.isnan(s) | np.isnan(d), np.nan, crps)
    return crps.astype(out_dtype, copy=False)


# --------------------------------------------------------------------------------------------
# torch


def _torch_z(d: Any, s: Any) -> Any:
    import torch

    pos = s > 0
    safe = torch.where(pos, s, torch.ones_like(s))
    # σ = 0: z = ±∞ (or 0 when d = 0), so that erf and φ take their limits, not NaN.
    inf = torch.where(d == 0, torch.zeros_like(d), torch.sign(d) * math.inf)
    return torch.where(pos, d / safe, inf)


def _make_torch_function() -> Any:
    import torch

    class _CRPSGaussian(torch.autograd.Function):
        @staticmethod
        def forward(ctx: Any, mu: Any, sigma: Any, obs: Any) -> Any:
            d = obs - mu
            z = _torch_z(d, sigma)
            pdf = _INV_SQRT_2PI * torch.exp(-0.5 * z * z)
            crps = d * torch.special.erf(z / _SQRT2) + sigma * (2.0 * pdf - _INV_SQRT_PI)
            ctx.save_for_backward(mu, sigma, obs)
            return crps

        @staticmethod
        def backward(ctx: Any, grad: Any) -> Any:
            mu, sigma, obs = ctx.saved_tensors
            z = _torch_z(obs - mu, sigma)
            e = torch.special.erf(z / _SQRT2)
            g_s = 2.0 * _INV_SQRT_2PI * torch.exp(-0.5 * z * z) - _INV_SQRT_PI
            out = []
            for t, g in ((mu, -e), (sigma, g_s), (obs, e)):
                if ctx.needs_input_grad[len(out)]:
                    out.append((grad * g).sum_to_size(t.shape))
                else:
                    out.append(None)
            return tuple(out)

    return _CRPSGaussian


_TORCH_FN: Any = None


def _crps_gaussian_torch(mu: Any, sigma: Any, obs: Any, *, check: bool = True) -> Any:
    import torch

    global _TORCH_FN
    if _TORCH_FN is None:
        _TORCH_FN = _make_torch_function()
    ref = next(a for a in (mu, sigma, obs) if isinstance(a, torch.Tensor))
    dtype = ref.dtype if ref.is_floating_point() else torch.get_default_dtype()
    tensors = [torch.as_tensor(a, dtype=dtype, device=ref.device) for a in (mu, sigma, obs)]
    try:
        torch.broadcast_shapes(*(t.shape for t in tensors))
    except RuntimeError as exc:
        shapes = ", ".join(str(tuple(t.shape)) for t in tensors)
        raise EnsmlError(f"crps_gaussian: mu, sigma, obs shapes {shapes} do not broadcast") from exc
    if check:
        counts = torch.stack([*(torch.isinf(t).sum() for t in tensors), (tensors[1] < 0).sum()]).tolist()
        for name, n in zip(("mu", "sigma", "obs"), counts):
            if n:  # one device sync for all four checks
                raise infinite_error("crps_gaussian", name, int(n))
        if counts[3]:
            raise EnsmlError(f"crps_gaussian: sigma must be >= 0 (min {float(tensors[1].min()):.6g})")
    return _TORCH_FN.apply(*tensors)


# --------------------------------------------------------------------------------------------
# xarray


def _crps_gaussian_xr_elementwise(
    mu: Any, sigma: Any, obs: Any, *, check: bool, func: str = "crps_gaussian"
) -> xr.DataArray:
    for name, a in zip(("mu", "sigma", "obs"), (mu, sigma, obs)):
        if not isinstance(a, xr.DataArray) and np.ndim(a):
            raise EnsmlError(f"crps_gaussian: {name} must be a DataArray or scalar when another input is one")
    args = [a if isinstance(a, xr.DataArray) else xr.DataArray(np.asarray(a)) for a in (mu, sigma, obs)]
    if check:  # in memory: with the position of the first Inf; dask: checked per chunk
        args = [check_no_inf(a, func, n) for a, n in zip(args, ("mu", "sigma", "obs"))]
        smin = args[1].min()
        if not args[1].chunks and float(smin) < 0:
            raise EnsmlError(f"{func}: sigma must be >= 0 (min {float(smin):.6g})")
    return xr.apply_ufunc(
        _crps_gaussian_numpy,
        *args,
        kwargs={"check": check},
        dask="parallelized",
        output_dtypes=[np.result_type(*(a.dtype for a in args), np.float32)],
        keep_attrs=False,
    ).rename("crps")


def crps_gaussian_xr(
    mu: xr.DataArray,
    sigma: xr.DataArray,
    obs: xr.DataArray,
    *,
    reduce_dims: str | Iterable[Hashable] | None = None,
    preserve_dims: str | Iterable[Hashable] | None = None,
    weights: xr.DataArray | None = None,
) -> xr.DataArray:
    """Gaussian CRPS of DataArrays, reduced like every ensml score.

    Elementwise :func:`crps_gaussian` (aligned by coordinate, lazy under dask), then a
    NaN-skipping (weighted) mean over ``reduce_dims`` or over all dims but ``preserve_dims``
    (see :func:`ensml.scores.reduce.reduce_score`); with neither, the mean over all dims.

    Parameters
    ----------
    mu, sigma, obs : xr.DataArray
        Gaussian mean, standard deviation (≥ 0) and observation; dims are matched by name
        and must be those of ``obs`` (``mu``/``sigma`` may have fewer). NaN in any marks a
        missing point (NaN score, left out of the mean); ±Inf is an error.
    """
    mu, sigma, obs = aligned_fields({"mu": mu, "sigma": sigma, "obs": obs}, "crps_gaussian_xr")
    score = _crps_gaussian_xr_elementwise(mu, sigma, obs, check=True, func="crps_gaussian_xr")
    kw = {"reduce_dims": reduce_dims, "preserve_dims": preserve_dims, "weights": weights}
    return reduce_score(score, **kw, func="crps_gaussian_xr")
