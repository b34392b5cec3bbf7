"""Spatial parallelism: lat/lon shards of every sample across ranks, combined with data parallelism.

See :mod:`~ensml.models.spatial.grid` (process grid, shard sizes),
:mod:`~ensml.models.spatial.halo` (halo exchange autograd function),
:mod:`~ensml.models.spatial.layers` (partitioned layers), :mod:`~ensml.models.spatial.unet`
(converter and :class:`SpatialUNet3d`), :mod:`~ensml.models.spatial.perfmodel` (performance
model and :func:`plan_parallel`), :mod:`~ensml.models.spatial.calibrate` (:func:`measure_machine`:
the machine model of this machine, measured) and :mod:`~ensml.models.spatial.shard_step`
(:func:`measure_shard_step`: one rank's step on its shard, measured).
"""

from __future__ import annotations

from ensml.models.spatial.calibrate import measure_machine
from ensml.models.spatial.collectives import (
    broadcast_parameters,
    gather_field,
    global_mean,
    global_sum,
    reduce_gradients,
    spatial_all_reduce,
)
from ensml.models.spatial.grid import LAT, LON, ProcessGrid, shard_sizes, shard_slice
from ensml.models.spatial.halo import halo_exchange
from ensml.models.spatial.layers import (
    SpatialConv3d,
    SpatialGroupNorm,
    SpatialPool3d,
    SpatialSphereConv3d,
    SpatialUpsample,
    spatial_pad,
)
from ensml.models.spatial.perfmodel import H100_NCCL, MachineModel, ShardStep, predict
from ensml.models.spatial.plan import ParallelPlan, plan_parallel
from ensml.models.spatial.shard_step import measure_shard_step
from ensml.models.spatial.unet import SpatialUNet3d, local_slices, parallelize, unet_shard_sizes

__all__ = [
    "H100_NCCL",
    "LAT",
    "LON",
    "MachineModel",
    "ParallelPlan",
    "ProcessGrid",
    "ShardStep",
    "SpatialConv3d",
    "SpatialGroupNorm",
    "SpatialPool3d",
    "SpatialSphereConv3d",
    "SpatialUNet3d",
    "SpatialUpsample",
    "broadcast_parameters",
    "gather_field",
    "global_mean",
    "global_sum",
    "halo_exchange",
    "local_slices",
    "measure_machine",
    "measure_shard_step",
    "parallelize",
    "plan_parallel",
    "predict",
    "reduce_gradients",
    "shard_sizes",
    "shard_slice",
    "spatial_all_reduce",
    "spatial_pad",
    "unet_shard_sizes",
]
