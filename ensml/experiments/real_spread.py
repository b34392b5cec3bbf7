"""Sanity check on real data: learn the 10-member spread of the ERA5 EDA from 5-member subsets.

The GRIB file (10 members × 4 analysis times × 2 levels, 3° global) is read through ensml's own
reader (:func:`ensml.data.open.open_forecast` → cfgrib), each analysis time being an init time
with a single lead of 0 h. Samples are distinct 5-member subsets of the training times; the
target is the std (ddof 0) of all 10 members. A :class:`~ensml.train.tasks.SpreadTask` is
trained on the first times and scored on the last one over every subset, beside the subset's
own sample std with and without the small-sample correction (ddof 1 / ddof 0). Four times are a
tiny sample: this is a check that the pipeline runs on real data, not a result.

Run: ``python -m ensml.experiments.real_spread --grib ../shared/data/real/cfgrib/era5-levels-members.grib``
(``--quiet`` / ``--verbose`` as for every ``ensml`` command).
"""

from __future__ import annotations

import itertools
import sys

import lightning as L
import numpy as np
import pandas as pd
import torch

from ensml.data.open import check_members, open_forecast
from ensml.data.weights import latitude_weights
from ensml.errors import EnsmlError
from ensml.names import DEFAULT_K, INIT_TIME, LATITUDE, LEAD_TIME, LEVEL, MEMBER
from ensml.progress import Progress, note
from ensml.train.tasks import SpreadTask
from ensml.verify.tables import to_markdown


def _batch(x: np.ndarray, subsets: np.ndarray) -> dict[str, torch.Tensor]:
    """Batch of SpreadTask inputs from fields ``x`` (V, M, D, H, W) and subsets (B, K)."""
    sub = torch.from_numpy(x[:, subsets]).transpose(0, 1)  # (B, V, K, D, H, W)
    full = torch.from_numpy(x)
    return {
        "mean_k": sub.mean(2, keepdim=True),  # the lead axis, of length 1
        "std_k": sub.std(2, correction=1, keepdim=True),
        "std_m": full.std(1, correction=0)[None].expand(len(subsets), *full.shape[:1], *full.shape[2:]),
        "std_k0": sub.std(2, correction=0),
    }


def _train(
    task: SpreadTask,
    train: np.ndarray,
    combos: np.ndarray,
    samples: list,
    *,
    epochs: int,
    batch_size: int,
    lr: float,
    rng: np.random.Generator,
) -> None:
    """Train ``task`` on ``samples`` ((time, subset) pairs of ``train``) with AdamW and one cycle."""
    opt = torch.optim.AdamW(task.parameters(), lr=lr, weight_decay=1e-5)
    sched = torch.optim.lr_scheduler.OneCycleLR(
        opt, max_lr=lr, total_steps=epochs * -(-len(samples) // batch_size)
    )
    with Progress("real_spread", epochs, "epochs") as progress:
        for _ in range(epochs):
            losses = []
            order = rng.permutation(len(samples))
            for i in range(0, len(order), batch_size):
                chosen = [samples[j] for j in order[i : i + batch_size]]
                parts = [_batch(train[t], combos[[c]]) for t, c in chosen]
                batch = {key: torch.cat([p[key] for p in parts]) for key in parts[0]}
                opt.zero_grad()
                loss = task.loss(batch)
                loss.backward()
                losses.append(float(loss.detach()))
                opt.step()
                sched.step()
            progress.advance(f"mean training loss {np.mean(losses):.4g}")


def _score(
    task: SpreadTask,
    test: np.ndarray,
    test_combos: np.ndarray,
    w: torch.Tensor,
    k: int,
    n_var: int,
    n_lev: int,
) -> dict[tuple[str, int, int], np.ndarray]:
    """Sums over the test subsets of area-weighted RMSE, bias and correlation of each spread
    estimate against the M-member std, by (estimator, variable index, level index)."""
    sums: dict[tuple[str, int, int], np.ndarray] = {}
    task.eval()
    note(f"real_spread: scoring {len(test) * len(test_combos)} test subsets")
    with torch.no_grad():
        for xt in test:
            for i in range(0, len(test_combos), 64):
                batch = _batch(xt, test_combos[i : i + 64])
                estimates = {
                    "spread model (SpreadTask)": task(batch),
                    f"{k}-member sample std (ddof 1)": batch["std_k"][:, :, 0],
                    f"{k}-member sample std (ddof 0)": batch["std_k0"],
                }
                target = batch["std_m"]
                for name, est in estimates.items():
                    err = est - target
                    tm, em = (target * w).mean((-2, -1), keepdim=True), (est * w).mean((-2, -1), keepdim=True)
                    cov = ((est - em) * (target - tm) * w).mean((-2, -1))
                    corr = cov / torch.sqrt(
                        ((est - em) ** 2 * w).mean((-2, -1)) * ((target - tm) ** 2 * w).mean((-2, -1))
                    )
                    vals = torch.stack(
                        [(err**2 * w).mean((-2, -1)).sqrt(), (err * w).mean((-2, -1)), corr], -1
                    )
                    for vi in range(n_var):
                        for li in range(n_lev):
                            key = (name, vi, li)
                            sums[key] = sums.get(key, 0) + vals[:, vi, li].sum(0).numpy()
    return sums


def real_spread_check(
    grib: str = "../shared/data/real/cfgrib/era5-levels-members.grib",
    variables: list[str] = ("z", "t"),  # type: ignore[assignment]
    levels: list[float] = (500, 850),  # type: ignore[assignment]
    k: int = DEFAULT_K,
    test_times: int = 1,
    subsets_per_time: int = 64,
    epochs: int = 20,
    batch_size: int = 16,
    width: int = 8,
    depth: int = 2,
    lr: float = 3e-3,
    seed: int = 0,
    max_test_subsets: int | None = None,
) -> pd.DataFrame:
    """Train on the first times' subsets, score every subset of the last ``test_times`` times.

    Parameters
    ----------
    grib
        The ensemble GRIB file (analysis times × members × levels), read by ensml's GRIB reader.
    variables
        Variables to learn and score (cfgrib short names).
    levels
        Pressure levels (hPa).
    k
        Members in a subset (the model's input); the target is the std of all M members.
    test_times
        How many of the last analysis times are held out for scoring.
    subsets_per_time
        Random k-member subsets drawn per training time (training samples).
    epochs
        Training epochs.
    batch_size
        Subsets per optimisation step.
    width
        Channels of the U-Net's first level.
    depth
        Levels of the U-Net (pooling steps + 1).
    lr
        Peak learning rate of the one-cycle schedule.
    seed
        Seed of the subsets, the initialisation and the batch order.
    max_test_subsets
        Score only the first this many of the C(M, k) test subsets (all when unset).

    Returns
    -------
    pandas.DataFrame
        Area-weighted RMSE, bias and correlation of each estimator against the M-member std
        (ddof 0), per variable and level, averaged over the test subsets (also printed as
        Markdown).
    """
    L.seed_everything(seed, verbose=False)
    fc = open_forecast(grib, variables).isel({LEAD_TIME: 0})
    m = check_members(fc, k, f"forecast {grib}")
    fc = fc.sel({LEVEL: list(levels)}).transpose(INIT_TIME, MEMBER, LEVEL, ...)
    x = np.stack([fc[v].values for v in variables], axis=1).astype(np.float32)  # (T, V, M, D, H, W)
    n_time = x.shape[0]
    if not 1 <= test_times < n_time:
        raise EnsmlError(f"test_times must be in 1..{n_time - 1} for {grib} ({n_time} times)")
    train, test = x[:-test_times], x[-test_times:]
    combos = np.array(list(itertools.combinations(range(m), k)))
    rng = np.random.default_rng(seed)

    task = SpreadTask(
        variables=list(variables),
        levels=list(levels),
        input_leads=[0],
        target_leads=0,
        k=k,
        width=width,
        depth=depth,
        lr=lr,
    )
    stats = {
        "clim_mean": train.mean((0, 2)),
        "anom_std": (train - train.mean((0, 2))[:, None]).std((0, 2, 4, 5)),
        "spread_scale": train.std(2).mean((0, 3, 4)),
    }
    task.set_stats(stats, fc[LATITUDE].values)
    samples = [
        (t, c) for t in range(len(train)) for c in rng.choice(len(combos), subsets_per_time, replace=False)
    ]
    _train(task, train, combos, samples, epochs=epochs, batch_size=batch_size, lr=lr, rng=rng)

    test_combos = combos[:max_test_subsets] if max_test_subsets else combos
    w = torch.as_tensor(latitude_weights(fc[LATITUDE].values).values, dtype=torch.float32)[:, None]
    sums = _score(task, test, test_combos, w, k, len(variables), len(levels))
    n = len(test) * len(test_combos)
    rows = [
        {
            "variable": variables[vi],
            "level_hPa": levels[li],
            "estimator": name,
            "target": f"{m}-member std (ddof 0)",
            "rmse": s[0] / n,
            "bias": s[1] / n,
            "correlation": s[2] / n,
            "subsets": n,
        }
        for (name, vi, li), s in sums.items()
    ]
    table = pd.DataFrame(rows).sort_values(["variable", "level_hPa"], kind="stable", ignore_index=True)
    shown = table.assign(bias=[f"{b:+.4g}" for b in table["bias"]])
    print(to_markdown(shown), file=sys.stdout)
    return table


if __name__ == "__main__":  # pragma: no cover
    from jsonargparse import auto_cli

    from ensml.logs import take_flags

    try:
        auto_cli(real_spread_check, args=take_flags(sys.argv[1:]), as_positional=False)
    except EnsmlError as exc:
        print(f"ensml: {exc}", file=sys.stderr)
        sys.exit(1)
