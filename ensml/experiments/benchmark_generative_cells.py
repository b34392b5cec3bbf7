"""Every method's members on the generative benchmark's test period, field by field.

:func:`draw_cells` draws, for each target lead, variable and level and each count of members
(:class:`Cell`): the raw ensemble and subset, the two-step methods of the parametric network's
margins (:mod:`ensml.experiments.benchmark_generative_members`), the generated members and, on the
synthetic data, the oracle's, beside the truth and the parametric network's per-point CRPS.
:mod:`ensml.experiments.benchmark_generative` trains the networks and
:mod:`ensml.experiments.benchmark_generative_page` scores the cells.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
import xarray as xr

from ensml.data.datamodule import EnsembleDataModule
from ensml.data.open import open_analysis, open_forecast
from ensml.experiments import benchmark_generative_members as two_step
from ensml.names import (
    INIT_TIME,
    LATITUDE,
    LEAD_TIME,
    LEVEL,
    LONGITUDE,
    MEMBER,
    raw_ensemble_name,
    raw_subset_name,
)
from ensml.train.generative import GenerativeTask
from ensml.train.tasks import MixedTask

#: The oracle's members' row (synthetic data with ``oracle_members``).
ORACLE = "oracle members"


@dataclass
class Cell:
    """One lead, variable and level of the test period at ``draws`` members a method: the truth and
    every method's members (init, N, lat, lon), the parametric network's per-point CRPS."""

    draws: int
    lead: np.timedelta64
    var: str
    level: float | None
    truth: xr.DataArray
    members: dict[str, xr.DataArray]
    parametric_crps: xr.DataArray


def _split(loader, fn) -> dict[str, np.ndarray]:
    """``fn(batch)`` over every batch of ``loader`` with the batches' truth (``obs``), by key, in
    the order of the samples' index."""
    index, parts = [], {}
    with torch.no_grad(), torch.random.fork_rng(devices=[]):
        for batch in loader:
            index.append(batch["index"].numpy())
            for key, value in {"obs": batch["obs"], **fn(batch)}.items():
                parts.setdefault(key, []).append(value.float().numpy())
    order = np.argsort(np.concatenate(index))
    return {key: np.concatenate(v)[order] for key, v in parts.items()}


def _params(task: MixedTask, batch: dict) -> dict[str, torch.Tensor]:
    return {f"{var}|{p}": x for var, ps in task.distributions(batch).items() for p, x in ps.items()}


def draw_cells(
    dm: EnsembleDataModule,
    paths: dict[str, Path],
    mixed: MixedTask,
    gen: GenerativeTask,
    gen_name: str,
    counts: list[int],
    shrinkage: float | None,
    seed: int,
) -> list[Cell]:
    """Every method's members on the test period, by lead, variable, level and count of members
    (``counts``: the raw and oracle members in the first only). The generator draws the largest
    count once; a smaller count is its first members, which a draw of that many would give."""
    spec = dm.spec
    most = max(counts)
    test = _split(dm.test_dataloader(), lambda b: {**_params(mixed, b), "gen": gen.draw(b, most)})
    val = _split(dm.val_dataloader(), lambda b: _params(mixed, b))
    inits = dm.init_times("test")
    lat, lon = dm.coords[LATITUDE], dm.coords[LONGITUDE]
    raw = _raw(paths["forecast"], spec, inits)
    oracle = _oracle(paths.get("oracle_members"), spec, inits, counts[0])
    history = dm.init_times("train")
    train_truth = _truth_at(dm, history)
    n_var, cells = len(spec.variables), []
    coords = {INIT_TIME: inits, LATITUDE: lat, LONGITUDE: lon}
    n_val = len(val["obs"])
    shape = (len(inits), lat.size, lon.size)
    dims = (INIT_TIME, LATITUDE, LONGITUDE)

    def fields(x: np.ndarray) -> xr.DataArray:  # (init, N, D) → (init, member, lat, lon)
        return xr.DataArray(
            x.reshape(len(inits), x.shape[1], *shape[1:]), dims=(INIT_TIME, MEMBER, *dims[1:]), coords=coords
        )

    for t, lead in enumerate(spec.target_leads):
        templates = {n: two_step.templates_by_day(inits + lead, history + lead, n) for n in counts}
        for v, var in enumerate(spec.variables):
            f, family = t * n_var + v, mixed.families[v]
            for j, level in enumerate([None] if bool(mixed.surface[v]) else spec.levels):
                # what every count of members shares: the margins, the truth, the copula's fit
                params = {p: test[f"{var}|{p}"][:, t, j].reshape(len(inits), -1) for p in family.params}
                y = test["obs"][:, f, j].reshape(len(inits), -1)
                sub = raw[var][:, t, : spec.k, j].reshape(len(inits), spec.k, -1)
                past = train_truth[var][t][:, j].reshape(len(history), -1)
                fitted = {p: val[f"{var}|{p}"][:, t, j].reshape(n_val, -1) for p in family.params}
                obs = val["obs"][:, f, j].reshape(n_val, -1)
                coupling = two_step.fit_copula(family, fitted, obs, shrinkage, seed)
                crps = xr.DataArray(family.crps(params, y).reshape(shape), dims=dims, coords=coords)
                truth = xr.DataArray(y.reshape(shape), dims=dims, coords=coords)
                at = None if level is None else float(level)
                # the rows of the first count only: the members these sets have
                before = {
                    raw_ensemble_name(spec.members): raw[var][:, t, :, j].reshape(
                        len(inits), spec.members, -1
                    ),
                    raw_subset_name(spec.k): sub,
                }
                after = {}
                if oracle is not None and var in oracle:
                    after[ORACLE] = oracle[var][:, t, :, j].reshape(len(inits), oracle[var].shape[2], -1)
                for n in counts:
                    quantiles = two_step.margins(family, params, n)
                    first = n == counts[0]
                    sets = {
                        **(before if first else {}),
                        two_step.ECC: two_step.ecc(quantiles, sub, seed),
                        two_step.SCHAAKE: two_step.schaake(quantiles, past[templates[n]], seed),
                        two_step.COPULA: two_step.copula(family, params, coupling, n, seed),
                        gen_name: test["gen"][:, :n, f, j].reshape(len(inits), n, -1),
                        **(after if first else {}),
                    }
                    members = {name: fields(x) for name, x in sets.items()}
                    cells.append(Cell(n, lead, var, at, truth, members, crps))
    return cells


def _raw(path: Path, spec, inits: np.ndarray) -> dict[str, np.ndarray]:
    """The raw members (init, T, M, D, lat, lon) of each variable at the target leads."""
    fc = open_forecast(str(path), list(spec.variables))
    fc = fc.sel({INIT_TIME: inits, LEAD_TIME: list(spec.target_leads)})
    out = {}
    for var in spec.variables:
        x = fc[var]
        if LEVEL in x.dims:
            x = x.sel({LEVEL: list(spec.levels)})
        else:
            x = x.expand_dims({LEVEL: [np.nan]})
        out[var] = x.transpose(INIT_TIME, LEAD_TIME, MEMBER, LEVEL, LATITUDE, LONGITUDE).values
    return out


def _oracle(path: Path | None, spec, inits: np.ndarray, n: int) -> dict[str, np.ndarray] | None:
    """The oracle's members (init, T, N, D, lat, lon) of each variable it holds, or None."""
    if path is None:
        return None
    with xr.open_dataset(path) as ds:
        ds = ds.sel({INIT_TIME: inits, LEAD_TIME: list(spec.target_leads), LEVEL: list(spec.levels)})
        dims = (INIT_TIME, LEAD_TIME, MEMBER, LEVEL, LATITUDE, LONGITUDE)
        return {
            var: ds[var].isel({MEMBER: slice(0, n)}).transpose(*dims).values
            for var in spec.variables
            if var in ds
        }


def _truth_at(dm: EnsembleDataModule, inits: np.ndarray) -> dict[str, list[np.ndarray]]:
    """The verifying analysis of each variable at each target lead of ``inits``: (init, D, lat, lon)."""
    spec = dm.spec
    an = open_analysis(str(dm.hparams.analysis), list(spec.variables))
    out: dict[str, list[np.ndarray]] = {}
    for var in spec.variables:
        x = an[var]
        x = x.sel({LEVEL: list(spec.levels)}) if LEVEL in x.dims else x.expand_dims({LEVEL: [np.nan]})
        out[var] = [
            x.sel(time=inits + lead).transpose("time", LEVEL, LATITUDE, LONGITUDE).values
            for lead in spec.target_leads
        ]
    return out


__all__ = ["ORACLE", "Cell", "draw_cells"]
