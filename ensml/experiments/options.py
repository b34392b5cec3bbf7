"""Options of ``ensml benchmark``: the embedded dataset it trains on and the models of the zoo.

Plain dataclasses (no torch, no xarray), so the command line reads its types without loading
the libraries that train the models.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from ensml.seeds import Seed


@dataclass
class SynthOptions:
    """Options of the embedded dataset (see :func:`ensml.data.synth.generate.synth`)."""

    n_lat: int = 32
    n_lon: int = 64
    levels: list[int] = field(default_factory=lambda: [500, 850])
    leads: list[int | str] = field(default_factory=lambda: [0, 12, 24, 36, 48])
    members: int = 10
    start: str = "2017-01-01"
    end: str = "2020-12-31"
    every_days: int = 2
    storms_per_year: float = 6.0
    seed: Seed = 0
    surface: bool = False
    precip_wind: bool = False
    oracle_members: int = 0


@dataclass
class PhysicsOptions:
    """Options of the physics testbed (see :func:`ensml.data.physics.generate.physics`)."""

    truncation: Literal["T21", "T31", "T42"] = "T21"
    layers: int = 8
    levels: list[int] = field(default_factory=lambda: [500, 850])
    leads: list[int | str] = field(default_factory=lambda: [0, 12, 24, 36, 48])
    members: int = 10
    start: str = "2000-01-01"
    inits: int = 360
    every_hours: int = 24
    spinup_days: int = 120
    seed: Seed = 0


@dataclass
class ModelSpec:
    """One neural model of the benchmark: a task, a network and its training budget.

    ``options`` are further arguments of the task (:class:`~ensml.train.tasks.MixedTask` or
    :class:`~ensml.train.tasks.SpreadTask`), e.g. ``{location_inputs: true, local_affine: true,
    scheme: two_stage}``, ``{loss: l1_msssim}`` or a mixed model's families ``{distribution:
    {tp: csg0, si10: truncnormal}}`` (a variable not named takes its default family).
    ``patience``: stop when the validation loss has not improved for this many epochs (None:
    train ``max_epochs``); the weights of the best validation epoch are the ones scored.
    """

    name: str
    task: Literal["mixed", "spread"] = "mixed"
    arch: str = "unet3d"
    width: int = 16
    depth: int = 3
    lr: float = 2e-3
    max_epochs: int = 8
    patience: int | None = None
    arch_options: dict | None = None
    options: dict | None = None


@dataclass
class GenerativeSpec:
    """The generative network of the generative benchmark (:class:`~ensml.train.generative.GenerativeTask`).

    ``options`` are further arguments of the task, e.g. ``{es_weight: 1.0, patch: 8,
    train_members: 4, noise_scales: [1, 4, 16], location_inputs: true, local_affine: true}``.
    ``patience``: stop when the validation CRPS has not improved for this many epochs (None:
    train ``max_epochs``); the weights of the best validation epoch are the ones scored.
    """

    name: str = "generative U-Net"
    width: int = 16
    depth: int = 3
    lr: float = 2e-3
    max_epochs: int = 8
    patience: int | None = None
    options: dict | None = None


@dataclass
class EmosSpec:
    """One EMOS variant of the benchmark: ``global`` or ``local`` coefficients, in each variable's family.

    ``distribution`` maps variables to families as a mixed model's option does (e.g. ``{tp:
    normal, si10: normal}`` for a Gaussian EMOS of precipitation and wind); a variable not named
    takes its default family (:data:`ensml.names.DEFAULT_FAMILIES`: ``tp`` csg0, ``si10``
    truncnormal, the rest normal), so the plain entries ``global`` and ``local`` are EMOS in the
    right family of every variable (Gaussian for z and t). ``name`` is the table's name before
    the family (default ``global EMOS`` or ``local EMOS``).
    """

    mode: Literal["global", "local"] = "local"
    distribution: dict[str, str] | None = None
    name: str | None = None


@dataclass
class StationModelSpec:
    """One station DRN of the station benchmark (``ensml benchmark`` with ``stations``): its row
    name, what it reads beyond the station table (``predictors`` such as ``[z850, t850]``, each
    as its subset mean and gradient at the station), the table's features it leaves out
    (``drop_features``, e.g. ``[doy_sin, doy_cos]`` in a world without seasons), each
    variable's family (``distribution``, e.g. ``{si10: bqn}`` for the distribution-free head; a
    variable not named takes its default) and its network and fit (as ``ensml fit`` with a
    station config: :func:`ensml.train.station_fit.fit_stations`).
    """

    name: str
    predictors: list[str] = field(default_factory=list)
    drop_features: list[str] = field(default_factory=list)
    distribution: dict[str, str] | None = None
    hidden: list[int] = field(default_factory=lambda: [64])
    embedding_dim: int = 2
    epochs: int = 300
    batch_size: int = 4096
    lr: float = 5e-3
    patience: int = 20


@dataclass
class GridToPointSpec:
    """The grid-to-point U-Net of the station benchmark (:mod:`ensml.train.grid_to_point`): the
    gridded mixed network (location inputs and the per-point affine layer) reading the station
    variables and the pressure-level ``inputs`` at ``levels`` (ensml stacks variables over
    levels: one at least), trained on the CRPS at the stations of its distribution interpolated
    there (``extraction``), with early stopping on the last ``val_share`` of the training init
    times; ``width``, ``depth``, ``lr``, ``max_epochs``, ``patience`` and ``batch_size`` as a
    benchmark model's.
    """

    name: str = "grid-to-point U-Net"
    inputs: list[str] = field(default_factory=lambda: ["z"])
    levels: list[int] = field(default_factory=lambda: [850])
    input_leads: list[int | str] = field(default_factory=lambda: [0, 24, 48])
    extraction: Literal["nearest", "bilinear"] = "nearest"
    width: int = 8
    depth: int = 2
    lr: float = 2e-3
    max_epochs: int = 20
    patience: int | None = 5
    batch_size: int = 8
    val_share: float = 0.15


def check_threads(threads: int) -> int:
    """``threads`` as an int, refused in one line unless it is between 1 and this machine's cores
    (the ``threads`` option of both benchmarks)."""
    import os

    from ensml.errors import EnsmlError

    cores = os.cpu_count() or 1
    if not 1 <= int(threads) <= cores:
        raise EnsmlError(f"benchmark: threads {threads} must be between 1 and this machine's {cores} cores")
    return int(threads)


DEFAULT_MODELS = [
    ModelSpec("U-Net mixed", "mixed", "unet3d"),
    ModelSpec("temporal U-Net mixed", "mixed", "unet3d_time"),
    ModelSpec("U-Net spread", "spread", "unet3d"),
    ModelSpec("temporal U-Net spread", "spread", "unet3d_time"),
]


__all__ = [
    "DEFAULT_MODELS",
    "EmosSpec",
    "GridToPointSpec",
    "ModelSpec",
    "PhysicsOptions",
    "StationModelSpec",
    "SynthOptions",
    "check_threads",
]
