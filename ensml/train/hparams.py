"""What a checkpoint must share with the data it is applied to."""

from __future__ import annotations

from typing import Any

import numpy as np

from ensml.errors import EnsmlError
from ensml.times import format_leads, parse_leads

#: Hyperparameters a checkpoint must share with the data it is applied to.
DATA_KEYS = ("variables", "levels", "input_leads", "target_leads", "k", "static_variables")
#: The lead-time keys among them: compared as lead times (``24`` equals ``"24h"`` and ``"P1D"``).
LEAD_KEYS = ("input_leads", "target_leads")
#: Hyperparameters of how a generative task draws members (:mod:`ensml.train.generative`): no
#: weight depends on them, so a checkpoint is applied with any value.
SAMPLING_KEYS = ("n_members", "sample_seed")
#: Checkpoint entry holding the training grid (latitude, longitude) and ensemble size.
GRID_KEY = "ensml_grid"


def check_compatible(saved: dict[str, Any], current: dict[str, Any], what: str) -> None:
    """Raise if a checkpoint was trained for other variables, levels, leads or subset size."""

    def norm(v: Any) -> Any:
        if isinstance(v, list | tuple):
            return [norm(x) for x in v]
        return float(v) if isinstance(v, int | float) else str(v)

    for key in DATA_KEYS:
        a, b = saved.get(key, [] if key == "static_variables" else None), current.get(key)
        if a is None or b is None:
            continue
        if key in LEAD_KEYS:
            if not np.array_equal(parse_leads(a), parse_leads(b)):
                raise EnsmlError(
                    f"{what} was trained with {key} {format_leads(a)} but the data has {format_leads(b)}"
                )
        elif norm(a) != norm(b):
            raise EnsmlError(f"{what} was trained with {key}={a!s} but the data has {key}={b!s}")


def plain_hparams(module: Any) -> None:
    """Turn the range-checked option values (jsonargparse's ``PositiveInt`` …) in ``module``'s
    saved hyperparameters back into plain ``int`` and ``float`` (checkpoints, ``hparams.yaml``)."""

    def plain(v: Any) -> Any:
        if isinstance(v, bool) or type(v) in (int, float):
            return v
        if isinstance(v, int | float):
            return int(v) if isinstance(v, int) else float(v)
        return v

    for hparams in (module.hparams, getattr(module, "_hparams_initial", {})):
        for key in list(hparams):
            hparams[key] = plain(hparams[key])


__all__ = ["DATA_KEYS", "GRID_KEY", "LEAD_KEYS", "SAMPLING_KEYS", "check_compatible", "plain_hparams"]
