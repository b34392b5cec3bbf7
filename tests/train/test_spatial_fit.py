"""``ensml fit`` with spatial = 2 (gloo, two processes) equals the single-process fit.

The spatial runs go through the real command line in a subprocess (Lightning's ``ddp``-style
launcher re-executes it for rank 1), in their own process group with a timeout, so every rank
always ends. The single-process runs are in-process.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
import xarray as xr

from ensml.cli.main import main
from tests.cli.process import run_cli
from tests.conftest import SMOKE, tiny_data_args

pytestmark = pytest.mark.distributed

# Two optimiser steps of two accumulated batches each (gradients are reduced once per step).
FEW_STEPS = {
    "trainer.max_epochs": 1,
    "trainer.limit_train_batches": 4,
    "trainer.accumulate_grad_batches": 2,
    "trainer.limit_val_batches": 1,
}
CKPT = "runs/smoke/checkpoints/last.ckpt"


def spatial(lat: int = 1, lon: int = 2) -> str:
    init = f'{{"lat": {lat}, "lon": {lon}, "timeout_s": 60}}'
    return f'{{"class_path": "ensml.train.strategies.SpatialParallelStrategy", "init_args": {init}}}'


@pytest.fixture(scope="module")
def runs(tiny_data: dict[str, Path], tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """A single-process and a spatial = 2 smoke fit of two steps on the same data and seed."""
    single, par = tmp_path_factory.mktemp("single"), tmp_path_factory.mktemp("spatial")
    args = ["fit", "--config", SMOKE, *tiny_data_args(tiny_data, **FEW_STEPS)]
    done = run_cli([*args, "--trainer.devices=2", f"--trainer.strategy={spatial()}"], par)
    assert done.returncode == 0, done.stdout[-3000:]
    with pytest.MonkeyPatch.context() as mp:
        mp.chdir(single)
        assert main(args) == 0
    return {"single": single, "spatial": par}


def test_spatial_fit_gives_the_single_process_weights(runs: dict[str, Path]) -> None:
    single = torch.load(runs["single"] / CKPT, map_location="cpu", weights_only=False)
    par = torch.load(runs["spatial"] / CKPT, map_location="cpu", weights_only=False)
    assert par["global_step"] == single["global_step"] == 2
    a, b = single["state_dict"], par["state_dict"]
    assert a.keys() == b.keys()
    for key in a:  # the full model: same shapes, incl. the 16 × 32 climatology and weights
        assert a[key].shape == b[key].shape, key
        torch.testing.assert_close(b[key], a[key], rtol=1e-5, atol=1e-5, msg=key)
    assert any((v != 0).any() for k, v in a.items() if k.startswith("net."))


def test_spatial_checkpoint_predicts_like_single_process(
    runs: dict[str, Path], tiny_data: dict[str, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    ckpt = str(runs["spatial"] / CKPT)
    # 2, not 1: with some jsonargparse/Lightning versions a bare 1 parses as the float 1.0 (100%)
    overrides = {"trainer.limit_predict_batches": 2}
    args = ["predict", "--config", SMOKE, *tiny_data_args(tiny_data, **overrides), f"--ckpt_path={ckpt}"]
    monkeypatch.chdir(runs["single"])
    assert main(args) == 0  # a spatial checkpoint in a plain single-process predict
    done = run_cli([*args, "--trainer.devices=2", f"--trainer.strategy={spatial()}"], runs["spatial"])
    assert done.returncode == 0, done.stdout[-3000:]
    out = "runs/smoke/predictions.nc"
    with xr.open_dataset(runs["single"] / out) as a, xr.open_dataset(runs["spatial"] / out) as b:
        assert set(a.data_vars) == set(b.data_vars) == {"z_mean", "z_std", "t_mean", "t_std"}
        assert a.sizes == b.sizes and a.sizes["latitude"] == 16 and a.sizes["longitude"] == 32
        for var in a.data_vars:
            np.testing.assert_allclose(b[var].values, a[var].values, rtol=1e-5, err_msg=var)


@pytest.mark.parametrize(
    ("devices", "lat", "lon", "message"),
    [
        (3, 1, 2, "trainer.devices × num_nodes = 3 is not a multiple of the spatial split lat=1 × lon=2"),
        (4, 4, 1, "cannot split 16 latitudes into 4 shards for depth=3"),
    ],
)
def test_bad_split_is_one_line_error_before_launch(
    tiny_data: dict[str, Path], tmp_path: Path, monkeypatch, capsys, devices, lat, lon, message
) -> None:
    monkeypatch.chdir(tmp_path)
    args = [
        "fit",
        "--config",
        SMOKE,
        *tiny_data_args(tiny_data),
        "--model.init_args.depth=3",
        f"--trainer.devices={devices}",
        f"--trainer.strategy={spatial(lat, lon)}",
    ]
    assert main(args) == 1  # in-process: it fails before Lightning would re-run the command
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1].startswith("ensml: ") and message in err[-1]
    assert not (tmp_path / "runs/smoke/checkpoints").exists()


def test_plan_parallel_verb(tiny_data: dict[str, Path], capsys) -> None:
    assert main(["plan-parallel", "--devices=4", f"--forecast={tiny_data['forecast']}", "--depth=2"]) == 0
    out = capsys.readouterr().out
    assert "sample: 14 channels × 2 levels × 16 × 32" in out
    assert "recommended: data=" in out and "   1×2×2" in out


def test_a_rank_reads_only_its_slab(tiny_data: dict[str, Path]) -> None:
    from ensml.data.datamodule import EnsembleDataModule

    periods = {
        "train_period": ("2017-01-01", "2017-08-31"),
        "val_period": ("2017-09-01", "2017-10-31"),
        "test_period": ("2017-11-01", "2017-12-31"),
    }
    dm = EnsembleDataModule(str(tiny_data["forecast"]), str(tiny_data["analysis"]), **periods)
    dm.setup("fit")
    full = dm.train_set[3]
    dm.slab = (slice(8, 16), slice(16, 32))
    dm.setup("fit")
    part = dm.train_set[3]
    opened = dm.train_set.reader._fc  # the slab alone was opened
    assert opened.sizes["latitude"] == 8 and opened.sizes["longitude"] == 16
    for key, value in full.items():
        expected = value if key == "index" else value[..., 8:16, 16:32]
        torch.testing.assert_close(part[key], expected, rtol=0, atol=0, msg=key)


def test_msssim_loss_is_refused_before_launch(
    tiny_data: dict[str, Path], tmp_path: Path, monkeypatch, capsys
) -> None:
    """MS-SSIM's windows and scales span the whole field: no per-slab loss in spatial runs."""
    monkeypatch.chdir(tmp_path)
    spread = ["--model.class_path=ensml.train.tasks.SpreadTask", "--model.init_args.loss=l1_msssim"]
    parallel = ["--trainer.devices=2", f"--trainer.strategy={spatial()}"]
    args = ["fit", "--config", SMOKE, *tiny_data_args(tiny_data), *spread, *parallel]
    assert main(args) == 1
    assert "spatial-parallel training supports the spread loss 'mse' only" in capsys.readouterr().err
    assert not (tmp_path / "runs/smoke/checkpoints").exists()
