"""The research's per-grid-point (locally connected) affine layer.

Grönquist et al. (2021) end their stage-1 bias correction with a locally connected layer: one
weight and one bias per grid point, so that corrections which depend on *where* a point is
(a bias that varies with latitude, land and sea, orography) are learned point by point, as
per-point EMOS does, while the convolutional network before it stays translation-equivariant.

In the spatial-parallel U-Net every rank keeps the whole (small) weight tensors, identical on
every rank, and applies the slab it holds (:attr:`LocalAffine.region`); a rank's gradient is
zero outside its slab, so the sum over the spatial ranks that
:func:`ensml.models.spatial.reduce_gradients` takes is the single-process gradient, and a
checkpoint is the same whichever way it was trained.
"""

from __future__ import annotations

import torch
from torch import nn


class LocalAffine(nn.Module):
    """``y = a + b · x`` with its own ``a`` and ``b`` at every channel, level and grid point.

    Parameters
    ----------
    channels, levels, n_lat, n_lon
        Shape ``(C, D, H, W)`` of the weights; inputs are ``(B, C, D, H, W)``.

    Notes
    -----
    Starts as the identity (``a = 0``, ``b = 1``), so a network trained with it starts where one
    without it would. ``region`` (``(latitude slice, longitude slice)`` of the global grid, or
    ``None`` for all of it) selects the weights of the slab a spatial-parallel rank holds.
    """

    def __init__(self, channels: int, levels: int, n_lat: int, n_lon: int) -> None:
        super().__init__()
        shape = (channels, levels, n_lat, n_lon)
        self.a = nn.Parameter(torch.zeros(shape))
        self.b = nn.Parameter(torch.ones(shape))
        self.region: tuple[slice, slice] | None = None

    def weights(self) -> tuple[torch.Tensor, torch.Tensor]:
        """``(a, b)`` of the grid points this process holds, each ``(C, D, H, W)``."""
        if self.region is None:
            return self.a, self.b
        lat, lon = self.region
        return self.a[..., lat, lon], self.b[..., lat, lon]

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """``(B, C, D, H, W)`` → ``(B, C, D, H, W)``."""
        a, b = self.weights()
        if x.shape[1:] != a.shape:
            raise ValueError(
                f"LocalAffine holds weights of shape {tuple(a.shape)}, got input {tuple(x.shape)}"
            )
        return torch.addcmul(a, b, x)

    def extra_repr(self) -> str:
        c, d, h, w = self.a.shape
        return f"channels={c}, levels={d}, grid={h}x{w}"
