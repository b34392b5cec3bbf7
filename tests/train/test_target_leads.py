"""Several target leads in one model: samples, outputs, predictions files, post-processing."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
import xarray as xr

from ensml.cli.main import main
from ensml.data.datamodule import EnsembleDataModule
from ensml.errors import EnsmlError
from ensml.train.tasks import MixedTask, SpreadTask
from tests.conftest import SMOKE, TINY_PERIODS, tiny_data_args

LEADS = [24, 48]


@pytest.fixture(scope="module")
def data(tiny_data: dict[str, Path]) -> EnsembleDataModule:
    dm = EnsembleDataModule(
        str(tiny_data["forecast"]),
        str(tiny_data["analysis"]),
        target_leads=LEADS,
        batch_size=2,
        **TINY_PERIODS,
    )
    dm.setup("fit")
    return dm


@pytest.mark.slow
def test_samples_hold_every_target_lead(data: EnsembleDataModule, tiny_data: dict[str, Path]) -> None:
    """obs and std_m are (T·V, D, H, W), lead-major: the analysis at each valid time and the
    M-member std (ddof 0) at each lead, read independently with xarray."""
    item = data.val_set[3]
    init = data.val_set.init_times[3]
    with xr.open_dataset(tiny_data["forecast"]) as fc, xr.open_dataset(tiny_data["analysis"]) as an:
        for t, h in enumerate(LEADS):
            lead = np.timedelta64(h, "h")
            for i, var in enumerate(("z", "t")):
                obs = an[var].sel(time=init + lead, level=[500, 850]).values
                std = fc[var].sel(init_time=init, lead_time=lead, level=[500, 850]).std("member").values
                np.testing.assert_allclose(item["obs"][t * 2 + i].numpy(), obs, rtol=1e-6)
                np.testing.assert_allclose(item["std_m"][t * 2 + i].numpy(), std, rtol=1e-5)
    stats = data.stats
    assert stats["target_scale"].shape == (2, 2, 2)
    np.testing.assert_array_equal(stats["spread_scale"], stats["target_scale"][-1])
    assert (stats["target_scale"][0] < stats["target_scale"][1]).all()  # spread grows with lead


@pytest.mark.parametrize("cls", [MixedTask, SpreadTask])
def test_outputs_per_target_lead_start_from_the_subset(cls, data: EnsembleDataModule) -> None:
    """An untrained model's σ starts at the K-member std of each target lead (zeroed head)."""
    torch.manual_seed(0)
    task = cls.from_data(data, width=4, depth=2)
    torch.nn.init.zeros_(task.net.head.conv.weight)
    torch.nn.init.zeros_(task.net.head.conv.bias)
    batch = next(iter(data.val_dataloader()))
    out = task(batch)
    sigma = out[1] if isinstance(out, tuple) else out
    assert sigma.shape == (2, 4, 2, 16, 32)
    for t, idx in enumerate(data.spec.target_indices):
        torch.testing.assert_close(
            sigma[:, 2 * t : 2 * t + 2], batch["std_k"][:, :, idx], rtol=1e-4, atol=1e-4
        )
    if isinstance(out, tuple):
        torch.testing.assert_close(out[0][:, 2:], batch["mean_k"][:, :, -1])


@pytest.mark.slow
def test_fit_and_predict_write_a_lead_dimension(
    tiny_data: dict[str, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture
) -> None:
    monkeypatch.chdir(tmp_path)
    args = ["--config", SMOKE, *tiny_data_args(tiny_data, **{"data.target_leads": "[24, 48]"})]
    assert main(["fit", *args]) == 0
    assert main(["predict", *args, "--ckpt_path=runs/smoke/checkpoints/best.ckpt"]) == 0
    with xr.open_dataset("runs/smoke/predictions.nc") as ds:
        assert ds["z_mean"].dims == ("init_time", "lead_time", "level", "latitude", "longitude")
        np.testing.assert_array_equal(ds["lead_time"].values, np.array([24, 48], "timedelta64[h]"))
        np.testing.assert_array_equal(
            ds["valid_time"].values, ds["init_time"].values[:, None] + ds["lead_time"].values[None]
        )
    # a checkpoint of leads [24, 48] applied to data with one target lead: a one-line error
    bad = ["--config", SMOKE, *tiny_data_args(tiny_data), "--ckpt_path=runs/smoke/checkpoints/best.ckpt"]
    assert main(["predict", *bad]) == 1
    assert (
        capsys.readouterr()
        .err.strip()
        .splitlines()[-1]
        .endswith("was trained with target_leads 24, 48 h but the data has 48 h")
    )


def test_target_leads_must_be_input_leads(tiny_data: dict[str, Path]) -> None:
    with pytest.raises(EnsmlError, match=r"target_leads=\[24, 72\] must be distinct lead\(s\) among"):
        EnsembleDataModule(str(tiny_data["forecast"]), target_leads=[24, 72])
    with pytest.raises(EnsmlError, match=r"target_leads=\[48, 48\]"):
        EnsembleDataModule(str(tiny_data["forecast"]), target_leads=[48, 48])
