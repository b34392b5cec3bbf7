"""Worker functions run on spawned ranks by the spatial-parallel tests (importable by name).

Each check compares a partitioned layer with its single-process original on tiny tensors:
forward output, input gradient and (summed over spatial ranks, averaged over replicas) weight
gradients. Checks return lists of failure messages instead of asserting, so one rank's mismatch
never leaves its neighbours waiting in a collective.
"""

from __future__ import annotations

import torch
from torch import nn

from ensml.errors import EnsmlError
from ensml.models.layers import SphereConv3d
from ensml.models.spatial import (
    LON,
    ProcessGrid,
    SpatialUNet3d,
    broadcast_parameters,
    gather_field,
    global_mean,
    parallelize,
    reduce_gradients,
    shard_slice,
    unet_shard_sizes,
)
from ensml.models.spatial.collectives import gather_shapes, split_sizes
from ensml.models.unet3d import UNet3d

TOL = {torch.float64: 1e-10, torch.float32: 1e-5}


def _close(name: str, got: torch.Tensor, want: torch.Tensor, tol: float, scale: float = 0.0) -> list[str]:
    """Max abs error within ``tol`` relative to max(1, scale, max |want|)."""
    if got.shape != want.shape:
        return [f"{name}: shape {tuple(got.shape)} != {tuple(want.shape)}"]
    err = (got - want).abs().max().item() if got.numel() else 0.0
    scale = max(1.0, scale, want.abs().max().item() if want.numel() else 0.0)
    return [] if err <= tol * scale else [f"{name}: max error {err:.3g} > {tol:g}"]


def _slices(t: torch.Tensor, grid: ProcessGrid) -> tuple[slice, slice]:
    """This rank's (lat, lon) slices of the global tensor whose local shard is ``t``."""
    lat, lon = split_sizes(gather_shapes(t, grid), grid)
    return shard_slice(lat, grid.lat_index), shard_slice(lon, grid.lon_index)


def compare_module(grid, ref: nn.Module, par: nn.Module, inputs, sizes, name, tol, unet=False) -> list[str]:
    """Compare ``par`` on shards with ``ref`` on the full fields of every replica.

    ``inputs[r]`` is replica r's global input; ``sizes`` the (lat, lon) shard sizes of the input.
    """
    fails: list[str] = []
    ref_grads = [torch.zeros_like(p) for p in ref.parameters()]
    mine = {}
    for r, xg in enumerate(inputs):
        ref.zero_grad()
        xg = xg.clone().requires_grad_()
        y = ref(xg)
        g = torch.randn(y.shape, dtype=y.dtype, generator=torch.Generator().manual_seed(100 + r))
        (y * g).sum().backward()
        for acc, p in zip(ref_grads, ref.parameters()):
            acc += p.grad / len(inputs)
        if r == grid.replica:
            mine = dict(x=xg.detach(), gx=xg.grad, y=y.detach(), g=g)
    sl = (..., shard_slice(sizes[0], grid.lat_index), shard_slice(sizes[1], grid.lon_index))
    x = mine["x"][sl].clone().requires_grad_()
    y = par(x)
    out_sl = (..., *_slices(y, grid))
    fails += _close(f"{name} forward", y, mine["y"][out_sl], tol)
    if unet:  # also exercise the replicated global loss: sum(y*g) = mean(y*g) * numel
        loss = global_mean(y * mine["g"][out_sl], grid) * mine["y"].numel()
        want = (mine["y"] * mine["g"]).sum()
        fails += _close(f"{name} global loss", loss.detach(), want, tol * 10)
    else:
        loss = (y * mine["g"][out_sl]).sum()
    loss.backward()
    fails += _close(f"{name} input grad", x.grad, mine["gx"][sl], tol)
    reduce_gradients(par, grid)
    # Weight gradients are sums over the whole domain (with cancellation): in float32 compare
    # them norm-wise, relative to the model's largest gradient.
    top = max((g.abs().max().item() for g in ref_grads), default=0.0)
    for (pname, p), want in zip(par.named_parameters(), ref_grads):
        fails += _close(f"{name} grad {pname}", p.grad, want, tol, top)
    full = gather_field(y, grid)
    fails += _close(f"{name} gather_field", full, mine["y"], tol)
    return fails


def layer_cases() -> list[tuple[str, nn.Module]]:
    """Single-process layers to partition (4 input channels)."""
    return [
        ("sphere k1", SphereConv3d(4, 3, 1)),
        ("sphere k3 periodic", SphereConv3d(4, 3, 3)),
        ("sphere k5 periodic", SphereConv3d(4, 2, 5)),
        ("sphere k3 limited-area", SphereConv3d(4, 3, 3, periodic_lon=False)),
        ("conv k3 dilation 2", nn.Conv3d(4, 3, 3, padding=2, dilation=2)),
        ("conv k3 stride 2", nn.Conv3d(4, 3, 3, stride=2, padding=1)),
        ("conv k133 stride 122 valid", nn.Conv3d(4, 3, (1, 3, 3), stride=(1, 2, 2))),
        ("maxpool 122", nn.MaxPool3d((1, 2, 2))),
        ("maxpool k3 s2 p1", nn.MaxPool3d(3, 2, 1)),
        ("avgpool k3 s2 p1", nn.AvgPool3d(3, 2, 1)),
        ("avgpool 122", nn.AvgPool3d((1, 2, 2))),
        ("convtranspose 122", nn.ConvTranspose3d(4, 3, (1, 2, 2), stride=(1, 2, 2))),
        ("upsample nearest", nn.Upsample(scale_factor=(1, 2, 2), mode="nearest")),
        ("upsample trilinear", nn.Upsample(scale_factor=(1, 2, 2), mode="trilinear")),
        ("groupnorm", nn.GroupNorm(2, 4)),
    ]


CASE_NAMES = [name for name, _ in layer_cases()]


def _layouts(grid: ProcessGrid) -> list[tuple[list[int], list[int]]]:
    """Even and uneven shard sizes (non-last shards even, all at least 2 cells)."""
    uneven = {1: [5], 2: [4, 3], 4: [2, 4, 2, 3]}
    even = {1: [6], 2: [4, 4], 4: [4, 4, 4, 4]}
    return [(even[grid.n_lat], even[grid.n_lon]), (uneven[grid.n_lat], uneven[grid.n_lon])]


def check_layers(grid: ProcessGrid, tag: str) -> list[str]:
    fails = []
    for dtype in (torch.float64, torch.float32):
        # float32 mostly tests the tolerance: the uneven layout only, to keep the suite short.
        for lat, lon in _layouts(grid)[dtype == torch.float32 :]:
            for i in range(len(CASE_NAMES)):
                torch.manual_seed(i)  # identical weights on every rank
                name, layer = layer_cases()[i]
                ref = layer.to(dtype)
                if isinstance(ref, nn.GroupNorm):  # non-trivial affine parameters
                    nn.init.normal_(ref.weight)
                    nn.init.normal_(ref.bias)
                par = parallelize(ref, grid)
                gen = torch.Generator().manual_seed(7)
                shape = (2, 4, 3, sum(lat), sum(lon))
                inputs = [torch.randn(shape, generator=gen, dtype=dtype) + 3 for _ in range(grid.n_data)]
                label = f"[{tag} {dtype} lat={lat} lon={lon}] {name}"
                fails += compare_module(grid, ref, par, inputs, (lat, lon), label, TOL[dtype])
    return fails


UNETS = [  # (kwargs, n_lat, n_lon)
    (dict(width=4, depth=2, norm_groups=2), 13, 18),
    (dict(width=2, depth=1, kernel_size=5), 15, 18),
]


def check_unets(grid: ProcessGrid, tag: str) -> list[str]:
    fails = []
    for dtype in (torch.float64, torch.float32):
        for kw, n_lat, n_lon in UNETS:
            torch.manual_seed(1 + grid.rank)  # different on every rank: broadcast must fix it
            par = SpatialUNet3d(UNet3d(3, 2, **kw).to(dtype), grid)
            broadcast_parameters(par, grid)
            ref = UNet3d(3, 2, **kw).to(dtype)
            ref.load_state_dict(par.state_dict())
            gen = torch.Generator().manual_seed(3)
            inputs = [
                torch.randn(2, 3, 2, n_lat, n_lon, generator=gen, dtype=dtype) for _ in range(grid.n_data)
            ]
            sizes = unet_shard_sizes(n_lat, n_lon, kw["depth"], grid)
            label = f"[{tag} {dtype}] unet {kw}"
            fails += compare_module(grid, ref, par, inputs, sizes, label, TOL[dtype], unet=True)
    return fails


def check_training(grid: ProcessGrid, tag: str, steps: int = 3) -> list[str]:
    """A few Adam steps on shards equal the single-process steps on the full batch."""
    kw, n_lat, n_lon = UNETS[0]
    torch.manual_seed(5)
    ref = UNet3d(3, 2, **kw).double()
    par = SpatialUNet3d(ref, grid)
    sizes = unet_shard_sizes(n_lat, n_lon, kw["depth"], grid)
    sl = (..., shard_slice(sizes[0], grid.lat_index), shard_slice(sizes[1], grid.lon_index))
    opt_ref = torch.optim.Adam(ref.parameters(), lr=1e-2)
    opt_par = torch.optim.Adam(par.parameters(), lr=1e-2)
    gen = torch.Generator().manual_seed(11)
    for _ in range(steps):
        xs = torch.randn(2 * grid.n_data, 3, 2, n_lat, n_lon, generator=gen, dtype=torch.float64)
        ts = torch.randn(2 * grid.n_data, 2, 2, n_lat, n_lon, generator=gen, dtype=torch.float64)
        opt_ref.zero_grad()
        ((ref(xs) - ts) ** 2).mean().backward()
        opt_ref.step()
        mine = slice(2 * grid.replica, 2 * grid.replica + 2)
        opt_par.zero_grad()
        global_mean((par(xs[mine][sl]) - ts[mine][sl]) ** 2, grid).backward()
        reduce_gradients(par, grid)
        opt_par.step()
    fails = []
    for (name, p), q in zip(par.named_parameters(), ref.parameters()):
        fails += _close(f"[{tag}] trained {name}", p.detach(), q.detach(), 1e-10)
    return fails


def run_grids(grids: list[tuple[int, int, int, bool]]) -> list[str]:
    """Run the checks for each (data, lat, lon, with_training) grid in this world."""
    fails = []
    for data, lat, lon, training in grids:
        grid = ProcessGrid(lat=lat, lon=lon, data=data)
        tag = f"data={data} lat={lat} lon={lon}"
        fails += check_layers(grid, tag)
        fails += check_unets(grid, tag)
        if training:
            fails += check_training(grid, tag)
    return fails


def run_world2() -> dict:
    """Everything that needs two ranks, in one launch."""
    return dict(
        fails=run_grids([(1, 1, 2, True), (1, 2, 1, True)]),
        halo=run_halo_sides(),
        errors=run_errors(),
    )


def run_errors() -> list[str]:
    """Bad splits must raise the same EnsmlError on every rank (returned as messages)."""
    msgs = []
    grid = ProcessGrid(lat=1, lon=2)
    net = SpatialUNet3d(UNet3d(3, 2, width=2, depth=2), grid)
    for lon in ([6, 6], [4, 8]) if grid.rank == 0 else ([6, 6], [8, 4]):
        try:  # 12 columns as 6 + 6: not multiples of 4; then shards disagree on lat
            lat = 8 if lon == [6, 6] or grid.rank == 0 else 5
            net(torch.randn(1, 3, 2, lat, lon[grid.lon_index]))
            msgs.append("no error")
        except EnsmlError as e:
            msgs.append(str(e))
    conv = parallelize(nn.Conv3d(3, 3, 5, padding=4, dilation=2), grid)
    try:  # halo of 4 cells from a 3-cell shard
        conv(torch.randn(1, 3, 2, 4, 3))
        msgs.append("no error")
    except EnsmlError as e:
        msgs.append(str(e))
    try:
        ProcessGrid(lat=3, lon=1)
    except EnsmlError as e:
        msgs.append(str(e))
    return msgs


def run_failing_rank() -> None:
    """Rank 1 fails; rank 0 waits in a collective that never completes."""
    import torch.distributed as dist

    if dist.get_rank() == 1:
        raise AssertionError("deliberate failure on rank 1")
    dist.barrier()


def run_halo_sides() -> list[tuple[int, ...]]:
    """Exchange with two ranks on a periodic dim: both neighbours are the same rank."""
    from ensml.models.spatial import halo_exchange

    grid = ProcessGrid(lat=1, lon=2)
    x = torch.arange(5.0).view(1, 1, 1, 1, 5) + 10 * grid.rank
    lo = grid.neighbour(LON, -1, True)
    hi = grid.neighbour(LON, +1, True)
    y = halo_exchange(x, LON, lo, hi, 1, 2, 2, 1, grid.p2p_group)
    return tuple(int(v) for v in y.flatten())
