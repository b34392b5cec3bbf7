"""Samples and the data module on the tiny synthetic ensemble, checked against xarray by hand."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import xarray as xr

from ensml.data.datamodule import EnsembleDataModule
from ensml.data.samples import EnsembleSamples
from ensml.errors import EnsmlError
from tests.conftest import TINY_PERIODS


@pytest.fixture(scope="module")
def dm(tiny_data) -> EnsembleDataModule:
    module = EnsembleDataModule(tiny_data["forecast"], tiny_data["analysis"], batch_size=4, **TINY_PERIODS)
    module.setup("fit")
    return module


@pytest.mark.slow
def test_sample_matches_files(dm: EnsembleDataModule, tiny_data) -> None:
    item = dm.test_set[3]
    init = dm.test_set.init_times[3]
    fc = xr.open_dataset(tiny_data["forecast"]).sel(init_time=init)
    an = xr.open_dataset(tiny_data["analysis"])
    assert item["mean_k"].shape == (2, 3, 2, 16, 32)  # V, L, D, H, W
    assert item["std_m"].shape == (2, 2, 16, 32)
    z = fc["z"].transpose("lead_time", "member", "level", "latitude", "longitude").values
    np.testing.assert_allclose(item["mean_k"][0].numpy(), z[:, :5].mean(axis=1), rtol=1e-6)
    np.testing.assert_allclose(item["std_k"][0].numpy(), z[:, :5].std(axis=1, ddof=1), rtol=1e-4)
    np.testing.assert_allclose(item["std_m"][0].numpy(), z[2].std(axis=0, ddof=0), rtol=1e-4)
    lead = np.timedelta64(48, "h")
    np.testing.assert_allclose(item["obs"][1].numpy(), an["t"].sel(time=init + lead).values, rtol=1e-6)
    np.testing.assert_allclose(item["analysis_init"][1].numpy(), an["t"].sel(time=init).values, rtol=1e-6)
    assert item["index"].item() == 3


def test_splits_do_not_share_valid_times(dm: EnsembleDataModule) -> None:
    lead = np.timedelta64(48, "h")
    train, val, test = (dm.init_times(s) for s in ("train", "val", "test"))
    assert train.max() + lead < val.min() and val.max() + lead < test.min()


def test_stats_come_from_training_split_only(dm: EnsembleDataModule, tiny_data) -> None:
    fc = xr.open_dataset(tiny_data["forecast"]).sel(init_time=dm.init_times("train"))
    clim = fc["t"].mean(["init_time", "lead_time", "member"]).values
    np.testing.assert_allclose(dm.stats["clim_mean"][1], clim, rtol=1e-5)
    spread = (
        fc["z"]
        .sel(lead_time=np.timedelta64(48, "h"))
        .std("member")
        .mean(["init_time", "latitude", "longitude"])
    )
    np.testing.assert_allclose(dm.stats["spread_scale"][0], spread.values, rtol=1e-4)


@pytest.mark.slow
def test_random_member_subsets_depend_only_on_seed_epoch_and_index(tiny_data) -> None:
    def draws(seed: int, epoch: int) -> list[tuple[int, ...]]:
        module = EnsembleDataModule(
            tiny_data["forecast"], tiny_data["analysis"], member_sampling="random", seed=seed, **TINY_PERIODS
        )
        module.setup("fit")
        torch.manual_seed(epoch)  # the global RNG plays no part
        return [tuple(module.train_set.members_for(i, epoch).tolist()) for i in range(6)]

    first = draws(0, 0)
    assert draws(0, 0) == first
    assert draws(0, 1) != first and draws(1, 0) != first  # a new subset per epoch and per seed
    assert len(set(first)) > 1 and all(len(m) == 5 and len(set(m)) == 5 for m in first)


def test_first_member_subsets_and_evaluation_use_members_0_to_k(dm: EnsembleDataModule) -> None:
    assert dm.train_set.members_for(3, epoch=7).tolist() == [0, 1, 2, 3, 4]
    assert dm.val_set.member_sampling == "first"  # evaluation always uses members 0 … k-1


def test_training_order_depends_only_on_seed_and_epoch(dm: EnsembleDataModule) -> None:
    def order(epoch: int) -> list[int]:
        loader = dm.train_dataloader()  # a fresh loader, as a resumed run builds
        loader.sampler.set_epoch(epoch)
        return [k.index for k in loader.sampler]

    assert order(3) == order(3) and order(3) != order(4)
    assert sorted(order(3)) == list(range(len(dm.train_set)))


def test_batches(dm: EnsembleDataModule) -> None:
    batch = next(iter(dm.train_dataloader()))
    assert batch["mean_k"].shape == (4, 2, 3, 2, 16, 32) and batch["mean_k"].dtype == torch.float32
    assert len(dm.predict_dataloader().dataset) == len(dm.init_times("test"))


@pytest.mark.slow
def test_first_members_read_only_what_the_sample_uses(dm: EnsembleDataModule, tiny_data, tmp_path) -> None:
    """Members K.. are read at the target lead only: NaN elsewhere in them is never touched,
    and the sample is bit-identical to one computed from every member."""
    spec, init = dm.test_set.spec, dm.test_set.init_times[3]
    with xr.open_dataset(tiny_data["forecast"]) as src:
        fc = src.load()
    others = {"member": slice(spec.k, None), "lead_time": fc.lead_time != spec.target_lead}
    for v in spec.variables:
        fc[v][others] = np.nan
    fc.to_netcdf(tmp_path / "holes.nc")

    def sample(path, sampling):
        return EnsembleSamples(path, tiny_data["analysis"], [init], spec, member_sampling=sampling)

    holes = sample(tmp_path / "holes.nc", "first")
    assert holes.reader.read(0)["fc_k"].shape[2] == spec.k  # (V, L, K, D, H, W)
    got, full = holes[0], sample(tiny_data["forecast"], "random")
    want = dm.test_set[3]
    for key in ("mean_k", "std_k", "std_m", "obs", "analysis_init"):
        np.testing.assert_array_equal(got[key].numpy(), want[key].numpy(), err_msg=key)
    block = full.reader.read(0)["fc"]  # every member: the reference std_m from the whole block
    np.testing.assert_array_equal(got["std_m"].numpy(), block[:, spec.target_index].std(axis=1))
    with pytest.raises(EnsmlError, match=r"has NaN or infinite values in z, t at"):
        sample(tmp_path / "holes.nc", "random")[0]  # a random subset needs every member
