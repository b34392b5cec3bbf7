"""The per-point bound from K members: its mean errs by the subset noise alone, its σ is calibrated."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
import xarray as xr

from ensml.data.datamodule import EnsembleDataModule
from ensml.experiments.bound import subset_bound
from ensml.experiments.options import SynthOptions
from tests.conftest import TINY_PERIODS

# The options of the session's tiny dataset (tests/conftest.py::tiny_data).
TINY = SynthOptions(
    n_lat=16, n_lon=32, leads=[0, 24, 48], start="2017-01-01", end="2017-12-31", every_days=3, seed=1
)


@pytest.mark.slow
def test_bound_errs_by_the_k_member_noise(tiny_data: dict[str, Path]) -> None:
    """(μ_bound − μ*) is the mean of K member perturbations: standardised by its designed spread
    sqrt(σ_bound² − σ*²) it is standard normal; and the bound beats the raw subset mean's error."""
    files = str(tiny_data["forecast"]), str(tiny_data["analysis"])
    dm = EnsembleDataModule(*files, target_leads=[24, 48], **TINY_PERIODS)
    dm.setup("fit")
    batches = list(dm.predict_dataloader())
    index = torch.cat([b["index"] for b in batches]).numpy()
    mean_k = torch.cat([b["mean_k"][:, :, [1, 2]].transpose(1, 2).flatten(1, 2) for b in batches])
    out = subset_bound(TINY, dm.test_set.init_times, index, mean_k, ["z", "t"], [500.0, 850.0], [24, 48], 5)
    assert out["mean"].shape == out["std"].shape == (len(index), 4, 2, 16, 32)
    inits = dm.test_set.init_times[index]
    with xr.open_dataset(tiny_data["oracle"]) as orc:
        for t, lead in enumerate((24, 48)):
            at = orc.sel(init_time=inits, lead_time=np.timedelta64(lead, "h"))
            for i, var in enumerate(("z", "t")):
                mu_star, sd_star = at[f"{var}_mean"].values, at[f"{var}_std"].values
                noise_sd = np.sqrt(
                    out["std"][:, 2 * t + i].astype(np.float64) ** 2 - sd_star.astype(np.float64) ** 2
                )
                z = (out["mean"][:, 2 * t + i] - mu_star) / noise_sd
                assert abs(z.mean()) < 0.05 and 0.9 < z.std() < 1.1, (lead, var, z.mean(), z.std())
                raw_err = mean_k[:, 2 * t + i].numpy() - mu_star  # biased, storms damped
                assert np.sqrt(((out["mean"][:, 2 * t + i] - mu_star) ** 2).mean()) < np.sqrt(
                    (raw_err**2).mean()
                )


def test_spread_bound(tiny_data: dict[str, Path]) -> None:
    """With all M members shown the bound is the M-member std itself; with K = 5 it beats the
    5-member sample std's RMSE, and a seed makes it reproducible."""
    from ensml.experiments.bound import spread_bound

    with xr.open_dataset(tiny_data["forecast"]) as fc:
        inits = fc["init_time"].values[-12:]
        x = fc[["z", "t"]].sel(init_time=inits, lead_time=np.timedelta64(48, "h")).to_array("variable")
        x = x.transpose("init_time", "variable", "member", "level", ...).values  # (N, V, M, D, H, W)
    index = np.arange(len(inits))
    args = (TINY, inits, index)
    rest = (["z", "t"], [500.0, 850.0], [48], 10)
    exact = spread_bound(*args, x, *rest)
    np.testing.assert_allclose(exact["std"], x.std(axis=2), rtol=1e-5)
    five = spread_bound(*args, x[:, :, :5], *rest, draws=16)
    target, sample = x.std(axis=2), x[:, :, :5].std(axis=2, ddof=1)
    assert np.sqrt(((five["std"] - target) ** 2).mean()) < 0.8 * np.sqrt(((sample - target) ** 2).mean())
    np.testing.assert_array_equal(five["std"], spread_bound(*args, x[:, :, :5], *rest, draws=16)["std"])
