"""Temporal networks: lead time is a dimension of the input, not a stack of channels.

Both take ``(batch, lead, channel, level, latitude, longitude)`` tensors (the task's features
with ``sequence_input``) and return ``(batch, out_channel, level, latitude, longitude)`` at the
target lead. They declare ``sequence_input = True``, which is how :class:`EnsembleTask` knows to
feed them a sequence.

* :class:`ConvGRUUNet` (``convgru``): a U-Net whose encoder runs on every lead time with shared
  weights; at each resolution a convolutional GRU (Ballas et al. 2016; Shi et al. 2015 for the
  ConvLSTM form) reads the lead sequence in order, and its final state is that resolution's skip
  connection into an ordinary U-Net decoder. The recurrence sees how the members' anomalies and
  spread evolve with lead, with any lead spacing.
* :class:`TimeUNet` (``unet3d_time``): the 3D U-Net with lead time as its depth axis and
  variables × levels as channels; the output at the target lead is kept.
"""

from __future__ import annotations

import torch
from torch import nn

from ensml.models.layers import SphereConv3d
from ensml.models.memory import run_segment
from ensml.models.unet3d import UNet3d, build_layers, pad_to_multiple, up_level


class ConvGRUCell(nn.Module):
    """Convolutional GRU on (B, C, D, H, W) with sphere padding.

    ``z, r = σ(W_zr * [x, h])``, ``ĥ = tanh(W_h * [x, r ⊙ h])``, ``h' = (1 − z) ⊙ h + z ⊙ ĥ``.
    """

    def __init__(self, channels: int, kernel_size: int = 3, periodic_lon: bool = True) -> None:
        super().__init__()
        self.gates = SphereConv3d(2 * channels, 2 * channels, kernel_size, periodic_lon)
        self.candidate = SphereConv3d(2 * channels, channels, kernel_size, periodic_lon)

    def forward(self, x: torch.Tensor, h: torch.Tensor | None) -> torch.Tensor:
        if h is None:
            h = torch.zeros_like(x)
        z, r = torch.sigmoid(self.gates(torch.cat([x, h], dim=1))).chunk(2, dim=1)
        cand = torch.tanh(self.candidate(torch.cat([x, r * h], dim=1)))
        return (1 - z) * h + z * cand


class ConvGRUUNet(nn.Module):
    """U-Net with a shared per-lead encoder and a ConvGRU over lead times at every resolution.

    Parameters
    ----------
    in_channels
        Channels per lead time (C of the (B, L, C, D, H, W) input).
    out_channels
        Output channels.
    width, depth, kernel_size, periodic_lon, norm_groups
        As :class:`~ensml.models.UNet3d`.
    gru_kernel_size
        Kernel of the GRU gates (1 makes the recurrence pointwise and cheap; spatial context
        then comes from the encoder convolutions alone).
    n_leads, n_levels, target_index
        Accepted for a uniform constructor: the recurrence works with any number of leads and
        returns its state after the last one, which has read every lead up to the target.
    """

    sequence_input = True

    def __init__(
        self,
        in_channels: int,
        out_channels: int,
        width: int = 16,
        depth: int = 3,
        kernel_size: int = 3,
        periodic_lon: bool = True,
        norm_groups: int = 0,
        gru_kernel_size: int = 3,
        n_leads: int | None = None,
        n_levels: int | None = None,
        target_index: int = -1,
    ) -> None:
        super().__init__()
        self.grus = nn.ModuleList()  # one per resolution, built beside its encoder

        def gru(w: int) -> None:
            self.grus.append(ConvGRUCell(w, gru_kernel_size, periodic_lon))

        build_layers(
            self, in_channels, out_channels, width, depth, kernel_size, periodic_lon, norm_groups, gru
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """(B, L, C, D, H, W) → (B, out_channels, D, H, W): the state after the last lead."""
        b = x.shape[0]
        n_lat, n_lon = x.shape[-2:]
        x = pad_to_multiple(x, self.depth, self.periodic_lon)
        x = x.flatten(0, 1)  # leads share the encoder weights: fold them into the batch
        states = []
        for i in range(len(self.encoders)):
            x, h = run_segment(self, i, self._down, i, x, b)
            states.append(h)
        y = states.pop()
        for j in range(len(self.decoders)):
            y = run_segment(self, self.depth - 1 - j, up_level, self, j, y, states.pop())
        return self.head(y)[..., :n_lat, :n_lon]

    def _down(self, i: int, x: torch.Tensor, b: int) -> tuple[torch.Tensor, torch.Tensor]:
        """Level ``i`` down: pool (below the top), the shared encoder on every lead, the GRU over leads."""
        x = self.encoders[i](self.pool(x) if i else x)
        seq = x.unflatten(0, (b, x.shape[0] // b))
        h = None
        for t in range(seq.shape[1]):
            h = self.grus[i](seq[:, t], h)
        return x, h


class TimeUNet(nn.Module):
    """3D U-Net over (lead, latitude, longitude), variables × levels as channels.

    Parameters
    ----------
    in_channels
        Channels per lead time and level (C of the (B, L, C, D, H, W) input).
    out_channels
        Output channels per level.
    n_levels
        Number of pressure levels D (fixed by the data).
    n_leads
        Number of input lead times (the convolution's depth axis).
    target_index
        Lead whose output is returned (default: the last).
    width, depth, kernel_size, periodic_lon, norm_groups
        As :class:`~ensml.models.UNet3d`.
    """

    sequence_input = True

    def __init__(
        self,
        in_channels: int,
        out_channels: int,
        n_levels: int,
        n_leads: int | None = None,
        target_index: int = -1,
        width: int = 16,
        depth: int = 3,
        kernel_size: int = 3,
        periodic_lon: bool = True,
        norm_groups: int = 0,
    ) -> None:
        super().__init__()
        self.n_levels, self.out_per_level, self.target_index = n_levels, out_channels, target_index
        self.unet = UNet3d(
            in_channels * n_levels,
            out_channels * n_levels,
            width=width,
            depth=depth,
            kernel_size=kernel_size,
            periodic_lon=periodic_lon,
            norm_groups=norm_groups,
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """(B, L, C, D, H, W) → (B, out_channels, D, H, W) at ``target_index``."""
        b, n_lead, c, d, h, w = x.shape
        if d != self.n_levels:
            raise ValueError(f"TimeUNet built for {self.n_levels} levels, got {d}")
        y = self.unet(x.permute(0, 2, 3, 1, 4, 5).reshape(b, c * d, n_lead, h, w))
        y = y[:, :, self.target_index]  # (B, out·D, H, W)
        return y.unflatten(1, (self.out_per_level, d))
