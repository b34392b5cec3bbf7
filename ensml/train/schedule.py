"""Optimiser and learning-rate schedule of the tasks.

AdamW with a linear warm-up over the first 5% of the steps, then a cosine decay to 1% of the
peak rate at the last step of ``trainer.max_epochs``: the rate is small when training ends, so
the last epochs refine instead of jumping around. The factor is a function of the step count
alone, so a resumed run continues the same curve (and a resumed run with more epochs stretches
it). Early stopping (``EarlyStopping`` on ``val/loss`` in the configs) may end a run sooner;
the schedule does not depend on it.

Per-grid-point weights (:class:`~ensml.models.local.LocalAffine`) learn from one point's errors
each, so their gradients are noisier and smaller than a convolution's; they get their own
parameter group with ``local_lr_factor`` times the rate and no weight decay (decay would pull
their slopes towards 0 instead of 1).
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import Any

import torch
from torch import nn


def warmup_cosine(total_steps: int, warmup_fraction: float = 0.05, floor: float = 0.01):
    """The factor of the peak rate at each step: linear warm-up, then cosine decay to ``floor``."""
    total = max(1, int(total_steps))
    warmup = max(1, int(total * warmup_fraction))

    def factor(step: int) -> float:
        if step < warmup:
            return (step + 1) / warmup
        progress = min(1.0, (step - warmup) / max(1, total - warmup))
        return floor + (1.0 - floor) * 0.5 * (1.0 + math.cos(math.pi * progress))

    return factor


def configure(
    parameters: Iterable[nn.Parameter],
    local: Iterable[nn.Parameter],
    lr: float,
    weight_decay: float,
    local_lr_factor: float,
    total_steps: int,
) -> dict[str, Any]:
    """AdamW over ``parameters`` (and ``local`` ones at ``local_lr_factor × lr``, no decay), stepped
    per batch by :func:`warmup_cosine` over ``total_steps``; Lightning's optimiser config dict."""
    local = list(local)
    local_ids = {id(p) for p in local}
    groups = [{"params": [p for p in parameters if id(p) not in local_ids]}]
    if local:
        groups.append({"params": local, "lr": lr * local_lr_factor, "weight_decay": 0.0})
    opt = torch.optim.AdamW(groups, lr=lr, weight_decay=weight_decay)
    factor = warmup_cosine(total_steps)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, [factor] * len(groups))
    return {"optimizer": opt, "lr_scheduler": {"scheduler": sched, "interval": "step"}}


__all__ = ["configure", "warmup_cosine"]
