"""``ensml plan-memory``: the step time and memory of every memory policy for a fit config.

Measures the config's own network (:mod:`ensml.models.memory_plan`) at its grid and at a
second size, predicts every policy at the grid asked for, with and without a spatial split
(:mod:`ensml.models.spatial.perfmodel`), prints the table and, with ``--out``, writes the
config with the recommended policy set.
"""

from __future__ import annotations

import copy
import math
import re
from pathlib import Path

import torch
from jsonargparse.typing import restricted_number_type
from torch import nn

from ensml.data.outputs import OutputFolder
from ensml.errors import EnsmlError
from ensml.experiments.plan import Count, GridSize
from ensml.models.memory_plan import (
    SpatialScale,
    candidate_policies,
    fit_policies,
    measure_grids,
    padded_points,
    plan_memory,
    unet_block,
)
from ensml.models.memory_profile import state_bytes
from ensml.models.unet3d import UNet3d
from ensml.progress import Progress, note

COMMAND = "plan-memory"
#: Spatial ranks to plan for besides one (at most a node's worth: the split's shards must hold blocks).
SpatialRanks = restricted_number_type("SpatialRanks", int, [(">=", 2), ("<=", 64)])
UNITS = {"": 1, "b": 1, "kb": 1e3, "mb": 1e6, "gb": 1e9, "tb": 1e12}
UNITS |= {"kib": 2**10, "mib": 2**20, "gib": 2**30, "tib": 2**40}


def parse_bytes(text: str) -> float:
    """``8GiB``, ``512 MiB``, ``2.5GB`` or a number of bytes → bytes (one-line error otherwise)."""
    m = re.fullmatch(r"\s*([0-9]*\.?[0-9]+(?:[eE][0-9]+)?)\s*([A-Za-z]*)\s*", str(text))
    unit = m.group(2).lower() if m else None
    if m is None or unit not in UNITS or float(m.group(1)) <= 0:
        raise EnsmlError(f"option --memory_budget: {text!r} is not a memory size (e.g. 8GiB, 512MiB, 2.5GB)")
    return float(m.group(1)) * UNITS[unit]


class Networks(nn.Module):
    """A task's networks side by side (two-stage tasks have two), as one step trains them."""

    def __init__(self, nets: list[nn.Module]) -> None:
        super().__init__()
        self.nets = nn.ModuleList(nets)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.cat([net(x) for net in self.nets], dim=1)


def plan_memory_cli(
    config: str,
    memory_budget: str = "8GiB",
    n_lat: GridSize | None = None,
    n_lon: GridSize | None = None,
    batch_size: Count | None = None,
    spatial_ranks: list[SpatialRanks] = [2],  # noqa: B006 - jsonargparse reads the default
    steps: Count = 3,
    out: str | None = None,
) -> None:
    """Predict step time and peak memory of every memory policy for a fit config.

    Parameters
    ----------
    config
        A fit config (``configs/mixed.yaml``): the network, its inputs and the data's grid.
    memory_budget
        Memory of one device (``8GiB``, ``512MiB``, ``2.5GB``): weights, optimiser state,
        batch and the step's activations must fit.
    n_lat
        Latitudes to plan for (default: the data's).
    n_lon
        Longitudes to plan for (default: the data's).
    batch_size
        Samples per step (default: the config's ``data.batch_size``).
    spatial_ranks
        Spatial splits (longitude shards) to predict besides one rank (``[]``: none).
    steps
        Timed steps per policy and grid size (after one warm-up step).
    out
        Write the config with the recommended policy here (a new file, or one this command wrote).
    """
    budget = parse_bytes(memory_budget)
    out_path = _check_out(out, config)
    ranks = [int(r) for r in spatial_ranks]  # plain ints: they travel to spawned processes
    from ensml.train.lightning_cli import load_fit_config

    cli = load_fit_config(config)
    task, data = cli.model, cli.datamodule
    device = cli.trainer.strategy.root_device
    nets = [task.net] + ([task.net_sigma] if getattr(task, "two_stage", False) else [])
    batch = int(batch_size or data.hparams.batch_size)
    grid0 = tuple(data.grid_shape)
    grid = (int(n_lat or grid0[0]), int(n_lon or grid0[1]))  # to plan for

    def shape(h: int, w: int) -> tuple[int, ...]:
        return task.network_input_shape(batch, h, w)

    net = Networks(nets)
    grids = measure_grids(grid, unet_block(net))
    # A disk swap's scratch file is unlinked as it is created: it leaves nothing, anywhere.
    policies = candidate_policies(device)
    note(
        f"{COMMAND}: measuring {len(policies)} policies at {grids[0][0]} x {grids[0][1]} and "
        f"{grids[1][0]} x {grids[1][1]}, batch {batch}, {steps} steps each, on {device}"
    )
    points, io, fixed = padded_points(net, *grid), _io_bytes_per_cell(net, shape), state_bytes(task)
    with Progress(COMMAND, len(grids) + 1, "grid sizes") as bar:
        fits, timed = fit_policies(
            lambda: copy.deepcopy(net), shape, grid, policies, budget, fixed, io, device, steps, bar.advance
        )
        bar.advance(f"{len(timed)} policies timed at {grid[0]} x {grid[1]}")
    spatial = []
    if ranks and (len(nets) != 1 or not isinstance(nets[0], UNet3d)):
        note(f"{COMMAND}: spatial splits are planned for arch unet3d (one network) only")
    elif ranks:
        sample = (*task.network_input_shape(1, 1, 1)[1:3], *grid)
        spatial = spatial_scales(nets[0], sample, batch, ranks, device)
    plan = plan_memory(fits, grid, points, budget, fixed, io, spatial)
    print(plan.table())
    if out_path is not None:
        _write_config(cli, plan, out_path)


def _io_bytes_per_cell(net: nn.Module, shape) -> float:
    """Bytes of the batch's input and target per grid cell (traced on the meta device)."""
    n = 64
    with torch.device("meta"):
        y = copy.deepcopy(net).to("meta")(torch.empty(shape(n, n), device="meta"))
    return 4.0 * (math.prod(shape(n, n)) + y.numel()) / (n * n)


def spatial_scales(
    net: nn.Module,
    sample: tuple[int, int, int, int],
    batch: int,
    ranks: list[int],
    device: torch.device | str,
) -> list[SpatialScale]:
    """Per-rank memory and step time of ``net`` (a ``UNet3d``) on each longitude split of
    ``ranks``, relative to one rank, from the spatial performance model.

    On the CPU the machine is measured (one rank on every thread, against ``r`` ranks sharing
    them) and each shard's step is timed (:func:`ensml.experiments.plan.shard_compute`); on an
    accelerator the nominal H100 rates are used.
    """
    from ensml.models.spatial.perfmodel import H100_NCCL, predict

    machines = dict.fromkeys([1, *ranks], H100_NCCL)
    compute = dict.fromkeys([1, *ranks])
    if torch.device(device).type == "cpu":
        from ensml.experiments.plan import shard_compute
        from ensml.models.spatial.calibrate import measure_machine

        threads = torch.get_num_threads()
        for r in [1, *ranks]:
            machines[r] = measure_machine(r, threads_per_rank=max(1, threads // r))
            probe = shard_compute(net, sample, batch, max(1, threads // r), "cpu")
            compute[r] = probe((1, 1, r), predict(net, sample, (1, 1, r), machines[r], batch))

    one = predict(net, sample, (1, 1, 1), machines[1], batch, plain=True, measured=compute[1])
    out = []
    for r in ranks:
        p = predict(net, sample, (1, 1, r), machines[r], batch, measured=compute[r])
        out.append(SpatialScale(r, p.activation_bytes / one.activation_bytes, p.step_s / one.step_s))
    return out


def _check_out(out: str | None, config: str) -> Path | None:
    if out is None:
        return None
    path = Path(out)
    if path.resolve() == Path(config).resolve():
        raise EnsmlError(f"{COMMAND}: --out {out} is the config itself; name a new file")
    OutputFolder.check(path.parent, COMMAND, names=[path.name], shared=True)
    return path


def _write_config(cli, plan, out: Path) -> None:
    best = plan.chosen
    if best is None:
        raise EnsmlError(f"{COMMAND}: no policy fits {plan.budget_bytes / 2**30:.2f} GiB; {out} not written")
    args = cli.config.model.init_args
    policy = best.policy
    args.checkpointing, args.offload = policy.checkpointing, policy.offload
    args.swap_levels = list(policy.swap_levels)
    args.checkpoint_levels = list(policy.checkpoint_levels)
    text = f"# written by ensml {COMMAND}: {policy.name}" + (
        f" on {best.ranks} spatial ranks (set trainer.strategy)" if best.ranks > 1 else ""
    )
    text += f", predicted {best.step_s:.3f} s per step, {best.total_bytes / 2**30:.2f} GiB\n"
    text += cli.parser.dump(cli.config, skip_none=False)
    with OutputFolder.open(out.parent, COMMAND, names=[out.name], shared=True) as folder:
        folder.write_text(out.name, text)
    note(f"{COMMAND}: wrote {out}")


__all__ = ["COMMAND", "Networks", "parse_bytes", "plan_memory_cli", "spatial_scales"]
