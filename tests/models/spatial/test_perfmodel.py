"""The performance model's arithmetic, the machine probe, and ``plan-parallel --machine``'s bad input."""

from __future__ import annotations

import hashlib
import math
from pathlib import Path

import pytest
import torch
from torch import nn

from ensml.cli.main import main
from ensml.errors import EnsmlError
from ensml.models.spatial import H100_NCCL, MachineModel, ShardStep, measure_machine, plan_parallel, predict
from ensml.models.spatial.calibrate import cache_bytes, compute_rates
from ensml.models.unet3d import UNet3d

pytestmark = pytest.mark.slow  # measures the machine with process groups

#: Round numbers: 1 GFLOP/s, 1 Gelem/s, 1 GB/s halo bandwidth, 100 us latency, no traffic term.
UNIT = MachineModel("unit", 1e9, 1e9, 1e9, 1e-4, 1e-5, cores=2)


def _conv_net(pad: bool = True) -> nn.Module:
    from ensml.models.layers import SphereConv3d

    return nn.Sequential(SphereConv3d(2, 2, 3, True)) if pad else nn.Sequential(nn.Conv3d(2, 2, 1))


def test_time_slicing_doubles_compute_of_four_ranks_on_two_cores() -> None:
    net = UNet3d(2, 2, width=4, depth=1)
    sample = (2, 2, 16, 32)
    alone = predict(net, sample, (1, 1, 1), UNIT)
    two = predict(net, sample, (2, 1, 1), UNIT)  # two replicas on two cores: each has its own
    four = predict(net, sample, (4, 1, 1), UNIT)  # four replicas on two cores: time-sliced
    assert two.compute_s == pytest.approx(alone.compute_s)
    assert four.compute_s == pytest.approx(2 * alone.compute_s)
    slow = MachineModel(**{**UNIT.__dict__, "contention": 1.25})
    assert predict(net, sample, (4, 1, 1), slow).compute_s == pytest.approx(2.5 * alone.compute_s)
    assert predict(net, sample, (1, 1, 1), slow).compute_s == pytest.approx(alone.compute_s)  # alone


def test_machine_share_with_threads_and_nominal_gpus() -> None:
    threads = MachineModel(**{**UNIT.__dict__, "threads_per_rank": 2})
    assert threads.share(2) == 2.0 and threads.share(1) == 1.0
    assert H100_NCCL.share(1024) == 1.0  # one GPU per rank


def test_halo_time_is_latency_plus_bytes_over_bandwidth() -> None:
    """One 3×3×3 sphere convolution, longitude split in two: one exchange forward, one backward."""
    sample = (2, 2, 8, 16)
    sync = MachineModel(**{**UNIT.__dict__, "sync_s": 3e-4})
    for machine in (UNIT, sync):
        pred = predict(_conv_net(), sample, (1, 1, 2), machine)
        (conv,) = [c for c in pred.layers if c.flops]
        b, c, d, h = 1, 2, 2, 8  # the shard's input (batch, channels, levels, latitudes)
        halo_cells = 2 * 1 * b * c * d * (h + 2)  # one column each side: latitudes + polar pad
        assert conv.halo_bytes == 4 * halo_cells
        expected = 2 * (machine.latency + machine.sync_s + conv.halo_bytes / machine.bandwidth)
        assert conv.comm_s == pytest.approx(expected)
        assert pred.halo_s == pytest.approx(expected)
    assert predict(_conv_net(), sample, (1, 1, 1), UNIT).halo_s == 0.0
    lat_lon = predict(_conv_net(), sample, (1, 2, 2), sync)  # two exchanges: two latencies each way
    (conv,) = [c for c in lat_lon.layers if c.flops]  # one wait: the second finds the neighbours there
    expected = 2 * (2 * sync.latency + sync.sync_s + conv.halo_bytes / sync.bandwidth)
    assert conv.comm_s == pytest.approx(expected)


def test_step_is_the_sum_of_its_parts_and_conv_traffic_is_piecewise() -> None:
    pred = predict(UNet3d(2, 2, width=4, depth=1, norm_groups=2), (2, 2, 16, 32), (2, 1, 2), UNIT)
    parts = pred.compute_s + pred.halo_s + pred.norm_s + pred.grad_allreduce_s
    assert pred.step_s == pytest.approx(parts) and pred.norm_s > 0 and pred.grad_allreduce_s > 0
    cpu = MachineModel(**{**UNIT.__dict__, "conv_bandwidth": 1e10, "conv_memory_bandwidth": 1e9})
    cpu = MachineModel(**{**cpu.__dict__, "cache_bytes": 1e6})
    assert cpu.conv_traffic_s(5e5, 1) == pytest.approx(3 * 5e5 / 1e10)
    assert cpu.conv_traffic_s(3e6, 1) == pytest.approx(3 * (1e6 / 1e10 + 2e6 / 1e9))
    assert cpu.conv_traffic_s(1e6, 2) == pytest.approx(3 * (5e5 / 1e10 + 5e5 / 1e9))  # cache shared
    assert UNIT.conv_traffic_s(1e12, 4) == 0.0


def test_plan_keeps_nominal_h100_by_default() -> None:
    plan = plan_parallel(UNet3d(2, 2, width=4, depth=1), 2, 16, 32, 4)
    assert plan.machine is H100_NCCL and plan.recommended is not None
    assert "allreduce" in plan.table()


def _finite_positive(model: MachineModel, *names: str) -> None:
    for name in names:
        value = getattr(model, name)
        assert math.isfinite(value) and value > 0, (name, value)


def test_compute_rates_and_cache() -> None:
    assert cache_bytes() > 0
    rates = compute_rates(threads=1, repeats=1)
    assert rates["conv_flops"] > 0 and rates["elem_rate"] > 0 and rates["conv_bandwidth"] > 0


@pytest.mark.timeout(120)
def test_measure_machine_two_ranks_is_positive_and_finite() -> None:
    machine = measure_machine(2, repeats=2, sizes=(4, 4096))
    _finite_positive(machine, "conv_flops", "elem_rate", "latency", "allreduce_latency", "memory_gib")
    assert machine.bandwidth > 0 and machine.contention >= 1.0 and machine.sync_s >= 0.0
    assert machine.cores >= 1 and machine.threads_per_rank == 1 and "measured" in machine.name
    pred = predict(UNet3d(2, 2, width=4, depth=1), (2, 2, 16, 32), (1, 1, 2), machine)
    assert math.isfinite(pred.step_s) and pred.step_s > 0


def test_measure_machine_rejects_bad_arguments() -> None:
    with pytest.raises(EnsmlError, match="ranks must be 1"):
        measure_machine(0)
    with pytest.raises(EnsmlError, match="gloo with cpu or nccl with cuda"):
        measure_machine(2, backend="nccl", device="cpu")
    with pytest.raises(EnsmlError, match="threads_per_rank"):
        measure_machine(2, threads_per_rank=0)


def _hashes(root: Path) -> dict[str, str]:
    return {
        str(p): hashlib.sha256(p.read_bytes()).hexdigest() if p.is_file() else "dir"
        for p in sorted(root.rglob("*"))
    }


PLAN = ["plan-parallel", "--n_lat", "16", "--n_lon", "32", "--n_level", "2"]


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (
            ["--devices", "100", "--machine", "measured"],
            ("--machine measured", "at most 64 devices, got 100"),
        ),
        (["--devices", "2", "--machine", "bogus"], ("--machine", "'bogus'")),
        (["--devices", "2", "--machine", "measured", "--threads_per_rank", "0"], ("--threads_per_rank",)),
        (["--devices", "2", "--machine", "measured", "--forecast", "nowhere.nc"], ("nowhere.nc",)),
    ],
    ids=["measured too many devices", "machine unknown", "threads zero", "forecast missing"],
)
def test_plan_parallel_machine_bad_input(args, says, tmp_path, monkeypatch, capsys) -> None:
    """One ``ensml:`` line, exit status 1, the user's files byte-identical, nothing spawned."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "forecast.nc").write_bytes(b"CDF\x01 user's forecast")
    (tmp_path / ".plan.abc123.tmp").write_text("hidden user file\n")
    (tmp_path / "notes").mkdir()
    (tmp_path / "notes" / "plan.md").write_text("# my plans\n")
    before = _hashes(tmp_path)
    assert main([*PLAN, *args]) == 1
    lines = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("ensml: ") and "Traceback" not in lines[0], lines
    for text in says:
        assert text in lines[0], lines[0]
    assert _hashes(tmp_path) == before


def test_torch_threads_restored_after_probe() -> None:
    old = torch.get_num_threads()
    compute_rates(threads=1, repeats=1)
    assert torch.get_num_threads() == old


def test_measured_step_replaces_compute_and_calibrates_the_wait() -> None:
    net, sample = UNet3d(2, 2, width=4, depth=1, norm_groups=2), (2, 2, 16, 32)
    two = predict(net, sample, (1, 1, 2), UNIT, measured=ShardStep(0.5))  # two ranks, two cores
    assert two.compute_s == pytest.approx(0.5)
    assert sum(c.compute_s for c in two.layers) == pytest.approx(0.5)
    bare = predict(net, sample, (1, 1, 4), UNIT, measured=ShardStep(0.25))  # four ranks time-slice two cores
    assert bare.compute_s == pytest.approx(0.5)
    # 0.1 s more in exchanges than latency and bytes: one equal wait at each synchronisation
    modelled = bare.halo_s + bare.norm_s
    timed = predict(net, sample, (1, 1, 4), UNIT, measured=ShardStep(0.25, modelled + 0.1))
    assert timed.halo_s + timed.norm_s == pytest.approx(modelled + 0.1)
    syncs = [2 * (c.messages > 0) + c.allreduces for c in bare.layers]
    assert sum(syncs) > 0 and any(c.allreduces for c in bare.layers)
    for b, t, n in zip(bare.layers, timed.layers, syncs):
        assert t.comm_s + t.reduce_s - b.comm_s - b.reduce_s == pytest.approx(0.1 * n / sum(syncs))
    # less than latency and bytes: they scale down, no negative wait
    for measured in (modelled / 2, 0.0):
        fast = predict(net, sample, (1, 1, 4), UNIT, measured=ShardStep(0.25, measured))
        assert fast.halo_s + fast.norm_s == pytest.approx(measured) and fast.halo_s <= bare.halo_s
    sync = MachineModel(**{**UNIT.__dict__, "sync_s": 3e-4})
    assert sync.sync_wait(2) == sync.sync_wait(4) == 3e-4 and sync.sync_wait(1) == 0.0


def test_measure_shard_step_trains_the_busiest_rank_shard(monkeypatch) -> None:
    """The probe trains the padded shard of ``shard_shape`` through the partitioned layers."""
    from ensml.models.spatial import shard_step
    from ensml.models.spatial.perfmodel import shard_shape

    net = UNet3d(2, 2, width=2, depth=1)
    shapes, calls = [], []
    real_randn = torch.randn
    monkeypatch.setattr(torch, "randn", lambda *a, **k: shapes.append(tuple(a[0])) or real_randn(*a, **k))

    def once(fns, repeats, dev):
        calls.append(repeats)
        return [[fn() or 0.25] for fn in fns]

    monkeypatch.setattr(shard_step, "_alternating_times", once)
    threads = torch.get_num_threads()
    step = shard_step.measure_shard_step(net, (2, 2, 16, 64), (1, 1, 1), repeats=3)
    assert step == shard_step.ShardStep(0.25, None) and calls == [3]
    assert shard_step._shard_step_times(net, (2, 2, 16, 64), (1, 1, 2), 1, 1, 3, "cpu") == ([0.25], [])
    assert shapes[-1] == shard_shape(net, (2, 2, 16, 64), (1, 1, 2), 1) == (1, 2, 2, 16, 32)
    assert torch.get_num_threads() == threads  # the probe restores torch's thread count


@pytest.mark.parametrize(("grid", "divisor"), [((1, 1, 2), 1.0), ((1, 2, 2), 2.0)])
def test_measure_shard_step_takes_the_slowest_rank_and_divides_out_time_slicing(
    monkeypatch, grid, divisor
) -> None:
    """Per repetition the slowest rank; the median over repetitions; four one-thread ranks on
    two cores share them, so one rank's compute alone is half of it."""
    from ensml.models.spatial import shard_step

    ranks = [([2.0, 4.0, 1.0], [3.0, 5.0, 2.0]), ([3.0, 1.0, 2.0], [4.0, 2.0, 2.5])]
    monkeypatch.setattr(shard_step, "run_distributed", lambda *a, **k: ranks)
    monkeypatch.setattr(shard_step, "cores", lambda device: 2)
    step = shard_step.measure_shard_step(UNet3d(2, 2, width=2, depth=1), (2, 2, 16, 64), grid)
    # slowest free: 3, 4, 2 -> median 3; slowest real: 4, 5, 2.5 -> median 4
    assert step.compute_s == pytest.approx(3.0 / divisor) and step.exchange_s == pytest.approx(1.0)


@pytest.mark.timeout(120)
def test_measure_shard_step_on_two_ranks_times_the_exchanges() -> None:
    from ensml.models.spatial.shard_step import measure_shard_step

    step = measure_shard_step(UNet3d(2, 2, width=2, depth=1), (2, 2, 16, 64), (1, 1, 2), repeats=1)
    assert 0 < step.compute_s < 60 and step.exchange_s is not None and 0 <= step.exchange_s < 60


def test_plan_parallel_on_the_measured_machine_runs(capsys) -> None:
    """Spawned probes get plain numbers, not jsonargparse's run-time range types."""
    args = ["plan-parallel", "--devices", "2", "--n_lat", "16", "--n_lon", "32", "--n_level", "2"]
    assert main([*args, "--width", "2", "--depth", "1", "--machine", "measured"]) == 0
    out = capsys.readouterr().out
    assert "(measured)" in out and "recommended: data=" in out
