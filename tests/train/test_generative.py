"""The generative task: members for a seed, exchangeable, bounded, scored with the fair scores it
claims (against scoringrules), learning, and ``ensml fit`` / ``predict`` / ``evaluate`` on them."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import scoringrules as sr
import torch
import xarray as xr

from ensml.cli.main import main
from ensml.data.datamodule import EnsembleDataModule
from ensml.errors import EnsmlError
from ensml.predictions import RunMeta
from ensml.train import generative
from ensml.train.generative import GenerativeTask
from tests.conftest import CONFIGS, TINY_PERIODS, tiny_data_args

GENERATIVE = str(CONFIGS / "generative.yaml")


@pytest.fixture(scope="module")
def data(tiny_data):
    dm = EnsembleDataModule(
        tiny_data["forecast"], tiny_data["analysis"], batch_size=3, target_leads=48, **TINY_PERIODS
    )
    dm.setup("fit")
    return dm, next(iter(dm.train_dataloader()))


def make(dm, **options) -> GenerativeTask:
    torch.manual_seed(0)
    task = GenerativeTask.from_data(dm, width=4, depth=2, **options)
    return task.eval()


def test_members_are_reproducible_for_a_seed(data) -> None:
    dm, batch = data
    task = make(dm)
    with torch.no_grad():
        five, twelve = task.draw(batch, 5), task.draw(batch, 12)
        again = task.draw(batch, 5)
    assert five.shape == (3, 5, 2, 2, 16, 32)
    torch.testing.assert_close(five, again, rtol=0, atol=0)
    # more members: the same first ones (the same noise; the network batched otherwise may round
    # the last float32 bit differently)
    torch.testing.assert_close(
        task.sample_noise(batch, 5), task.sample_noise(batch, 12)[:, :5], rtol=0, atol=0
    )
    torch.testing.assert_close(five, twelve[:, :5], rtol=1e-6, atol=0)
    assert not torch.equal(five[:, 0], five[:, 1])
    other = make(dm, sample_seed=1)
    with torch.no_grad():
        assert not torch.equal(other.draw(batch, 5), five)


def test_a_samples_members_do_not_depend_on_its_batch(data) -> None:
    dm, batch = data
    task = make(dm)
    alone = {key: value[1:2] for key, value in batch.items()}
    with torch.no_grad():
        torch.testing.assert_close(task.draw(alone, 4)[0], task.draw(batch, 4)[1])


def test_members_are_exchangeable(data) -> None:
    # each member is the network of the inputs and its own noise: permuting the noise permutes
    # the members, so their joint law is symmetric (exchangeable) by construction
    dm, batch = data
    task = make(dm)
    noise = task.sample_noise(batch, 6)
    order = torch.tensor([3, 0, 5, 1, 4, 2])
    with torch.no_grad():
        members, permuted = task.members(batch, noise), task.members(batch, noise[:, order])
    torch.testing.assert_close(permuted, members[:, order])


def test_the_noise_scales_are_what_they_say(data) -> None:
    dm, batch = data
    task = make(dm, noise_channels=3, noise_scales=[1, 8])
    z = task.sample_noise(batch, 200)  # (B, N, 6, D, H, W)
    assert z.shape[2] == 6
    fine, coarse = z[:, :, :3], z[:, :, 3:]
    assert abs(float(fine.std()) - 1.0) < 0.02

    # the coarse noise is smooth: neighbours along longitude correlate, the fine noise's do not
    def lag1(x):
        a, b = x[..., :-1].flatten(), x[..., 1:].flatten()
        return float(torch.corrcoef(torch.stack([a, b]))[0, 1])

    assert abs(lag1(fine)) < 0.02 and lag1(coarse) > 0.8
    # longitude wraps around (the network's convolutions do): the last and first columns are
    # neighbours too, the coarse noise has no seam there
    assert lag1(torch.cat([coarse[..., -1:], coarse[..., :1]], dim=-1)) > 0.8
    # a coarse point every 8 columns from the first (and in the first row): unit variance
    # there, less between
    row = coarse[..., 0, :]
    assert abs(float(row[..., ::8].std()) - 1.0) < 0.03 and float(row[..., 4::8].std()) < 0.8


def test_members_keep_the_variables_bound(data) -> None:
    # tp (bounded at 0) in t's place, its subset mean pushed below 0: members are max(x, 0)
    dm, batch = data
    torch.manual_seed(0)
    task = GenerativeTask(variables=["z", "tp"], levels=[500, 850], width=4, depth=2)
    task.set_stats(dm.stats, dm.coords["latitude"])
    low = dict(batch, mean_k=batch["mean_k"].clone())
    for v in (0, 1):  # both centred below 0: only tp is bounded
        low["mean_k"][:, v] = -0.5 * task.target_scale[0, v][:, None, None]
    with torch.no_grad():
        members = task.draw(low, 4)
    assert float(members[:, :, 1].min()) == 0.0  # dry members: a point mass at zero
    assert float((members[:, :, 1] == 0).float().mean()) > 0.3
    assert float((members[:, :, 0] < 0).float().mean()) > 0.3


def test_quality_is_the_fair_crps_of_its_members(data) -> None:
    dm, batch = data
    task = make(dm)
    with torch.no_grad():
        got = float(task.quality(batch))
        members = task.draw(batch, task.hparams.train_members) / task.scale()[:, None]
    obs = (batch["obs"] / task.scale()).double().numpy()
    crps = sr.crps_ensemble(obs, np.moveaxis(members.double().numpy(), 1, -1), estimator="fair")
    expected = (crps * task.lat_weights.double().numpy()[:, None]).mean()
    np.testing.assert_allclose(got, expected, rtol=1e-5)


def test_patch_energy_score_is_the_fair_energy_score_of_blocks(data) -> None:
    dm, _ = data
    task = make(dm, patch=8)
    members = torch.randn(3, 4, 2, 2, 16, 32, generator=torch.Generator().manual_seed(0))
    obs = torch.randn(3, 2, 2, 16, 32, generator=torch.Generator().manual_seed(1))
    got = float(task._patch_energy(members, obs))  # eval mode: blocks from the corner
    w = task.lat_weights.double().numpy()
    x, y = members.double().numpy(), obs.double().numpy()
    total, count = 0.0, 0
    for i in range(2):
        for j in range(4):
            block = (slice(8 * i, 8 * i + 8), slice(8 * j, 8 * j + 8))
            fc = x[..., block[0], block[1]].reshape(3, 4, 2, 2, 64).transpose(0, 2, 3, 1, 4)
            ob = y[..., block[0], block[1]].reshape(3, 2, 2, 64)
            es = sr.es_ensemble(ob, fc, estimator="fair") / 8.0  # per component: ÷ √64
            total += (es * w[8 * i : 8 * i + 8].mean()).sum()
            count += es.size
    np.testing.assert_allclose(got, total / count, rtol=1e-5)


def test_loss_is_crps_plus_weighted_energy_and_variogram_scores(data) -> None:
    dm, batch = data
    task = make(dm, es_weight=0.5, vs_weight=2.0)
    with torch.no_grad():
        drawn = task._with_members(batch)
        s = task.scale()
        members, obs = drawn["members"] / s[:, None], drawn["obs"] / s
        crps = float(task.quality(drawn))
        es, vs = float(task._patch_energy(members, obs)), float(task._variogram(members, obs))
        np.testing.assert_allclose(float(task.loss(drawn)), crps + 0.5 * es + 2.0 * vs, rtol=1e-6)
        # weight 0: the term is not computed
        assert set(make(dm, es_weight=0.0, vs_weight=0.0)._losses(drawn)) == {"crps"}


def test_variogram_term_is_the_fair_variogram_score_of_its_points(data, monkeypatch) -> None:
    monkeypatch.setattr(generative, "VS_SMOOTH", 0.0)  # exact |d|^0.5, as scoringrules
    dm, _ = data
    task = make(dm, vs_points=24)
    members = torch.randn(3, 4, 2, 2, 16, 32, generator=torch.Generator().manual_seed(0))
    obs = torch.randn(3, 2, 2, 16, 32, generator=torch.Generator().manual_seed(1))
    got = float(task._variogram(members, obs))  # eval mode: the points of sample_seed
    chosen = torch.randperm(16 * 32, generator=torch.Generator().manual_seed(0))[:24].numpy()
    fc = members.double().flatten(-2).numpy()[..., chosen].transpose(0, 2, 3, 1, 4)  # (B, F, D, N, 24)
    ob = obs.double().flatten(-2).numpy()[..., chosen]
    want = sr.vs_ensemble(ob, fc, p=0.5, estimator="fair") / (24 * 23)
    np.testing.assert_allclose(got, want.mean(), rtol=1e-5)
    assert got == float(task._variogram(members, obs))  # the same points again outside training
    task.train()
    assert got != float(task._variogram(members, obs))  # new points in training


def test_the_trunk_runs_once_per_forecast_whatever_the_members(data, monkeypatch) -> None:
    dm, batch = data
    task = make(dm)
    monkeypatch.setattr(generative, "CHUNK_POINTS", 5 * 2 * 16 * 32)  # 5 members per head pass
    calls = {"net": 0, "head": 0}
    task.net.register_forward_hook(lambda *a: calls.__setitem__("net", calls["net"] + 1))
    task.head.register_forward_hook(lambda *a: calls.__setitem__("head", calls["head"] + 1))
    one = {key: value[:1] for key, value in batch.items()}
    with torch.no_grad():
        members = task.draw(one, 12)
    assert members.shape[1] == 12 and calls == {"net": 1, "head": 3}
    # the chunks' noise continues member after member: the members of one 12-member pass
    with torch.no_grad():
        whole = task.members(one, task.sample_noise(one, 12))
    torch.testing.assert_close(members, whole, rtol=1e-6, atol=0)


def test_validation_draws_its_members_once(data, monkeypatch) -> None:
    # loss, quality and scores of a validation batch score the same members, drawn once
    dm, batch = data
    task = make(dm)
    with torch.no_grad():
        drawn = task._with_members(batch)
        expected = (float(task.loss(drawn)), float(task.quality(drawn)))
        monkeypatch.setattr(task, "draw", lambda *a, **k: pytest.fail("members drawn again"))
        assert (float(task.loss(drawn)), float(task.quality(drawn))) == expected
        crps = task.scores(drawn)["crps"]
    s = task.scale()
    torch.testing.assert_close(task.area_mean(crps / s), task.quality(drawn))


def test_refused_options() -> None:
    with pytest.raises(EnsmlError, match="train_members must be at least 2"):
        GenerativeTask(train_members=1)
    with pytest.raises(EnsmlError, match="unet3d"):
        GenerativeTask(arch="convgru")
    with pytest.raises(EnsmlError, match="at least one scale"):
        GenerativeTask(noise_scales=[])
    with pytest.raises(EnsmlError, match="head_kernel must be odd"):
        GenerativeTask(head_kernel=2)
    with pytest.raises(EnsmlError, match="vs_points must be at least 2"):
        GenerativeTask(vs_points=1)
    with pytest.raises(EnsmlError, match="head_width=6 must be a multiple of norm_groups=4"):
        GenerativeTask(norm_groups=4, head_width=6)


@pytest.mark.slow
def test_it_learns_the_spread_on_one_batch(data) -> None:
    dm, batch = data
    task = make(dm).train()
    opt = torch.optim.Adam(task.parameters(), lr=3e-3)
    losses = []
    for _ in range(40):
        loss = task.loss(batch)
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(float(loss))
    assert np.mean(losses[-5:]) < 0.85 * np.mean(losses[:5]), losses


@pytest.mark.slow
def test_fit_predict_any_number_of_members_and_evaluate(tiny_data, tmp_path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    small = [
        *tiny_data_args(tiny_data),
        "--model.init_args.width=4",
        "--model.init_args.depth=2",
        "--trainer.max_epochs=1",
        "--trainer.limit_train_batches=2",
        "--trainer.limit_val_batches=1",
    ]
    assert main(["fit", "--config", GENERATIVE, *small]) == 0
    ckpt = "--ckpt_path=runs/generative/checkpoints/best.ckpt"
    assert main(["predict", "--config", GENERATIVE, *small, ckpt, "--model.init_args.n_members=12"]) == 0
    path = Path("runs/generative/predictions.nc")
    with xr.open_dataset(path) as ds:
        meta = RunMeta.from_attrs(ds.attrs, str(path))
        assert meta.task == "GenerativeTask" and meta.k == 5
        assert ds["t"].dims == ("init_time", "member", "level", "latitude", "longitude")
        assert ds.sizes["member"] == 12
        assert "sample_seed 0" in ds["t"].attrs["generated_by"]
        first = ds["t"].values
    # a width other than the checkpoint's is refused; the number of members and the seed are not
    assert main(["predict", "--config", GENERATIVE, *small, ckpt, "--model.init_args.width=8"]) == 1
    out = ["evaluate", "--forecast", str(tiny_data["forecast"]), "--analysis", str(tiny_data["analysis"])]
    assert main([*out, "--members", str(path), "--out_dir", "ev", "--leads", "48"]) == 0
    scores = (tmp_path / "ev" / "scores.csv").read_text()
    assert "generated members (12)" in scores
    assert main(["predict", "--config", GENERATIVE, *small, ckpt, "--model.init_args.n_members=3"]) == 0
    with xr.open_dataset(path) as ds:
        np.testing.assert_allclose(ds["t"].values, first[:, :3], rtol=1e-6)
