"""Predict the step time and memory of every memory policy, and the largest grid each can train.

The planner measures, it does not guess: for each candidate :class:`MemoryPolicy` it runs a few
training steps of the real network at two grid sizes (:func:`measure_policies`) and fits each
quantity (step time, saved-activation bytes, peak bytes) as an affine function of the number of
(padded) grid points: a fully convolutional network's work and activations grow with the grid,
while fixed costs (the optimiser, Python) do not. :func:`plan_memory` evaluates the fits at the
grid asked for, adds the weights, gradients and AdamW moments, and — for a spatial split over
``r`` ranks — scales by the ratios the spatial performance model gives
(:mod:`ensml.models.spatial.perfmodel`: exact per-rank activation bytes, predicted step time).
It recommends the fastest policy whose predicted memory fits the budget.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable
from dataclasses import dataclass, field

import torch
from torch import nn

from ensml.models.memory import MemoryPolicy
from ensml.models.memory_profile import StepMeasure, measure_steps

GIB = 2.0**30


def candidate_policies(device: torch.device | str, scratch_dir: str | None = None) -> list[MemoryPolicy]:
    """The policies the planner compares: none, levels, levels 0 and 1 only (the finest two,
    most of the saved bytes), all, swap everything, and the mix (swap the full-resolution
    level, recompute the rest). The swap goes to pinned host memory
    from an accelerator and to a scratch file from the CPU."""
    target = "disk" if torch.device(device).type == "cpu" else "host"
    return [
        MemoryPolicy(),
        MemoryPolicy("levels"),
        MemoryPolicy("levels", checkpoint_levels=(0, 1)),
        MemoryPolicy("all"),
        MemoryPolicy(offload=target, scratch_dir=scratch_dir),
        MemoryPolicy("levels", offload=target, swap_levels=(0,), scratch_dir=scratch_dir),
    ]


@dataclass
class PolicyFit:
    """Measurements of one policy at several grid sizes, and their affine fit in grid points."""

    policy: MemoryPolicy
    points: list[int]
    measures: list[StepMeasure]
    #: ``(cells, measured / fitted step time)`` of a step timed at the planned grid itself
    #: (:func:`anchor_steps`): the correction reaches full strength there, from none at the
    #: larger measured grid.
    anchor: tuple[float, float] | None = None

    def _affine(self, values: list[float], points: float) -> float:
        (p0, p1), (v0, v1) = self.points[:2], values[:2]
        slope = (v1 - v0) / (p1 - p0) if p1 != p0 else 0.0
        return v0 + slope * (points - p0)

    def fitted_step_s(self, points: float) -> float:
        """The affine fit of the step time, without the anchor's correction."""
        return self._affine([m.step_s for m in self.measures], points)

    def step_s(self, points: float) -> float:
        t = self.fitted_step_s(points)
        if self.anchor is None:
            return t
        at, ratio = self.anchor
        weight = min(1.0, max(0.0, (points - self.points[1]) / max(at - self.points[1], 1.0)))
        return t * (1.0 + weight * (ratio - 1.0))

    def saved_bytes(self, points: float) -> float:
        return self._affine([m.saved_bytes for m in self.measures], points)

    def peak_bytes(self, points: float) -> float:
        return self._affine([m.peak_bytes for m in self.measures], points)


def measure_policies(
    make_net: Callable[[], nn.Module],
    input_shape: Callable[[int, int], tuple[int, ...]],
    grids: list[tuple[int, int]],
    policies: list[MemoryPolicy],
    device: torch.device | str = "cpu",
    steps: int = 3,
    progress: Callable[[str], None] | None = None,
) -> list[PolicyFit]:
    """Measure every policy at every ``(n_lat, n_lon)`` of ``grids`` (two sizes for the fit).

    ``make_net()`` builds the network (same weights each time); ``input_shape(n_lat, n_lon)``
    gives its input's shape.
    """
    device = torch.device(device)
    fits = [PolicyFit(p, [], []) for p in policies]
    for n_lat, n_lon in grids:
        torch.manual_seed(0)
        net = make_net().to(device)
        x = torch.randn(input_shape(n_lat, n_lon), device=device)
        points = padded_points(net, n_lat, n_lon)
        for fit, measure in zip(fits, measure_steps(net, x, policies, steps=steps)):
            fit.points.append(points)
            fit.measures.append(measure)
        if progress is not None:
            progress(f"{len(policies)} policies at {n_lat} x {n_lon}")
        del net, x
    return fits


def anchor_steps(
    fits: list[PolicyFit],
    make_net: Callable[[], nn.Module],
    input_shape: Callable[[int, int], tuple[int, ...]],
    grid: tuple[int, int],
    fits_memory: Callable[[PolicyFit], bool],
    device: torch.device | str = "cpu",
    steps: int = 1,
) -> list[PolicyFit]:
    """Time every policy that ``fits_memory`` at ``grid`` itself (``steps`` after a warm-up) and
    anchor its fit there; the others take the median correction. Returns the policies timed.

    A step's time is not affine in the grid: the CPU's convolutions change algorithm with the
    tensor's size (PyTorch takes oneDNN above about 2**24 elements, a direct path up to 10x
    slower below), and a GPU's small grids are bound by kernel launches, so an extrapolation
    from smaller grids alone was off by 2x here (README, Training beyond memory). Memory is
    affine, and is predicted from the smaller grids alone.
    """
    points = padded_points(make_net(), *grid)
    if fits[0].points[1] >= points:
        return []  # the planned grid was measured
    timed = [f for f in fits if fits_memory(f)]
    if not timed:
        return []
    torch.manual_seed(0)
    net = make_net().to(device)
    x = torch.randn(input_shape(*grid), device=device)
    ratios = {}
    for fit, m in zip(timed, measure_steps(net, x, [f.policy for f in timed], steps=steps)):
        ratios[id(fit)] = m.step_s / max(fit.fitted_step_s(points), 1e-12)
    common = statistics.median(ratios.values())
    for fit in fits:
        fit.anchor = (float(points), ratios.get(id(fit), common))
    return timed


def fit_policies(
    make_net: Callable[[], nn.Module],
    input_shape: Callable[[int, int], tuple[int, ...]],
    grid: tuple[int, int],
    policies: list[MemoryPolicy],
    budget_bytes: float,
    fixed_bytes: float,
    batch_bytes_per_point: float,
    device: torch.device | str = "cpu",
    steps: int = 3,
    progress: Callable[[str], None] | None = None,
) -> tuple[list[PolicyFit], list[PolicyFit]]:
    """The planner's measurements for ``grid``: every policy at :func:`measure_grids`, then
    ``steps`` steps at ``grid`` of each policy whose predicted memory fits ``budget_bytes`` and
    80% of the memory free now (:func:`anchor_steps`). Returns the fits and the policies timed
    at ``grid``."""
    net = make_net()
    grids = measure_grids(grid, unet_block(net))
    fits = measure_policies(make_net, input_shape, grids, policies, device, steps, progress)
    points = padded_points(net, *grid)
    room = min(budget_bytes, 0.8 * free_memory(device))  # the step at grid must not exhaust the machine

    def fits_memory(fit: PolicyFit) -> bool:
        return predicted_total(fit, points, fixed_bytes, batch_bytes_per_point) <= room

    return fits, anchor_steps(fits, make_net, input_shape, grid, fits_memory, device, steps)


#: Grids of fewer cells are measured themselves (and at half size); larger ones at 1/4 and 1/2.
SMALL_GRID = 100_000


def measure_grids(grid: tuple[int, int], block: int = 1) -> list[tuple[int, int]]:
    """The two grid sizes the planner measures to predict ``grid`` (``block``: the smallest size).

    A small grid is measured itself and at half the size per axis; a large one at a quarter and
    a half per axis (a sixteenth and a quarter of its cells), so that the fit extrapolates by at
    most 4x in cells while the measurement costs well under one step at the full grid.
    """
    h, w = grid
    half = (max(block, h // 2), max(block, w // 2))
    if h * w < SMALL_GRID:
        return [half, (h, w)]
    return [(max(block, h // 4), max(block, w // 4)), half]


def unet_block(net: nn.Module) -> int:
    """``2**depth`` of the deepest U-Net in ``net``: grids are padded to multiples of it."""
    return 2 ** max((getattr(m, "depth", 0) for m in net.modules() if hasattr(m, "encoders")), default=0)


def padded_points(net: nn.Module, n_lat: int, n_lon: int) -> int:
    """Latitude × longitude cells after the U-Net pads to a multiple of ``2**depth``."""
    m = unet_block(net)
    return (-(-n_lat // m) * m) * (-(-n_lon // m) * m)


@dataclass
class PolicyPrediction:
    """One policy (on ``ranks`` spatial ranks) at the planned grid."""

    policy: MemoryPolicy
    ranks: int
    step_s: float
    saved_bytes: float
    total_bytes: float  # peak of the step + weights, gradients, AdamW moments, batch
    largest: tuple[int, int]  # the largest grid (lat, lon), of the planned aspect, that fits
    fits: bool = False


@dataclass
class MemoryPlan:
    """Every policy's prediction at one grid, and the recommendation."""

    grid: tuple[int, int]
    budget_bytes: float
    rows: list[PolicyPrediction] = field(default_factory=list)

    @property
    def chosen(self) -> PolicyPrediction | None:
        """The fastest single-process policy that fits (else the fastest spatial one that fits)."""
        for ranks_ok in (lambda r: r == 1, lambda r: True):
            fitting = [r for r in self.rows if r.fits and ranks_ok(r.ranks)]
            if fitting:
                return min(fitting, key=lambda r: r.step_s)
        return None

    def table(self) -> str:
        """A text table, one row per policy and rank count, and the recommendation."""
        lines = [
            f"grid {self.grid[0]} x {self.grid[1]}, budget {self.budget_bytes / GIB:.2f} GiB",
            f"{'policy':<26} {'ranks':>5} {'step s':>8} {'saved GiB':>10} {'peak GiB':>9} "
            f"{'fits':>4}  largest grid in budget",
        ]
        for r in self.rows:
            lines.append(
                f"{r.policy.name:<26} {r.ranks:>5} {r.step_s:8.3f} {r.saved_bytes / GIB:10.3f} "
                f"{r.total_bytes / GIB:9.3f} {'yes' if r.fits else 'no':>4}  {r.largest[0]} x {r.largest[1]}"
            )
        best = self.chosen
        if best is None:
            lines.append("no policy fits the budget: use more ranks or a smaller batch")
        else:
            where = f" on {best.ranks} spatial ranks" if best.ranks > 1 else ""
            lines.append(f"recommended: {best.policy.name}{where}")
        return "\n".join(lines)


@dataclass(frozen=True)
class SpatialScale:
    """Per-rank memory and step time of an ``r``-rank spatial split, relative to one rank."""

    ranks: int
    memory: float
    time: float


def plan_memory(
    fits: list[PolicyFit],
    grid: tuple[int, int],
    points: int,
    budget_bytes: float,
    fixed_bytes: float,
    batch_bytes_per_point: float,
    spatial: list[SpatialScale] = (),  # type: ignore[assignment]
) -> MemoryPlan:
    """Evaluate ``fits`` at ``points`` (the planned grid's padded cells) for one rank and each
    spatial split; ``fixed_bytes`` are the weights, gradients and optimiser moments,
    ``batch_bytes_per_point`` the input and target bytes per grid cell."""
    plan = MemoryPlan(grid, budget_bytes)
    for scale in [SpatialScale(1, 1.0, 1.0), *spatial]:
        for fit in fits:

            def total(p: float, fit: PolicyFit = fit, scale: SpatialScale = scale) -> float:
                return predicted_total(fit, p, fixed_bytes, batch_bytes_per_point, scale.memory)

            plan.rows.append(
                PolicyPrediction(
                    fit.policy,
                    scale.ranks,
                    fit.step_s(points) * scale.time,
                    fit.saved_bytes(points) * scale.memory,
                    total(points),
                    _largest(total, budget_bytes, grid, points),
                    total(points) <= budget_bytes,
                )
            )
    return plan


def predicted_total(
    fit: PolicyFit, points: float, fixed_bytes: float, batch_bytes_per_point: float, share: float = 1.0
) -> float:
    """Memory of one rank: weights and optimiser state, plus the step's peak and the batch
    (times ``share``, the rank's part of a spatial split)."""
    return fixed_bytes + (fit.peak_bytes(points) + batch_bytes_per_point * points) * share


def free_memory(device: torch.device | str) -> float:
    """Bytes that can be allocated now: free GPU memory, or the host's available memory."""
    device = torch.device(device)
    if device.type == "cuda":
        return float(torch.cuda.mem_get_info(device)[0])
    with open("/proc/meminfo") as f:
        info = {line.split(":")[0]: line.split()[1] for line in f}
    return float(info.get("MemAvailable", 0)) * 1024


def _largest(
    total: Callable[[float], float], budget: float, grid: tuple[int, int], points: int
) -> tuple[int, int]:
    """The largest grid of ``grid``'s aspect ratio whose predicted ``total`` fits ``budget``."""
    a0, a1 = total(0.0), (total(float(points)) - total(0.0)) / points
    if a1 <= 0 or budget <= a0:
        return (0, 0)
    cells = (budget - a0) / a1
    n_lat = math.floor(math.sqrt(cells * grid[0] / grid[1]))
    return n_lat, math.floor(cells / max(n_lat, 1))


__all__ = [
    "MemoryPlan",
    "PolicyFit",
    "PolicyPrediction",
    "SpatialScale",
    "anchor_steps",
    "candidate_policies",
    "fit_policies",
    "free_memory",
    "measure_grids",
    "measure_policies",
    "padded_points",
    "plan_memory",
    "predicted_total",
    "unet_block",
]
