"""LightningModules: spread estimation and mixed prediction + post-processing.

Both tasks share the input pipeline: the K-member subset mean (standardised by the training
climatology) and spread (scaled by the mean training spread) at every input lead time, stacked
as channels, with pressure level as the third convolution axis. Normalisation statistics live in
buffers, so they travel with the checkpoint.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import lightning as L
import numpy as np
import torch
import torch.nn.functional as F

from ensml.errors import EnsmlError
from ensml.eval.gaussian import crps_gaussian
from ensml.eval.weights import latitude_weights
from ensml.models import build_network, is_sequence_arch
from ensml.train.checkpoints import FollowResumedEpoch

STAT_KEYS = ("clim_mean", "anom_std", "spread_scale")
# Hyperparameters a checkpoint must share with the data it is applied to.
DATA_KEYS = ("variables", "levels", "input_lead_hours", "target_lead_hours", "k")
# Checkpoint entry holding the training grid (latitude, longitude) and ensemble size.
GRID_KEY = "ensml_grid"


def inverse_softplus(x: torch.Tensor) -> torch.Tensor:
    """``y`` with ``softplus(y) = x`` (x clamped to ≥ 1e-4 for stability)."""
    x = x.clamp_min(1e-4)
    return x + torch.log(-torch.expm1(-x))


class EnsembleTask(L.LightningModule):
    """Base task: features, normalisation buffers, area-weighted losses, optimiser.

    Parameters
    ----------
    variables
        Variables the model is built for (linked from ``data.variables`` by the CLI).
    levels
        Pressure levels (hPa) the model is built for (linked from ``data.levels``).
    input_lead_hours
        Lead times (h) fed to the model (linked from ``data.input_lead_hours``).
    target_lead_hours
        Lead time (h) predicted (linked from ``data.target_lead_hours``).
    k
        Members in the input subset (linked from ``data.k``).
    arch
        Network name: ``unet3d`` (lead times stacked as channels), or a temporal network that
        takes lead time as a dimension, ``unet3d_time`` or ``convgru`` (see
        :mod:`ensml.models.temporal`; they need at least two input lead times).
    width
        Channels of the network's first level, doubled at each pooling level.
    depth
        Number of 2 × 2 lat/lon pooling steps.
    kernel_size
        Odd convolution kernel size.
    norm_groups
        GroupNorm groups after each convolution (0: none).
    arch_options
        Further keyword arguments of the network (e.g. ``gru_kernel_size`` of ``convgru``).
    lr
        Peak AdamW learning rate; it follows a cosine schedule over the run.
    weight_decay
        AdamW weight decay.
    """

    n_outputs_per_var = 1
    uses_analysis = False  # the analysis at initialisation is an input
    trains_on_analysis = False  # the verifying analysis is the training target

    def __init__(
        self,
        variables: list[str] = ("z", "t"),  # type: ignore[assignment]
        levels: list[float] = (500, 850),  # type: ignore[assignment]
        input_lead_hours: list[int] = (0, 24, 48),  # type: ignore[assignment]
        target_lead_hours: int = 48,
        k: int = 5,
        arch: str = "unet3d",
        width: int = 16,
        depth: int = 3,
        kernel_size: int = 3,
        norm_groups: int = 0,
        arch_options: dict[str, Any] | None = None,
        lr: float = 2e-3,
        weight_decay: float = 1e-5,
    ) -> None:
        super().__init__()
        self.save_hyperparameters()
        n_var, n_lead = len(variables), len(input_lead_hours)
        extra: dict[str, Any] = {}
        self.sequence_input = is_sequence_arch(arch)
        if self.sequence_input:
            # Temporal networks see lead time as a dimension: channels are per lead.
            if n_lead < 2:
                raise EnsmlError(
                    f"model arch {arch!r} is temporal and needs at least 2 input lead times, "
                    f"got input_lead_hours={list(input_lead_hours)}"
                )
            in_channels = 2 * n_var + (n_var if self.uses_analysis else 0)
            extra = dict(n_leads=n_lead, n_levels=len(levels), target_index=self.target_index)
        else:
            in_channels = 2 * n_var * n_lead + (n_var if self.uses_analysis else 0)
        self.net = build_network(
            arch,
            in_channels,
            self.n_outputs_per_var * n_var,
            width=width,
            depth=depth,
            kernel_size=kernel_size,
            norm_groups=norm_groups,
            **extra,
            **(arch_options or {}),
        )
        for key in STAT_KEYS:
            self.register_buffer(key, torch.empty(0))
        self.register_buffer("lat_weights", torch.empty(0))
        # (V,) 1 for a surface variable (no level dimension; see ensml.data.surface), else 0.
        self.register_buffer("surface", torch.zeros(n_var))

    @property
    def target_index(self) -> int:
        """Position of the target lead among the input leads (validated by the datamodule)."""
        leads = list(self.hparams.input_lead_hours)
        if self.hparams.target_lead_hours not in leads:
            raise EnsmlError(f"target_lead_hours={self.hparams.target_lead_hours} is not among {leads}")
        return leads.index(self.hparams.target_lead_hours)

    # -- statistics ---------------------------------------------------------------------------
    def set_stats(self, stats: dict[str, np.ndarray], latitude: np.ndarray) -> None:
        """Install the training-split statistics and the latitude grid's area weights."""
        for key in STAT_KEYS:
            setattr(self, key, torch.as_tensor(stats[key], dtype=torch.float32, device=self.device))
        if "surface" in stats:
            self.surface = torch.as_tensor(stats["surface"], dtype=torch.float32, device=self.device)
        w = latitude_weights(np.asarray(latitude)).values
        self.lat_weights = torch.as_tensor(w, dtype=torch.float32, device=self.device)

    def _load_from_state_dict(self, state_dict, prefix, *args, **kwargs):
        # Statistic buffers start empty: take the checkpoint's shapes.
        for key in (*STAT_KEYS, "lat_weights"):
            if prefix + key in state_dict:
                setattr(self, key, torch.empty_like(state_dict[prefix + key]))
        # Checkpoints from before surface variables: every variable has levels.
        state_dict.setdefault(prefix + "surface", torch.zeros_like(self.surface))
        super()._load_from_state_dict(state_dict, prefix, *args, **kwargs)

    def setup(self, stage: str) -> None:
        dm = getattr(self.trainer, "datamodule", None)
        if self.clim_mean.numel() == 0 and dm is not None:
            self.set_stats(dm.stats, dm.coords["latitude"])
        if (self.uses_analysis or self.trains_on_analysis) and dm is not None and dm.hparams.analysis is None:
            raise EnsmlError(f"{type(self).__name__} needs the verifying analysis: set data.analysis")

    def configure_callbacks(self) -> list[L.Callback]:
        # Part of training itself (also without the CLI): a resumed run continues in its epoch.
        return [FollowResumedEpoch()]

    def on_save_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        # The grid the per-point statistics belong to, and the ensemble size trained on, so that a
        # checkpoint applied to new forecasts (``ensml postprocess``) can refuse another grid.
        dm = getattr(self._trainer, "datamodule", None) if self._trainer is not None else None
        if dm is not None and dm.coords:
            checkpoint[GRID_KEY] = {
                "latitude": np.asarray(dm.coords["latitude"], dtype=np.float64).tolist(),
                "longitude": np.asarray(dm.coords["longitude"], dtype=np.float64).tolist(),
                "members": int(dm.spec.members),
            }

    def on_load_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        check_compatible(checkpoint.get("hyper_parameters", {}), self.hparams, "checkpoint")

    # -- features -----------------------------------------------------------------------------
    def features(self, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        """Network input from a batch (see :class:`EnsembleSamples`).

        (B, C, D, H, W) with lead times stacked as channels; for a temporal network
        (``sequence_input``) (B, L, C', D, H, W) with the analysis at initialisation, if used,
        repeated at every lead.
        """
        mean_k, std_k = batch["mean_k"], batch["std_k"]  # (B, V, L, D, H, W)
        anom = (mean_k - self.clim_mean[:, None]) / self.anom_std[:, None, :, None, None]
        spread = std_k / self.spread_scale[:, None, :, None, None]
        analysis = None
        if self.uses_analysis:
            analysis = (batch["analysis_init"] - self.clim_mean) / self.anom_std[..., None, None]
        if getattr(self, "sequence_input", False):
            parts = [anom, spread]
            if analysis is not None:
                parts.append(analysis[:, :, None].expand_as(anom))
            return torch.cat(parts, dim=1).transpose(1, 2)
        parts = [anom.flatten(1, 2), spread.flatten(1, 2)]
        if analysis is not None:
            parts.append(analysis)
        return torch.cat(parts, dim=1)

    def scale(self) -> torch.Tensor:
        """Per variable/level spread scale, broadcastable to (B, V, D, H, W)."""
        return self.spread_scale[None, :, :, None, None]

    def prior_std(self, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        """The K-member std at the target lead (B, V, D, H, W): the starting guess for σ."""
        return batch["std_k"][:, :, self.target_index]

    def tie_surface(self, out: torch.Tensor) -> torch.Tensor:
        """Network output (B, n·V, D, H, W) with surface variables' channels made level-constant.

        Channel ``c`` belongs to variable ``c % V``; a surface variable's channels are replaced
        by their mean over the level axis, so its prediction is one field.
        """
        if not bool(self.surface.any()):
            return out
        tied = self.surface.repeat(out.shape[1] // self.surface.numel()).bool()[:, None, None, None]
        return torch.where(tied, out.mean(dim=2, keepdim=True).expand_as(out), out)

    # Reduction of area_mean; spatial-parallel training sets it to a mean over all shards.
    reduce_mean: Callable[[torch.Tensor], torch.Tensor] | None = None

    def area_mean(self, x: torch.Tensor) -> torch.Tensor:
        """Latitude-area-weighted mean of (B, V, D, H, W) over everything."""
        weighted = x * self.lat_weights[:, None]
        return weighted.mean() if self.reduce_mean is None else self.reduce_mean(weighted)

    # -- loop ---------------------------------------------------------------------------------
    def training_step(self, batch: dict[str, torch.Tensor], batch_idx: int) -> torch.Tensor:
        loss = self.loss(batch)
        self.log("train/loss", loss, prog_bar=True, batch_size=batch["mean_k"].shape[0])
        return loss

    def validation_step(self, batch: dict[str, torch.Tensor], batch_idx: int) -> None:
        self._evaluate(batch, "val")

    def test_step(self, batch: dict[str, torch.Tensor], batch_idx: int) -> None:
        self._evaluate(batch, "test")

    def _evaluate(self, batch: dict[str, torch.Tensor], stage: str) -> None:
        n = batch["mean_k"].shape[0]
        self.log(f"{stage}/loss", self.loss(batch), prog_bar=True, batch_size=n)
        for name, per_var in self.scores(batch).items():
            for i, var in enumerate(self.hparams.variables):
                levels = [None] if self.surface[i] else self.hparams.levels
                for j, lev in enumerate(levels):
                    self.log(
                        f"{stage}/{name}_{var}{'' if lev is None else f'{lev:g}'}",
                        self.area_mean(per_var[:, i, j, None, None]),
                        batch_size=n,
                    )

    def configure_optimizers(self) -> Any:
        hp = self.hparams
        opt = torch.optim.AdamW(self.parameters(), lr=hp.lr, weight_decay=hp.weight_decay)
        total = max(1, int(self.trainer.estimated_stepping_batches)) if self._trainer is not None else 1000
        warmup = max(1, total // 20)

        def factor(step: int) -> float:
            # Linear warm-up, then cosine decay to 1% of lr. Recomputed from the step count, so a
            # resumed run with more epochs simply stretches the schedule.
            if step < warmup:
                return (step + 1) / warmup
            progress = min(1.0, (step - warmup) / max(1, total - warmup))
            return 0.01 + 0.99 * 0.5 * (1.0 + math.cos(math.pi * progress))

        sched = torch.optim.lr_scheduler.LambdaLR(opt, factor)
        return {"optimizer": opt, "lr_scheduler": {"scheduler": sched, "interval": "step"}}

    def loss(self, batch: dict[str, torch.Tensor]) -> torch.Tensor:  # pragma: no cover - abstract
        raise NotImplementedError

    def scores(self, batch: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:  # pragma: no cover
        raise NotImplementedError


class SpreadTask(EnsembleTask):
    """Predict the M-member spread (std, ddof 0) at the target lead from K members.

    Output: σ̂ = s · softplus(f(x) + softplus⁻¹(s_K / s)), with s the mean training spread of the
    variable/level and s_K the K-member std, so an untrained network starts at the K-member std.
    Loss: area-weighted mean squared error of σ̂ / s against σ_M / s (so every variable and level
    counts alike, and the loss matches the RMSE reported by ``ensml evaluate``).
    """

    def forward(self, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        out = self.tie_surface(self.net(self.features(batch)))
        return self.scale() * F.softplus(out + inverse_softplus(self.prior_std(batch) / self.scale()))

    def loss(self, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        return self.area_mean(((self(batch) - batch["std_m"]) / self.scale()) ** 2)

    def scores(self, batch: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        return {"spread_sqerr": (self(batch) - batch["std_m"]) ** 2}

    def predict_step(self, batch: dict[str, torch.Tensor], batch_idx: int) -> dict[str, torch.Tensor]:
        return {"index": batch["index"], "std": self(batch)}


class MixedTask(EnsembleTask):
    """Predict a Gaussian N(μ, σ²) of the verifying analysis at the target lead from K members.

    μ = m_K + s · f_μ(x), σ = s · softplus(f_σ(x) + softplus⁻¹(s_K / s)), with m_K, s_K the subset
    mean and std and s the mean training spread. The inputs also hold the analysis at
    initialisation unless ``use_analysis`` is false. Loss: area-weighted closed-form Gaussian
    CRPS of the scaled quantities.
    """

    n_outputs_per_var = 2
    trains_on_analysis = True

    def __init__(self, *args: Any, use_analysis: bool = True, **kwargs: Any) -> None:
        """Build the task; arguments as :class:`EnsembleTask`'s, plus:

        Parameters
        ----------
        use_analysis
            Feed the analysis at initialisation to the network (the research's stage-1 input).
            Without it the model needs only the forecast, at a cost in skill that the README
            measures on the embedded data.
        """
        super().__init__(*args, **kwargs)

    @property
    def uses_analysis(self) -> bool:
        return bool(self.hparams.get("use_analysis", True))

    def forward(self, batch: dict[str, torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
        out = self.tie_surface(self.net(self.features(batch)))
        n_var = len(self.hparams.variables)
        mu = batch["mean_k"][:, :, self.target_index] + self.scale() * out[:, :n_var]
        sigma = self.scale() * F.softplus(
            out[:, n_var:] + inverse_softplus(self.prior_std(batch) / self.scale())
        )
        return mu, sigma

    def loss(self, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        mu, sigma = self(batch)
        s = self.scale()
        return self.area_mean(crps_gaussian(mu / s, sigma / s, batch["obs"] / s, check=False))

    def scores(self, batch: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        mu, sigma = self(batch)
        return {"crps": crps_gaussian(mu, sigma, batch["obs"], check=False)}

    def predict_step(self, batch: dict[str, torch.Tensor], batch_idx: int) -> dict[str, torch.Tensor]:
        mu, sigma = self(batch)
        return {"index": batch["index"], "mean": mu, "std": sigma}


def check_compatible(saved: dict[str, Any], current: dict[str, Any], what: str) -> None:
    """Raise if a checkpoint was trained for other variables, levels, leads or subset size."""

    def norm(v: Any) -> Any:
        if isinstance(v, list | tuple):
            return [norm(x) for x in v]
        return float(v) if isinstance(v, int | float) else str(v)

    for key in DATA_KEYS:
        if key in saved and key in current:
            a, b = saved[key], current[key]
            if norm(a) != norm(b):
                raise EnsmlError(f"{what} was trained with {key}={a!s} but the data has {key}={b!s}")
