"""The base LightningModule of ensml's tasks: inputs, normalisation, outputs per target lead, loop.

Inputs: the K-member subset mean (standardised by the training climatology) and spread (scaled
by the mean training spread) at every input lead time, stacked as channels, with pressure level
as the third convolution axis; optionally the analysis at initialisation, the location
(:func:`ensml.data.static.location_channels`) and static fields of the surface. Normalisation
statistics and static fields live in buffers, so they travel with the checkpoint.

Outputs: one field per variable and **target lead** (``target_leads``, one lead or
several), laid out lead-major as ``F = T × V`` channels ``(B, F, D, H, W)`` (field ``f`` is
variable ``f % V`` at target lead ``f // V``); with one target lead this is the ``(B, V, D, H,
W)`` of a single-lead model. Optionally a per-grid-point affine layer
(:class:`~ensml.models.local.LocalAffine`) follows the network.

Running: the task's :class:`~ensml.models.memory.MemoryPolicy` (what a step keeps for backward)
and :class:`~ensml.models.speed.SpeedOptions` (layout, compilation, precision) apply to every
network it builds; :func:`ensml.train.tasks.network` runs a network as they say. Neither changes
the parameters or their ``state_dict`` keys: checkpoints load whatever options trained them.

One class, one subject (a task's inputs, outputs and loop); it is longer than most modules
because that subject is.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import Any, Literal

import lightning as L
import numpy as np
import torch

from ensml.data.samples import check_leads
from ensml.data.static import N_LOCATION, location_channels
from ensml.data.weights import latitude_weights
from ensml.errors import EnsmlError
from ensml.models import build_network, is_sequence_arch
from ensml.models.local import LocalAffine
from ensml.models.memory import MemoryPolicy, apply_policy, unets
from ensml.models.speed import SpeedOptions, apply_speed
from ensml.names import DEFAULT_K
from ensml.times import lead_hours
from ensml.train import schedule
from ensml.train.checkpoints import FollowResumedEpoch
from ensml.train.hparams import DATA_KEYS, GRID_KEY, check_compatible, plain_hparams
from ensml.train.options import (
    Depth,
    KernelSize,
    NonNegativeFloat,
    NonNegativeInt,
    PositiveFloat,
    PositiveInt,
    Width,
)

STAT_KEYS = ("clim_mean", "anom_std", "spread_scale")
# Buffers whose shape comes from the data (empty until statistics are installed).
DATA_BUFFERS = (*STAT_KEYS, "target_scale", "static", "lat_weights")


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
    input_leads
        Lead times fed to the model, hours or durations (linked from ``data.input_leads``).
    target_leads
        Lead time, or list of lead times, predicted (linked from ``data.target_leads``).
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
        Peak AdamW learning rate; it follows a warm-up and cosine schedule over the run
        (:mod:`ensml.train.schedule`).
    weight_decay
        AdamW weight decay.
    location_inputs
        Feed sin/cos of latitude and longitude as 4 more channels, so the network can learn
        errors that depend on where a point is (:mod:`ensml.data.static`).
    static_variables
        Static fields fed as channels (linked from ``data.static_variables``; read from
        ``data.static``).
    local_affine
        End with a per-grid-point affine layer (:class:`~ensml.models.local.LocalAffine`), the
        research's locally connected layer: on the standardised mean and on log σ.
    local_lr_factor
        Learning rate of the per-point weights, as a multiple of ``lr``.
    grid_shape
        ``(latitude, longitude)`` sizes of the grid, for the per-point layer (linked from the data
        by the CLI; :meth:`from_data` sets it).
    checkpointing
        Recompute activations in backward instead of keeping them (:mod:`ensml.models.memory`):
        ``none``, ``levels`` (each U-Net level) or ``all`` (each level, and within it each
        convolution). Same gradients, less memory, more time; ``ensml plan-memory`` predicts both.
    offload
        Swap the activations of ``swap_levels`` out of core: ``none``, ``host`` (pinned memory,
        from a GPU) or ``disk`` (a scratch file in the run folder, deleted as it is created).
    swap_levels
        U-Net levels (0 = full resolution) to swap; empty: all. With ``checkpointing`` the other
        levels are recomputed.
    checkpoint_levels
        With ``checkpointing``, the U-Net levels to recompute; empty: all. ``[0, 1]`` recomputes
        the two finest, which hold most of the saved bytes.
    channels_last
        Store weights and activations in the ``channels_last_3d`` layout that oneDNN's and
        cuDNN's 3D convolutions use (:class:`ensml.models.speed.SpeedOptions`).
    compile
        ``torch.compile`` the network for training steps (the first step compiles); validation
        and prediction run the plain network.
    bf16
        Train under bfloat16 autocast (hardware with bf16 only); validation and prediction run
        in float32.
    fused_norm_act
        One fused GroupNorm + GELU that saves only its input and the group statistics (less
        memory, slower in eager mode).
    """

    n_outputs_per_var = 1
    #: The validation score that early stopping and time-to-quality follow (``val/<name>``).
    quality_name = "loss"
    uses_analysis = False  # the analysis at initialisation is an input
    trains_on_analysis = False  # the verifying analysis is the training target

    def __init__(
        self,
        variables: list[str] = ("z", "t"),  # type: ignore[assignment]
        levels: list[float] = (500, 850),  # type: ignore[assignment]
        input_leads: list[int | str] = (0, 24, 48),  # type: ignore[assignment]
        target_leads: int | str | list[int | str] = 48,
        k: PositiveInt = DEFAULT_K,
        arch: str = "unet3d",
        width: Width = 16,
        depth: Depth = 3,
        kernel_size: KernelSize = 3,
        norm_groups: NonNegativeInt = 0,
        arch_options: dict[str, Any] | None = None,
        lr: PositiveFloat = 2e-3,
        weight_decay: NonNegativeFloat = 1e-5,
        location_inputs: bool = False,
        static_variables: list[str] = (),  # type: ignore[assignment]
        local_affine: bool = False,
        local_lr_factor: PositiveFloat = 10.0,
        grid_shape: tuple[int, int] | None = None,
        checkpointing: Literal["none", "levels", "all"] = "none",
        offload: Literal["none", "host", "disk"] = "none",
        swap_levels: list[NonNegativeInt] = (),  # type: ignore[assignment]
        checkpoint_levels: list[NonNegativeInt] = (),  # type: ignore[assignment]
        channels_last: bool = False,
        compile: bool = False,
        bf16: bool = False,
        fused_norm_act: bool = False,
    ) -> None:
        super().__init__()
        self.save_hyperparameters()
        plain_hparams(self)
        self.input_lead_values, self.target_lead_values = check_leads(input_leads, target_leads)
        if norm_groups and width % norm_groups:
            raise EnsmlError(
                f"model norm_groups={norm_groups} must divide width={width}: a block of width·2^i channels "
                "is normalised in norm_groups groups of equal size"
            )
        n_lead = len(self.input_lead_values)
        self.sequence_input = is_sequence_arch(arch)
        if self.sequence_input and n_lead < 2:
            raise EnsmlError(
                f"model arch {arch!r} is temporal and needs at least 2 input lead times, "
                f"got input_leads={list(input_leads)}"
            )
        self.set_running(
            MemoryPolicy(
                checkpointing, offload, tuple(swap_levels), checkpoint_levels=tuple(checkpoint_levels)
            ),
            SpeedOptions(channels_last, compile, bf16, fused_norm_act),
        )
        if local_affine and grid_shape is None:
            raise EnsmlError("local_affine needs the grid: set grid_shape (the CLI links it from the data)")
        self.net = self.build_net(self.net_channels)
        self.local = (
            LocalAffine(self.n_outputs_per_var * self.n_fields, len(levels), *grid_shape)
            if local_affine
            else None
        )
        for key in DATA_BUFFERS:
            self.register_buffer(key, torch.empty(0))
        # (V,) 1 for a surface variable (no level dimension; see ensml.data.surface), else 0.
        self.register_buffer("surface", torch.zeros(len(variables)))

    @classmethod
    def from_data(cls, data: Any, **options: Any) -> EnsembleTask:
        """A task built for ``data`` (an :class:`~ensml.data.datamodule.EnsembleDataModule`).

        Takes what the CLI links from the data config (variables, levels, input and target
        leads, k, static variables, grid) and installs the training statistics; ``options`` are
        the task's own (``arch``, ``width``, ``local_affine``, …).
        """
        hp = data.hparams
        linked = {key: hp[key] for key in DATA_KEYS if key in hp}
        task = cls(**linked, grid_shape=data.grid_shape, **options)
        task.set_stats(data.stats, data.coords["latitude"], data.coords["longitude"])
        return task

    # -- shapes -------------------------------------------------------------------------------
    @property
    def target_leads(self) -> np.ndarray:
        """The target lead times (``timedelta64[ns]``), in the order of the output fields."""
        return self.target_lead_values

    @property
    def target_indices(self) -> list[int]:
        """Positions of the target leads among the input leads."""
        return [int(np.flatnonzero(self.input_lead_values == lead)[0]) for lead in self.target_leads]

    @property
    def target_index(self) -> int:
        """Position of the last target lead among the input leads (temporal networks' output)."""
        return self.target_indices[-1]

    @property
    def n_fields(self) -> int:
        """Output fields per kind of output: target leads × variables."""
        return len(self.target_leads) * len(self.hparams.variables)

    @property
    def net_channels(self) -> int:
        """Output channels of the task's network (:attr:`net`): each output per field."""
        return self.n_fields * self.n_outputs_per_var

    @property
    def n_static(self) -> int:
        """Static channels: 4 for the location, one per static field."""
        hp = self.hparams
        return N_LOCATION * bool(hp.get("location_inputs", False)) + len(hp.get("static_variables") or ())

    def network_input_shape(self, batch_size: int, n_lat: int, n_lon: int) -> tuple[int, ...]:
        """Shape of the network's input (:meth:`features`) for a batch on an ``n_lat × n_lon`` grid.

        ``(B, C, D, H, W)``, lead times stacked as channels, or ``(B, L, C, D, H, W)`` for a
        temporal network.
        """
        hp = self.hparams
        n_var, n_lead, n_level = len(hp.variables), len(self.input_lead_values), len(hp.levels)
        extra_in = (n_var if self.uses_analysis else 0) + self.n_static  # per lead, for temporal nets
        if self.sequence_input:
            return (batch_size, n_lead, 2 * n_var + extra_in, n_level, n_lat, n_lon)
        return (batch_size, 2 * n_var * n_lead + extra_in, n_level, n_lat, n_lon)

    def build_net(self, out_channels: int) -> torch.nn.Module:
        """A network of ``hparams.arch`` from this task's input channels to ``out_channels``."""
        hp = self.hparams
        in_channels = self.network_input_shape(1, 1, 1)[-4]
        extra: dict[str, Any] = {}
        if self.sequence_input:
            n_lead = len(self.input_lead_values)
            extra = dict(n_leads=n_lead, n_levels=len(hp.levels), target_index=self.target_index)
        net = build_network(
            hp.arch,
            in_channels,
            out_channels,
            width=hp.width,
            depth=hp.depth,
            kernel_size=hp.kernel_size,
            norm_groups=hp.norm_groups,
            **extra,
            **(hp.arch_options or {}),
        )
        return self.prepare_net(net)

    # -- statistics ---------------------------------------------------------------------------
    def set_stats(
        self, stats: dict[str, np.ndarray], latitude: np.ndarray, longitude: np.ndarray | None = None
    ) -> None:
        """Install the training-split statistics, static fields and the grid's area weights.

        ``stats`` as :attr:`EnsembleDataModule.stats`; ``longitude`` is needed for location inputs.
        """

        def put(key: str, value: Any) -> None:
            setattr(self, key, torch.as_tensor(np.asarray(value), dtype=torch.float32, device=self.device))

        for key in STAT_KEYS:
            put(key, stats[key])
        v, d = len(self.hparams.variables), len(self.hparams.levels)
        target = stats.get("target_scale", np.asarray(stats["spread_scale"])[None])
        put("target_scale", np.asarray(target).reshape(-1, v, d))
        if "surface" in stats:
            put("surface", stats["surface"])
        channels = []
        if self.hparams.get("location_inputs", False):
            if longitude is None:
                raise EnsmlError("location_inputs need the longitudes of the grid")
            channels.append(location_channels(latitude, longitude))
        n_fields = len(self.hparams.get("static_variables") or ())
        if n_fields:
            static = np.asarray(stats.get("static", np.zeros((0,))))
            if static.ndim != 3 or static.shape[0] != n_fields:
                raise EnsmlError(
                    f"the model takes {n_fields} static field(s) {list(self.hparams.static_variables)}, the "
                    "data gives none: set data.static to the file that holds them"
                )
            channels.append(static)
        if channels:
            put("static", np.concatenate(channels))
        put("lat_weights", latitude_weights(np.asarray(latitude)).values)

    def _load_from_state_dict(self, state_dict, prefix, *args, **kwargs):
        # Data buffers start empty: take the checkpoint's shapes.
        for key in DATA_BUFFERS:
            if prefix + key in state_dict:
                setattr(self, key, torch.empty_like(state_dict[prefix + key]))
        # Checkpoints from before surface variables: every variable has levels; from before
        # several target leads: the target lead's spread scale is the input one.
        state_dict.setdefault(prefix + "surface", torch.zeros_like(self.surface))
        if prefix + "target_scale" not in state_dict and prefix + "spread_scale" in state_dict:
            state_dict[prefix + "target_scale"] = state_dict[prefix + "spread_scale"][None].clone()
            self.target_scale = torch.empty_like(state_dict[prefix + "target_scale"])
        super()._load_from_state_dict(state_dict, prefix, *args, **kwargs)

    def setup(self, stage: str) -> None:
        dm = getattr(self.trainer, "datamodule", None)
        if self.clim_mean.numel() == 0 and dm is not None:
            self.set_stats(dm.stats, dm.coords["latitude"], dm.coords["longitude"])
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

    # -- running: memory policy and speed options ---------------------------------------------
    def set_running(self, policy: MemoryPolicy, speed: SpeedOptions) -> None:
        """Keep ``policy`` and ``speed`` for the networks built next (refusing what cannot combine)."""
        if speed.compile and policy.offload != "none":
            raise EnsmlError("compile cannot trace swapped activations; set offload: none")
        self.memory_policy, self.speed = policy, speed
        self.compiled: dict[int, torch.nn.Module] = {}  # networks compiled for training, built lazily

    def prepare_net(self, net: torch.nn.Module) -> torch.nn.Module:
        """``net`` with the speed options' layout and fusion (in place) and the memory policy."""
        net = apply_speed(net, replace(self.speed, compile=False))
        return apply_policy(net, self.memory_policy)

    def check_device(self, device: torch.device | str) -> None:
        """Refuse options this device cannot honour (``offload: host`` on a CPU, bf16 where the
        hardware has none), before any output."""
        self.memory_policy.check_device(device)
        self.speed.check(torch.device(device).type)

    def on_fit_start(self) -> None:
        # A disk swap's scratch file goes in the run folder (it is unlinked as it is created).
        if self.memory_policy.offload == "disk" and self.memory_policy.scratch_dir is None:
            folder = self.trainer.log_dir or self.trainer.default_root_dir
            for unet in unets(self):
                if unet.memory_offloader is not None:
                    unet.memory_offloader.scratch_dir = folder

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
        if self.quality_name != "loss":
            self.log(f"{stage}/{self.quality_name}", self.quality(batch), batch_size=n)
        variables, leads = list(self.hparams.variables), self.target_leads
        for name, per_field in self.scores(batch).items():
            for f in range(per_field.shape[1]):
                i = f % len(variables)
                lead = "" if len(leads) == 1 else f"_{lead_hours(leads[f // len(variables)])}h"
                levels = [None] if self.surface[i] else self.hparams.levels
                for j, lev in enumerate(levels):
                    self.log(
                        f"{stage}/{name}_{variables[i]}{'' if lev is None else f'{lev:g}'}{lead}",
                        self.area_mean(per_field[:, f, j, None, None]),
                        batch_size=n,
                    )

    def configure_optimizers(self) -> Any:
        hp = self.hparams
        total = max(1, int(self.trainer.estimated_stepping_batches)) if self._trainer is not None else 1000
        local = [] if self.local is None else list(self.local.parameters())
        factor = float(hp.get("local_lr_factor", 10.0))
        return schedule.configure(self.parameters(), local, hp.lr, hp.weight_decay, factor, total)

    def loss(self, batch: dict[str, torch.Tensor]) -> torch.Tensor:  # pragma: no cover - abstract
        raise NotImplementedError

    def quality(self, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        """The score logged as ``<stage>/<quality_name>`` (area-weighted, normalised by the spread)."""
        return self.loss(batch)

    def scores(self, batch: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:  # pragma: no cover
        raise NotImplementedError


__all__ = ["DATA_BUFFERS", "STAT_KEYS", "EnsembleTask", "inverse_softplus"]
