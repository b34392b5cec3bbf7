"""Spatial-parallel layers and U-Net equal the single-process model (gloo, spawned ranks).

Multi-process checks live in ``spatial_checks.py`` and are grouped into few launches (process
start-up dominates on two cores); each launch has a timeout and stops as soon as one rank fails.
"""

from __future__ import annotations

import time

import pytest
import spatial_checks as checks
import torch
from torch import nn

from ensml.errors import EnsmlError
from ensml.models.spatial import ProcessGrid, SpatialUNet3d, parallelize, shard_sizes, unet_shard_sizes
from ensml.models.spatial.testing import DistributedError, run_distributed
from ensml.models.unet3d import UNet3d

pytestmark = pytest.mark.distributed


def test_two_ranks_lon_and_lat_splits():
    results = run_distributed(checks.run_world2, 2, timeout=120)
    for r in results:
        assert r["fails"] == []
    # Two ranks on a periodic dim: the same rank is lower and upper neighbour.
    assert results[0]["halo"] == (13, 14, 0, 1, 2, 3, 4, 10)
    assert results[1]["halo"] == (3, 4, 10, 11, 12, 13, 14, 0)
    # A bad split raises the same EnsmlError on every rank.
    assert results[0]["errors"] == results[1]["errors"]
    bad_multiple, bad_grid, bad_halo, bad_world = results[0]["errors"]
    assert "must be multiples of 2**depth = 4" in bad_multiple
    assert "do not form a grid" in bad_grid
    assert "fewer than the halo width 4" in bad_halo
    assert "does not match the world size 2" in bad_world


def test_four_ranks_both_splits_and_data_parallel():
    grids = [(1, 2, 2, False), (1, 1, 4, False), (1, 4, 1, False), (2, 1, 2, True), (2, 2, 1, False)]
    for fails in run_distributed(checks.run_grids, 4, grids, timeout=180):
        assert fails == []


def test_failing_rank_terminates_all_ranks_quickly():
    start = time.monotonic()
    with pytest.raises(DistributedError, match="deliberate failure on rank 1"):
        run_distributed(checks.run_failing_rank, 2, timeout=60)
    assert time.monotonic() - start < 30


def test_single_rank_grid_is_the_plain_unet():
    torch.manual_seed(0)
    unet = UNet3d(3, 2, width=4, depth=2, norm_groups=2).double()
    par = SpatialUNet3d(unet, ProcessGrid())
    assert {k: v.shape for k, v in par.state_dict().items()} == {
        k: v.shape for k, v in unet.state_dict().items()
    }
    x = torch.randn(2, 3, 2, 13, 18, dtype=torch.float64)
    torch.testing.assert_close(par(x), unet(x), rtol=0, atol=1e-12)


def test_shard_sizes():
    assert shard_sizes(10, 2) == [5, 5]
    assert shard_sizes(11, 2) == [6, 5]
    assert shard_sizes(13, 2, multiple=4, pad=3) == [8, 5]
    assert shard_sizes(361, 4, multiple=32, pad=23) == [96, 96, 96, 73]
    grid = ProcessGrid()
    assert unet_shard_sizes(361, 720, 5, grid) == ([361], [720])
    with pytest.raises(EnsmlError, match="cannot cut"):
        shard_sizes(8, 3, multiple=4)


def test_unsupported_layers_are_refused():
    grid = ProcessGrid()
    with pytest.raises(NotImplementedError):
        parallelize(nn.Sequential(nn.BatchNorm3d(3)), grid)
    with pytest.raises(NotImplementedError):
        parallelize(nn.ConvTranspose3d(3, 3, 3, stride=2), grid)


def test_performance_model_memory_and_plan():
    from ensml.models.spatial.perfmodel import H100_NCCL, predict, saved_bytes, saved_hooks
    from ensml.models.spatial.plan import plan_parallel

    unet = UNet3d(3, 2, width=4, depth=2)
    saved: dict = {}
    with saved_hooks(saved):
        unet(torch.randn(1, 3, 2, 16, 32))
    single = predict(unet, (3, 2, 16, 32), (1, 1, 1), H100_NCCL, plain=True)
    assert single.activation_bytes == saved_bytes(saved)  # the meta trace is exact
    halves = predict(unet, (3, 2, 16, 32), (1, 1, 2), H100_NCCL)
    assert halves.activation_bytes < 0.55 * single.activation_bytes
    assert halves.halo_s > 0 and single.halo_s == 0
    plan = plan_parallel(unet, 2, 16, 32, 4, memory_gib=1.0)
    assert len(plan.candidates) == 6  # 4x1x1, 2x2x1, 2x1x2, 1x4x1, 1x2x2, 1x1x4
    assert plan.recommended is plan.candidates[0]
    assert "recommended: data=" in plan.table()
    tight = plan_parallel(unet, 2, 16, 32, 4, memory_gib=halves.activation_bytes * 1.01 / 2**30)
    assert tight.recommended is None or tight.recommended.lat * tight.recommended.lon >= 2
