"""SSIM and multi-scale SSIM of latitude × longitude fields, as a differentiable loss.

SSIM (Wang et al. 2004) compares Gaussian-weighted local means μ, variances σ² and covariance σxy::

    SSIM = (2 μx μy + C1) / (μx² + μy² + C1) · cs,   cs = (2 σxy + C2) / (σx² + σy² + C2),

with C1 = (k1 L)², C2 = (k2 L)², L the data range. MS-SSIM (Wang et al. 2003) combines the grid
means at M scales (2 × 2 average pooling between them), per image and channel, as
``Π_{i<M} relu(cs_i)^{w_i} · relu(SSIM_M)^{w_M}`` (relu as pytorch_msssim: no NaN from a negative
mean). Grönquist et al. (2021, "Deep learning for post-processing ensemble weather forecasts")
train spread with 0.16·L1 + 0.84·(1 − MS-SSIM).

``padding="valid"`` reproduces pytorch_msssim (no padding, maps shrink by win_size − 1; an odd size
is zero-padded at its start before pooling). ``padding="same"`` is for the globe:

- statistics at every grid point, so polar rows count; longitude padded circularly if
  ``periodic_lon`` (SSIM is then invariant to rolls along longitude, MS-SSIM to rolls by multiples
  of 2^(M−1) columns, its pooling grid), latitude by reflection (no zeros, which would bias fields
  far from 0, and no invented rows beyond the poles);
- an odd size is pooled after appending a copy of its last row (periodic longitude: of its first
  column, the last one's neighbour), so no zeros enter the averages;
- scales: with the default ``scale_weights``, those whose grid still holds a window (min(H, W) ≥
  win_size, as pytorch_msssim requires of its coarsest scale; below it the window spans the field
  and reflection counts rows repeatedly): on 32 × 64 with win_size 7, 3 scales (down to 8 × 16).
  Given ``scale_weights`` go down to a 2 × 2 grid. The first n that fit are renormalised to sum 1.

SSIM is made for non-negative images: for a signed field x, SSIM(x, −x) is high (cs < 0 and the
luminance term < 0 where local means differ in sign), MS-SSIM 0 (relu). Spread σ̂ / s is positive.

``weights`` (per latitude row, e.g. cell area) weight the grid means, pooled like the fields and,
in "valid" mode, cropped like the maps. Variances use fields shifted by their grid mean, which
keeps float32 accurate far from 0 (e.g. 5.5e4).
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
import torch.nn.functional as F

#: Scale weights of Wang et al. (2003), finest first.
STANDARD_SCALE_WEIGHTS = (0.0448, 0.2856, 0.3001, 0.2363, 0.1333)


def _prepare(x, y, data_range, weights, win_size, win_sigma, k, padding, valid_bound, name):
    """Check the arguments; return the (win_size,) Gaussian window, C1, C2 and the weights."""
    if x.ndim != 4 or y.ndim != 4:
        raise ValueError(f"{name}: x and y must be (N, C, H, W), got {x.ndim}-d and {y.ndim}-d tensors")
    if x.shape != y.shape:
        raise ValueError(f"{name}: x and y shapes differ: {tuple(x.shape)} and {tuple(y.shape)}")
    if win_size < 1 or win_size % 2 == 0:
        raise ValueError(f"{name}: win_size must be odd and positive, got {win_size}")
    if padding not in ("same", "valid"):
        raise ValueError(f"{name}: padding must be 'same' or 'valid', got {padding!r}")
    if not float(data_range) > 0:
        raise ValueError(f"{name}: data_range must be positive, got {float(data_range)}")
    if weights is not None and tuple(weights.shape) != (x.shape[-2],):
        raise ValueError(f"{name}: weights must be (H,) = ({x.shape[-2]},), got {tuple(weights.shape)}")
    if padding == "valid" and min(x.shape[-2:]) <= valid_bound:
        raise ValueError(f"{name}: 'valid' needs min(H, W) > {valid_bound}, got {tuple(x.shape[-2:])}")
    c = torch.arange(win_size, dtype=torch.float64) - win_size // 2
    g = torch.exp(-(c**2) / (2 * win_sigma**2))
    c1, c2 = (x.new_tensor(k) * torch.as_tensor(data_range, dtype=x.dtype, device=x.device)) ** 2
    return (g / g.sum()).to(x), c1, c2, None if weights is None else weights.to(x)


def _blur(z: torch.Tensor, g: torch.Tensor, padding: str, periodic_lon: bool) -> torch.Tensor:
    """Separable Gaussian filter of (N, K, H, W) ``z`` with 1-D window ``g``, per channel."""
    k, p = z.shape[1], (len(g) - 1) // 2
    if padding == "same":  # pad by indexing: circular or reflected, even if p exceeds the axis length
        for dim, periodic in ((-2, False), (-1, periodic_lon)):
            n, i = z.shape[dim], torch.arange(-p, z.shape[dim] + p, device=z.device)
            i = i % n if periodic else i % max(2 * n - 2, 1)  # a reflection has period 2n − 2
            z = z.index_select(dim, i if periodic else torch.minimum(i, 2 * n - 2 - i))
    z = F.conv2d(z, g.view(1, 1, -1, 1).repeat(k, 1, 1, 1), groups=k)
    return F.conv2d(z, g.view(1, 1, 1, -1).repeat(k, 1, 1, 1), groups=k)


def _maps(x, y, c1, c2, g, padding, periodic_lon) -> tuple[torch.Tensor, torch.Tensor]:
    """SSIM and cs maps, each (N, C, H', W'); shifting by the grid mean keeps σ² accurate."""
    a, b = x.mean((-2, -1), keepdim=True).detach(), y.mean((-2, -1), keepdim=True).detach()
    xc, yc = x - a, y - b
    stats = _blur(torch.cat([xc, yc, xc * xc, yc * yc, xc * yc], 1), g, padding, periodic_lon)
    mx, my, xx, yy, xy = stats.split(x.shape[1], 1)
    cs = (2 * (xy - mx * my) + c2) / ((xx - mx * mx) + (yy - my * my) + c2)
    mx, my = mx + a, my + b
    return (2 * mx * my + c1) / (mx * mx + my * my + c1) * cs, cs


def _mean(m: torch.Tensor, w: torch.Tensor | None) -> torch.Tensor:
    """(N, C) mean of the (N, C, H', W') map ``m``, rows weighted by ``w`` (cropped centrally to H')."""
    if w is None:
        return m.mean((-2, -1))
    w = w[(len(w) - m.shape[-2]) // 2 :][: m.shape[-2]]
    return (m.mean(-1) * w).sum(-1) / w.sum()


def _halve(z: torch.Tensor, dim: int, how: str) -> torch.Tensor:
    """Mean of pairs along negative ``dim``; an odd length gets one more: "zero" first, "edge"/"wrap" last."""
    n = z.shape[dim]
    if n % 2 and how == "zero":
        z = torch.cat([torch.zeros_like(z.narrow(dim, 0, 1)), z], dim)
    elif n % 2:
        z = torch.cat([z, z.narrow(dim, 0 if how == "wrap" else n - 1, 1)], dim)
    return z.unflatten(dim, (-1, 2)).mean(dim)


def ssim(
    x: torch.Tensor,
    y: torch.Tensor,
    data_range: float | torch.Tensor,
    weights: torch.Tensor | None = None,
    win_size: int = 7,
    win_sigma: float = 1.5,
    k: tuple[float, float] = (0.01, 0.03),
    periodic_lon: bool = True,
    padding: str = "same",
) -> torch.Tensor:
    """Mean SSIM of ``x`` against ``y`` (formula and padding: module docstring).

    Parameters
    ----------
    x, y
        (N, C, H, W) fields, H latitude (north → south), W longitude; float32 or float64.
    data_range, k
        L > 0 (units of x; float or 0-d tensor) and (k1, k2) in C1 = (k1 L)², C2 = (k2 L)².
    weights
        (H,) weights of the latitude rows in the grid mean (e.g. cell area); None: plain mean.
    win_size, win_sigma
        Length (odd) and standard deviation of the separable Gaussian window, in grid cells.
    periodic_lon
        Pad longitude circularly ("same" only); otherwise by reflection.
    padding
        "same": a map value at every grid point; "valid": none, as pytorch_msssim (H, W ≥ win_size).

    Returns
    -------
    torch.Tensor
        0-d: the SSIM map's (weighted) grid mean, averaged over N and C; 1 for x = y; differentiable.
    """
    g, c1, c2, w = _prepare(x, y, data_range, weights, win_size, win_sigma, k, padding, win_size - 1, "ssim")
    return _mean(_maps(x, y, c1, c2, g, padding, periodic_lon)[0], w).mean()


def ms_ssim(
    x: torch.Tensor,
    y: torch.Tensor,
    data_range: float | torch.Tensor,
    weights: torch.Tensor | None = None,
    win_size: int = 7,
    win_sigma: float = 1.5,
    scale_weights: Sequence[float] | None = None,
    k: tuple[float, float] = (0.01, 0.03),
    periodic_lon: bool = True,
    padding: str = "same",
) -> torch.Tensor:
    """Mean multi-scale SSIM of ``x`` against ``y`` (Wang et al. 2003; module docstring).

    Parameters
    ----------
    x, y, data_range, weights, win_size, win_sigma, k, periodic_lon, padding
        As :func:`ssim`; ``weights`` (H,) are pooled like the fields at coarser scales.
    scale_weights
        Exponents of the M scales, finest first; None: :data:`STANDARD_SCALE_WEIGHTS`. "same": scales
        that do not fit (module docstring) are dropped, the others renormalised to sum 1. "valid": all
        M are used and min(H, W) must exceed (win_size − 1)·2^(M−1) (pytorch_msssim's bound for M = 5).

    Returns
    -------
    torch.Tensor
        0-d: MS-SSIM per image and channel, averaged over N and C; 1 for x = y; differentiable.
    """
    sw = list(STANDARD_SCALE_WEIGHTS if scale_weights is None else scale_weights)
    if not sw:
        raise ValueError("ms_ssim: scale_weights must not be empty")
    bound = (win_size - 1) * 2 ** (len(sw) - 1)
    g, c1, c2, w = _prepare(x, y, data_range, weights, win_size, win_sigma, k, padding, bound, "ms_ssim")
    n, (h, w_) = len(sw), x.shape[-2:]
    if padding == "same":  # count the scales whose grid is at least min_side on both sides
        n, min_side = 1, win_size if scale_weights is None else 2
        while n < len(sw) and min(h := (h + 1) // 2, w_ := (w_ + 1) // 2) >= min_side:
            n += 1
    exps = x.new_tensor(sw if n == len(sw) else [s / sum(sw[:n]) for s in sw[:n]])
    lat = "zero" if padding == "valid" else "edge"
    lon = "zero" if padding == "valid" else "wrap" if periodic_lon else "edge"
    terms = []
    for i in range(n):
        s, cs = _maps(x, y, c1, c2, g, padding, periodic_lon)
        terms.append(_mean(s if i == n - 1 else cs, w))
        if i < n - 1:
            x, y = (_halve(_halve(z, -2, lat), -1, lon) for z in (x, y))
            w = None if w is None else _halve(w, -1, lat)
    return (torch.stack(terms).relu() ** exps[:, None, None]).prod(0).mean()
