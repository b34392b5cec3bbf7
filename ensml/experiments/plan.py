"""``ensml plan-parallel``: recommend a spatial × data split of the devices for a U-Net task."""

from __future__ import annotations

from typing import Literal

import torch
from jsonargparse.typing import PositiveFloat, restricted_number_type

from ensml.errors import EnsmlError
from ensml.models.spatial import plan_parallel
from ensml.models.spatial.calibrate import measure_machine
from ensml.models.spatial.perfmodel import H100_NCCL, MachineModel
from ensml.models.unet3d import UNet3d
from ensml.train.options import Depth, KernelSize, Width

#: Ranks to plan for (a million GPUs is beyond any machine; more would take hours to tabulate).
Devices = restricted_number_type("Devices", int, [(">=", 1), ("<=", 1_000_000)])
#: Grid points along one axis of a sample.
GridSize = restricted_number_type("PlanGridSize", int, [(">=", 1), ("<=", 100_000)])
#: Variables, lead times, batch size.
Count = restricted_number_type("Count", int, [(">=", 1), ("<=", 10_000)])
#: Intra-op threads of each rank of a measured machine.
Threads = restricted_number_type("PlanThreads", int, [(">=", 1), ("<=", 1024)])
#: Most ranks ``--machine measured`` spawns on this machine (one process per device).
MAX_MEASURED = 64


def _measured_machine(devices: int) -> tuple[str, str]:
    """(backend, device) of ``--machine measured``, or a one-line error before anything runs."""
    if devices > MAX_MEASURED:
        raise EnsmlError(
            f"plan-parallel: --machine measured runs one process per device on this machine: "
            f"at most {MAX_MEASURED} devices, got {devices} (use --machine h100 to plan a GPU cluster)"
        )
    if torch.cuda.is_available():
        gpus = torch.cuda.device_count()
        if devices > gpus:
            raise EnsmlError(
                f"plan-parallel: --machine measured on CUDA needs one GPU per device: "
                f"{gpus} GPU(s) here, got --devices {devices}"
            )
        return "nccl", "cuda"
    return "gloo", "cpu"


#: A shard is timed (``--machine measured``) while its activations take at most this share of the
#: memory available now; a larger one keeps the FLOP-rate estimate.
MEASURE_SHARE = 0.25


def shard_compute(model, sample, batch_size: int, threads: int, device: str):
    """``compute(split, prediction)`` for :func:`plan_parallel`: one rank's shard step of each
    split, timed with and without its halo exchanges, where its activations fit comfortably in
    memory now."""
    from ensml.models.memory_plan import free_memory
    from ensml.models.spatial.perfmodel import ShardStep
    from ensml.models.spatial.shard_step import measure_shard_step

    cache: dict[tuple, ShardStep | None] = {}
    room = MEASURE_SHARE * free_memory(device)

    def compute(split, prediction):
        if split not in cache:
            cache[split] = None
            if prediction.activation_bytes + prediction.state_bytes <= room:
                print(
                    f"timing the shard step of data × lat × lon = {' × '.join(map(str, split))} ...",
                    flush=True,
                )
                cache[split] = measure_shard_step(model, sample, split, batch_size, threads, device=device)
        return cache[split]

    return compute


def plan_parallel_cli(
    devices: Devices,
    forecast: str | None = None,
    n_lat: GridSize | None = None,
    n_lon: GridSize | None = None,
    n_level: GridSize | None = None,
    n_var: Count = 2,
    n_lead: Count = 3,
    task: Literal["mixed", "spread"] = "mixed",
    width: Width = 16,
    depth: Depth = 3,
    kernel_size: KernelSize = 3,
    batch_size: Count = 1,
    memory_gib: PositiveFloat | None = None,
    machine: Literal["h100", "measured"] = "h100",
    threads_per_rank: Threads = 1,
) -> None:
    """Print the predicted cost of every data × lat × lon split of ``devices`` ranks.

    Parameters
    ----------
    devices
        Number of ranks (GPUs) to split, 1 … 1e6.
    forecast
        A forecast file whose latitude/longitude/level sizes to use (or give the sizes below).
    n_lat
        Latitudes of one sample (overrides the file's).
    n_lon
        Longitudes of one sample (overrides the file's).
    n_level
        Pressure levels of one sample (overrides the file's).
    n_var
        Variables of one sample (sets the U-Net's channels).
    n_lead
        Input lead times of one sample (sets the U-Net's channels).
    task
        ``mixed`` (post-processing: also feeds the analysis, predicts mean and std) or
        ``spread`` (predicts the std only).
    width
        U-Net width, as ``model.init_args.width`` of the fit config.
    depth
        U-Net depth (number of poolings), as ``model.init_args.depth``.
    kernel_size
        Convolution kernel size, as ``model.init_args.kernel_size``.
    batch_size
        Samples per replica per step (``data.batch_size``).
    memory_gib
        Memory per device in GiB (default: that of the machine model: 80 for ``h100``; for
        ``measured``, the GPU's, or the host's RAM shared by the ranks).
    machine
        ``h100``: nominal H100 + NCCL rates (plan a GPU cluster). ``measured``: this machine,
        measured now in a few seconds with ``devices`` processes (CUDA + NCCL where there is a
        GPU per device, else CPU + gloo): compute rates, halo latency and bandwidth, and the
        slowdown of ranks sharing cores (at most 64 devices).
    threads_per_rank
        Intra-op threads of each rank, for ``--machine measured``.
    """
    # Plain numbers: jsonargparse's range types are made at run time and cannot be unpickled
    # by the processes that --machine measured spawns.
    devices, batch_size, threads_per_rank = int(devices), int(batch_size), int(threads_per_rank)
    n_var, n_lead, width, depth, kernel_size = (
        int(n_var),
        int(n_lead),
        int(width),
        int(depth),
        int(kernel_size),
    )
    n_lat, n_lon, n_level = (None if v is None else int(v) for v in (n_lat, n_lon, n_level))
    if machine == "measured":  # checked before the forecast is opened or anything is spawned
        backend, device = _measured_machine(devices)
    if forecast is not None:
        from ensml.data.open import open_forecast
        from ensml.names import LATITUDE, LEVEL, LONGITUDE

        fc = open_forecast(forecast, chunks={})
        n_lat = n_lat or fc.sizes[LATITUDE]
        n_lon = n_lon or fc.sizes[LONGITUDE]
        n_level = n_level or fc.sizes[LEVEL]
    if not (n_lat and n_lon and n_level):
        raise EnsmlError("plan-parallel: give --forecast FILE or all of --n_lat, --n_lon, --n_level")
    rates: MachineModel = H100_NCCL
    if machine == "measured":
        print(f"measuring this machine with {devices} {device} rank(s) ({backend}) ...", flush=True)
        rates = measure_machine(devices, backend, device, threads_per_rank)
        print(f"measured: {rates.describe()}")
    mixed = task == "mixed"
    in_channels = 2 * n_var * n_lead + (n_var if mixed else 0)
    with torch.device("meta"):  # shapes and parameter counts only: no memory for the weights
        model = UNet3d(
            in_channels, (2 if mixed else 1) * n_var, width=width, depth=depth, kernel_size=kernel_size
        )
    compute = None
    if machine == "measured":
        real = UNet3d(
            in_channels, (2 if mixed else 1) * n_var, width=width, depth=depth, kernel_size=kernel_size
        )
        compute = shard_compute(
            real, (in_channels, n_level, n_lat, n_lon), batch_size, threads_per_rank, device
        )
    plan = plan_parallel(
        model,
        n_level,
        n_lat,
        n_lon,
        devices,
        batch_size=batch_size,
        machine=rates,
        memory_gib=memory_gib,
        compute=compute,
    )
    sample = f"{in_channels} channels × {n_level} levels × {n_lat} × {n_lon}"
    print(f"sample: {sample}; U-Net width {width}, depth {depth}")
    print(plan.table())
