"""Ranges of the tasks' numeric options, checked by jsonargparse where the options are declared.

A value out of range is a one-line usage error (``ensml fit --model.init_args.width -4``:
``option --model.init_args.width: -4 is out of range (must be >= 1 and <= 4096)``) before
anything is built or written. Task constructors convert the values back to plain ``int`` and
``float`` (:func:`ensml.train.hparams.plain_hparams`), so checkpoints and ``hparams.yaml`` hold
no jsonargparse types.
"""

from __future__ import annotations

import importlib.util
from typing import Any

from jsonargparse.typing import (
    NonNegativeFloat,
    NonNegativeInt,
    PositiveFloat,
    PositiveInt,
    restricted_number_type,
)

from ensml.errors import EnsmlError
from ensml.machine import PER_CORE, cpu_cores

#: U-Net base width (channels of the first block; doubled at each pooling).
Width = restricted_number_type("Width", int, [(">=", 1), ("<=", 4096)])
#: U-Net depth (number of poolings).
Depth = restricted_number_type("Depth", int, [(">=", 0), ("<=", 12)])
#: Convolution kernel size.
KernelSize = restricted_number_type("KernelSize", int, [(">=", 1), ("<=", 31)])

__all__ = [
    "ACCELERATORS",
    "Depth",
    "KernelSize",
    "NonNegativeFloat",
    "NonNegativeInt",
    "PositiveFloat",
    "PositiveInt",
    "Width",
    "check_trainer_options",
]


#: What ``--trainer.accelerator`` may name (besides an Accelerator object).
ACCELERATORS = ("auto", "cpu", "cuda", "gpu", "mps", "tpu")


def check_trainer_options(trainer: Any) -> None:
    """Raise :class:`EnsmlError` for ``--trainer.*`` values this machine cannot honour.

    Lightning declares these options; it reports an impossible one with a traceback (an
    unknown or absent accelerator) or starts as many processes as asked (``devices=100000``).
    """
    _check_strategy(trainer.get("strategy", "auto"))
    accelerator = trainer.get("accelerator", "auto")
    if isinstance(accelerator, str):
        _check_accelerator(accelerator.lower())
        if accelerator.lower() in ("cpu", "auto"):
            _check_cpu_devices(trainer.get("devices", "auto"), accelerator.lower())


def _check_accelerator(name: str) -> None:
    import torch

    if name not in ACCELERATORS:
        raise EnsmlError(f"option --trainer.accelerator: {name!r} is not one of {', '.join(ACCELERATORS)}")
    if name in ("gpu", "cuda") and not torch.cuda.is_available():
        raise EnsmlError("no GPU on this machine; use --trainer.accelerator cpu")
    if name == "mps" and not torch.backends.mps.is_available():
        raise EnsmlError("no Apple GPU (MPS) on this machine; use --trainer.accelerator cpu")
    if name == "tpu" and importlib.util.find_spec("torch_xla") is None:
        raise EnsmlError("no TPU on this machine (torch_xla is not installed); use --trainer.accelerator cpu")


def _check_strategy(strategy: Any) -> None:
    """A strategy given as text must be a registered name (a class whose arguments did not fit
    its signature also arrives here as text, as jsonargparse falls back to ``str``)."""
    if not isinstance(strategy, str) or strategy == "auto":
        return
    from lightning.pytorch.strategies import StrategyRegistry

    if strategy.lower() not in StrategyRegistry:
        names = ", ".join(
            n for n in ("ddp", "eager_solo", "eager_majority", "wagma") if n in StrategyRegistry
        )
        raise EnsmlError(
            f"option --trainer.strategy: {strategy!r} is neither a strategy name (e.g. {names}) nor a "
            "strategy class_path whose init_args fit it (see ensml fit --trainer.strategy.help CLASS)"
        )


def _check_cpu_devices(devices: Any, accelerator: str) -> None:
    import torch

    if accelerator == "auto" and torch.cuda.is_available():
        return
    try:
        count = int(devices)
    except (TypeError, ValueError):  # "auto", a list of device ids: Lightning checks those
        return
    cap = PER_CORE * cpu_cores()
    if count > cap:
        raise EnsmlError(
            f"option --trainer.devices: {count} CPU processes is more than this machine can run "
            f"({cap}: {PER_CORE} per CPU core, {cpu_cores()} cores)"
        )
