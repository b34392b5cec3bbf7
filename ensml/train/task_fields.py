"""The fields of :class:`~ensml.train.task_base.EnsembleTask`: its network input and outputs.

:class:`TaskFields` holds the methods that turn a batch into the network's input channels
(:meth:`~TaskFields.features`) and map the network's output fields: the target leads, the
spread scale and climatology of each output field, surface variables tied over levels, the
per-point affine layer and the area-weighted mean.
:meth:`~ensml.train.task_base.EnsembleTask.network`, on the stack while the network runs, stays
in the training spine's module (docs/architecture.md). It is a mixin of
:class:`~ensml.train.task_base.EnsembleTask`, whose buffers (statistics, static fields, latitude
weights) and hyperparameters it reads.
"""

from __future__ import annotations

from collections.abc import Callable

import torch


class TaskFields:
    """Network input and output fields of a task (a mixin of ``EnsembleTask``; see the module)."""

    # -- features -----------------------------------------------------------------------------
    def features(self, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        """Network input from a batch (see :class:`EnsembleSamples`).

        (B, C, D, H, W) with lead times stacked as channels; for a temporal network
        (``sequence_input``) (B, L, C', D, H, W) with the analysis at initialisation and the
        static channels, if used, repeated at every lead.
        """
        mean_k, std_k = batch["mean_k"], batch["std_k"]  # (B, V, L, D, H, W)
        anom = (mean_k - self.clim_mean[:, None]) / self.anom_std[:, None, :, None, None]
        spread = std_k / self.spread_scale[:, None, :, None, None]
        per_init = []  # (B, C, D, H, W) channels that do not depend on lead
        if self.uses_analysis:
            per_init.append((batch["analysis_init"] - self.clim_mean) / self.anom_std[..., None, None])
        if self.static.numel():
            b, d = mean_k.shape[0], mean_k.shape[3]
            per_init.append(self.static[None, :, None].expand(b, -1, d, -1, -1))
        if getattr(self, "sequence_input", False):
            parts = [anom, spread] + [
                x[:, :, None].expand(-1, -1, anom.shape[2], -1, -1, -1) for x in per_init
            ]
            return torch.cat(parts, dim=1).transpose(1, 2)
        return torch.cat([anom.flatten(1, 2), spread.flatten(1, 2), *per_init], dim=1)

    def at_targets(self, x: torch.Tensor) -> torch.Tensor:
        """(B, V, L, D, H, W) input-lead fields → (B, F, D, H, W) at the target leads (lead-major)."""
        return x[:, :, self.target_indices].transpose(1, 2).flatten(1, 2)

    def scale(self) -> torch.Tensor:
        """Spread scale of each output field and level, broadcastable to (B, F, D, H, W)."""
        return self.target_scale.flatten(0, 1)[None, :, :, None, None]

    def prior_std(self, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        """The K-member std at the target leads (B, F, D, H, W): the starting guess for σ."""
        return self.at_targets(batch["std_k"])

    def field_clim(self) -> tuple[torch.Tensor, torch.Tensor]:
        """Climatology and anomaly std of each output field, broadcastable to (B, F, D, H, W)."""
        t = len(self.target_leads)
        mean = self.clim_mean.repeat(t, 1, 1, 1)[None]
        std = self.anom_std.repeat(t, 1)[None, :, :, None, None]
        return mean, std

    def tie_surface(self, out: torch.Tensor) -> torch.Tensor:
        """Network output (B, n·F, D, H, W) with surface variables' channels made level-constant.

        Channel ``c`` belongs to variable ``c % V``; a surface variable's channels are replaced
        by their mean over the level axis, so its prediction is one field.
        """
        if not bool(self.surface.any()):
            return out
        tied = self.surface.repeat(out.shape[1] // self.surface.numel()).bool()[:, None, None, None]
        return torch.where(tied, out.mean(dim=2, keepdim=True).expand_as(out), out)

    def affine(self, x: torch.Tensor, part: int) -> torch.Tensor:
        """The per-point affine layer's part ``part`` (0, 1, …: F channels each) applied to ``x``;
        ``x`` as it is without that layer."""
        if self.local is None:
            return x
        f = self.n_fields
        a, b = self.local.weights()
        return torch.addcmul(a[part * f : (part + 1) * f], b[part * f : (part + 1) * f], x)

    # Reduction of area_mean; spatial-parallel training sets it to a mean over all shards.
    reduce_mean: Callable[[torch.Tensor], torch.Tensor] | None = None

    def area_mean(self, x: torch.Tensor) -> torch.Tensor:
        """Latitude-area-weighted mean of (B, F, D, H, W) over everything."""
        weighted = x * self.lat_weights[:, None]
        return weighted.mean() if self.reduce_mean is None else self.reduce_mean(weighted)


__all__ = ["TaskFields"]
