"""``ensml plan-parallel``: recommend a spatial × data split of the devices for a U-Net task."""

from __future__ import annotations

from typing import Literal

import torch

from ensml.errors import EnsmlError
from ensml.models.spatial import plan_parallel
from ensml.models.spatial.perfmodel import H100_NCCL
from ensml.models.unet3d import UNet3d


def plan_parallel_cli(
    devices: int,
    forecast: str | None = None,
    n_lat: int | None = None,
    n_lon: int | None = None,
    n_level: int | None = None,
    n_var: int = 2,
    n_lead: int = 3,
    task: Literal["mixed", "spread"] = "mixed",
    width: int = 16,
    depth: int = 3,
    kernel_size: int = 3,
    batch_size: int = 1,
    memory_gib: float | None = None,
) -> None:
    """Print the predicted cost of every data × lat × lon split of ``devices`` ranks.

    Parameters
    ----------
    devices
        Number of ranks (GPUs) to split.
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
        Memory per device in GiB (default: that of the machine model, 80).
    """
    if forecast is not None:
        from ensml.data.open import open_forecast
        from ensml.names import LATITUDE, LEVEL, LONGITUDE

        fc = open_forecast(forecast, chunks={})
        n_lat = n_lat or fc.sizes[LATITUDE]
        n_lon = n_lon or fc.sizes[LONGITUDE]
        n_level = n_level or fc.sizes[LEVEL]
    if not (n_lat and n_lon and n_level):
        raise EnsmlError("plan-parallel: give --forecast FILE or all of --n_lat, --n_lon, --n_level")
    mixed = task == "mixed"
    in_channels = 2 * n_var * n_lead + (n_var if mixed else 0)
    with torch.device("meta"):  # shapes and parameter counts only: no memory for the weights
        model = UNet3d(
            in_channels, (2 if mixed else 1) * n_var, width=width, depth=depth, kernel_size=kernel_size
        )
    plan = plan_parallel(
        model, n_level, n_lat, n_lon, devices, batch_size=batch_size, machine=H100_NCCL, memory_gib=memory_gib
    )
    sample = f"{in_channels} channels × {n_level} levels × {n_lat} × {n_lon}"
    print(f"sample: {sample}; U-Net width {width}, depth {depth}")
    print(plan.table())
