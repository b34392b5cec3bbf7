"""Hybrid spatial × data-parallel training as a Lightning strategy.

``trainer.devices = N`` ranks form ``N / (lat × lon)`` data-parallel replicas, each a group of
``lat × lon`` spatial ranks that share every sample and each hold one latitude/longitude slab of
it (see :mod:`ensml.models.spatial`). Per rank:

- data: the datamodule reads only the rank's slab from disk (``EnsembleDataModule.slab``); the
  spatial ranks of a replica see the same samples (one replica: the datamodule's own seeded
  sampler on every rank, so the run matches a single-process run batch for batch; several:
  a ``DistributedSampler`` over replicas, ``rank`` = replica index);
- model: the task's ``UNet3d`` runs as :class:`~ensml.models.spatial.SpatialUNet3d`, its
  climatology and latitude weights are sliced to the slab, and ``area_mean`` becomes a mean over
  the global domain, so every spatial rank computes the same global loss;
- gradients: no DDP wrapper; before each optimiser step (after gradient accumulation, before
  clipping) :func:`~ensml.models.spatial.reduce_gradients` sums weight gradients over the
  spatial ranks of a replica and averages over replicas;
- checkpoints hold the full model (same keys and shapes as a single-process checkpoint);
  predictions are assembled on every rank (all replicas predict the whole split) and written
  by global rank 0.
"""

from __future__ import annotations

from datetime import timedelta
from functools import partial
from typing import Any, Literal

import torch
from lightning.pytorch.strategies import DDPStrategy
from lightning.pytorch.trainer.states import TrainerFn

from ensml.compat import set_distributed_sampler, uses_distributed_sampler
from ensml.errors import EnsmlError
from ensml.models.spatial import (
    ProcessGrid,
    SpatialUNet3d,
    broadcast_parameters,
    gather_field,
    global_mean,
    local_slices,
    reduce_gradients,
    shard_sizes,
)
from ensml.models.unet3d import UNet3d
from ensml.names import LATITUDE, LONGITUDE

SPATIAL_BUFFERS = ("clim_mean", "static", "lat_weights")  # task buffers with latitude/longitude axes
NETWORKS = ("net", "net_sigma")  # a task's networks (net_sigma: the two-stage mixed task's)


def check_split(lat: int, lon: int, world: int, n_lat: int, n_lon: int, depth: int, kernel: int) -> None:
    """Raise :class:`EnsmlError` if ``lat × lon`` cannot split ``world`` ranks or the grid.

    Pure arithmetic, so every rank raises the same error before any process group exists.
    """
    if lat < 1 or lon < 1:
        raise EnsmlError(f"spatial split must be positive, got lat={lat}, lon={lon}")
    if world % (lat * lon):
        raise EnsmlError(
            f"trainer.devices × num_nodes = {world} is not a multiple of the spatial split "
            f"lat={lat} × lon={lon} = {lat * lon}"
        )
    m, halo = 2**depth, kernel // 2
    for name, n, parts in (("latitude", n_lat, lat), ("longitude", n_lon, lon)):
        pad = (-n) % m
        try:
            sizes = shard_sizes(n, parts, m, pad)
        except EnsmlError as exc:
            msg = f"cannot split {n} {name}s into {parts} shards for depth={depth}: {exc}"
            raise EnsmlError(msg) from None
        padded = [*sizes[:-1], sizes[-1] + pad]
        if parts > 1 and min(padded) // m < halo:
            raise EnsmlError(
                f"{name} shards {sizes} are too narrow for kernel_size={kernel} at depth={depth}: "
                f"use fewer {name} shards"
            )


class SpatialParallelStrategy(DDPStrategy):
    """DDP-style multi-process strategy that splits every sample into ``lat × lon`` slabs.

    Parameters
    ----------
    lat, lon
        Number of latitude and longitude shards per sample (``lat × lon`` ranks per replica).
    process_group_backend
        ``gloo`` (CPU) or ``nccl`` (GPU); by default chosen from the accelerator.
    timeout_s
        Seconds a collective may wait before the run fails (a dead rank ends the others).
    start_method
        ``popen`` (re-run the command per rank, as ``ddp``) or ``spawn``/``fork``/``forkserver``.
    """

    strategy_name = "spatial"

    def __init__(
        self,
        lat: int = 1,
        lon: int = 2,
        process_group_backend: str | None = None,
        timeout_s: float = 1800.0,
        start_method: Literal["popen", "spawn", "fork", "forkserver"] = "popen",
        **kwargs: Any,
    ) -> None:
        super().__init__(
            process_group_backend=process_group_backend,
            timeout=timedelta(seconds=timeout_s),
            start_method=start_method,
            **kwargs,
        )
        self.lat, self.lon = int(lat), int(lon)
        self.grid: ProcessGrid | None = None
        self.slab: tuple[slice, slice] | None = None
        self._full: dict[str, torch.Tensor] = {}
        self._plain_nets: dict[str, UNet3d] = {}
        self._use_sampler: bool | None = None

    # -- validation (before any process starts), process groups, per-rank slab ----------------
    def _configure_launcher(self) -> None:
        world = self.num_nodes * self.num_processes
        if world % (self.lat * self.lon):
            raise EnsmlError(
                f"trainer.devices × num_nodes = {world} is not a multiple of the spatial split "
                f"lat={self.lat} × lon={self.lon} = {self.lat * self.lon}"
            )
        super()._configure_launcher()

    def check_inputs(self, datamodule: Any, module: Any) -> tuple[int, int, int]:
        """Validate model, data and split; return the global (n_lat, n_lon) and the U-Net depth.

        ``ensml fit|predict`` calls this before launching the ranks, so a bad config fails once.
        """
        if datamodule is None or not hasattr(datamodule, "slab"):
            raise EnsmlError("spatial-parallel training needs an EnsembleDataModule (data: ...)")
        net = module.net
        if not all(isinstance(getattr(module, name), UNet3d) for name in NETWORKS if hasattr(module, name)):
            arch = module.hparams.get("arch")
            raise EnsmlError(f"spatial-parallel training supports arch unet3d only, got {arch!r}")
        if module.hparams.get("loss") == "l1_msssim":  # windows across shards would need halos
            raise EnsmlError(
                "spatial-parallel training supports the spread loss 'mse' only: MS-SSIM's windows and "
                "scales span the whole field (set model.init_args.loss: mse)"
            )
        if not datamodule.coords:
            _ = datamodule.spec  # opens and validates the files once
        n_lat, n_lon = len(datamodule.coords[LATITUDE]), len(datamodule.coords[LONGITUDE])
        kernel = module.hparams.get("kernel_size", 3)
        world = self.num_nodes * self.num_processes
        check_split(self.lat, self.lon, world, n_lat, n_lon, net.depth, kernel)
        return n_lat, n_lon, net.depth

    def setup_environment(self) -> None:
        trainer = self.lightning_module.trainer
        dm = trainer.datamodule
        n_lat, n_lon, depth = self.check_inputs(dm, self.lightning_module)
        super().setup_environment()  # initialises the default process group
        if self.grid is None:
            self.grid = ProcessGrid(self.lat, self.lon)
        self.slab = local_slices(n_lat, n_lon, depth, self.grid)
        dm.slab = self.slab
        # With one replica every spatial rank keeps the datamodule's own sampler (identically
        # seeded everywhere); Lightning's DistributedSampler is used only across replicas.
        if self._use_sampler is None:
            self._use_sampler = uses_distributed_sampler(trainer)
        fitting = trainer.state.fn == TrainerFn.FITTING
        set_distributed_sampler(trainer, self._use_sampler and fitting and self.grid.n_data > 1)

    @property
    def distributed_sampler_kwargs(self) -> dict[str, Any]:
        if self.grid is None:
            return {"num_replicas": 1, "rank": 0}
        return {"num_replicas": self.grid.n_data, "rank": self.grid.replica}

    # -- model: shard before the optimiser sees the parameters ----------------------------------
    def setup(self, trainer) -> None:
        self._wrap_net()  # before the optimiser is built on the parameters
        super().setup(trainer)
        # After DDPStrategy.setup, whose non-fitting path broadcasts rank 0's buffers.
        self._shard_buffers()

    def configure_ddp(self) -> None:
        """No DDP wrapper: gradients are reduced in :meth:`optimizer_step`."""

    def _wrap_net(self) -> None:
        module, grid = self.lightning_module, self.grid
        for name in NETWORKS:
            net = getattr(module, name, None)
            if isinstance(net, UNet3d):
                self._plain_nets[name] = net
                setattr(module, name, SpatialUNet3d(net, grid))
        if getattr(module, "local", None) is not None:  # per-point weights: each rank its slab
            module.local.region = self.slab
            broadcast_parameters(module.local, grid)
        module.reduce_mean = partial(global_mean, grid=grid)
        for name in self._plain_nets:
            broadcast_parameters(getattr(module, name), grid)  # all ranks must start identical

    def _shard_buffers(self) -> None:
        """Slice the climatology and latitude weights to this rank's slab; keep the full ones."""
        module, (lat, lon) = self.lightning_module, self.slab
        for key in SPATIAL_BUFFERS:
            t = getattr(module, key)
            if t.numel() == 0:  # a buffer the model does not use (no static inputs)
                continue
            if key not in self._full or t.shape == self._full[key].shape:  # full (new or restored)
                self._full[key] = t.detach().clone()
                t = t[..., lat] if key == "lat_weights" else t[..., lat, lon]
                setattr(module, key, t.contiguous())

    def optimizer_step(self, optimizer: Any, closure: Any, model: Any = None, **kwargs: Any) -> Any:
        # Reduce once per optimiser step, after the closure's (last accumulated) backward and
        # before gradient clipping: each rank holds only its share of the weight gradients.
        def reduced_closure() -> Any:
            out = closure()
            reduce_gradients(self.lightning_module, self.grid)
            return out

        return super().optimizer_step(optimizer, reduced_closure, model, **kwargs)

    # -- checkpoints and prediction: the full model and fields --------------------------------
    def lightning_module_state_dict(self) -> dict[str, Any]:
        state = super().lightning_module_state_dict()
        state.update({key: t.clone() for key, t in self._full.items()})
        return state

    def predict_step(self, *args: Any, **kwargs: Any) -> Any:
        out = super().predict_step(*args, **kwargs)
        if isinstance(out, dict):
            return {k: gather_field(v, self.grid) if _is_field(v) else v for k, v in out.items()}
        return gather_field(out, self.grid) if _is_field(out) else out

    def teardown(self) -> None:
        # Give the module back whole, so it works after the run like a single-process one.
        module = self.lightning_module
        if module is not None and isinstance(module.net, SpatialUNet3d) and self._plain_nets:
            for name, plain in self._plain_nets.items():
                plain.load_state_dict(getattr(module, name).state_dict())
                setattr(module, name, plain)
            for key, t in self._full.items():
                setattr(module, key, t.to(getattr(module, key).device))
            if getattr(module, "local", None) is not None:
                module.local.region = None
            module.reduce_mean = None
        super().teardown()


def _is_field(x: Any) -> bool:
    """A (B, C, level, lat, lon) shard of a prediction."""
    return isinstance(x, torch.Tensor) and x.dim() == 5
