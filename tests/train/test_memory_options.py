"""The tasks' memory options through ``ensml fit``: a checkpointed, swapping run trains to the same
weights as the plain one; a bad option is one line, before anything is written."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest
import torch

from ensml.cli.main import main
from ensml.models.memory import policy_of
from ensml.train.tasks import MixedTask
from tests.cli.test_bad_input import fit_args, run_failing


def _weights(run: Path) -> dict[str, torch.Tensor]:
    ckpt = torch.load(run / "checkpoints" / "last.ckpt", map_location="cpu", weights_only=False)
    return {k: v for k, v in ckpt["state_dict"].items() if k.startswith("net.")}


def _tree(root: Path) -> dict[str, str]:
    return {
        str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(root.rglob("*"))
        if p.is_file()
    }


@pytest.mark.slow  # two training runs
def test_fit_with_recomputed_and_swapped_levels_trains_the_same_weights(tiny_data, tmp_path, monkeypatch):
    memory = {
        "model.init_args.checkpointing": "levels",
        "model.init_args.offload": "disk",
        "model.init_args.swap_levels": "[0]",
        "model.init_args.checkpoint_levels": "[1]",
    }
    runs = {}
    for name, options in (("plain", {}), ("memory", memory)):
        (tmp_path / name).mkdir()
        monkeypatch.chdir(tmp_path / name)
        assert main(fit_args(tiny_data, **{"trainer.max_epochs": 1, **options})) == 0
        runs[name] = tmp_path / name / "runs" / "smoke"
    a, b = _weights(runs["plain"]), _weights(runs["memory"])
    assert a.keys() == b.keys()
    for key in a:
        torch.testing.assert_close(a[key], b[key], rtol=0, atol=0, msg=key)
    names = {p.name for p in runs["memory"].rglob("*")}
    assert not any(n.startswith(".ensml-swap") for n in names)  # the scratch file left nothing


def test_the_options_reach_every_network(tiny_data) -> None:
    task = MixedTask(grid_shape=(16, 32), depth=2, width=4, scheme="two_stage", checkpointing="all")
    assert policy_of(task.net) == policy_of(task.net_sigma) == ["recompute"] * 3


@pytest.mark.slow
@pytest.mark.parametrize(
    ("override", "match"),
    [
        ({"model.init_args.checkpointing": "layers"}, "model.init_args.checkpointing"),
        ({"model.init_args.offload": "host"}, "offload: host moves activations off an accelerator"),
        (
            {"model.init_args.offload": "disk", "model.init_args.swap_levels": "[5]"},
            "the U-Net has levels 0 to 2",
        ),
        ({"model.init_args.swap_levels": "[0]"}, "swap_levels needs an offload target"),
        ({"model.init_args.checkpoint_levels": "[0]"}, "checkpoint_levels needs checkpointing"),
        (
            {"model.init_args.checkpointing": "levels", "model.init_args.checkpoint_levels": "[3]"},
            "checkpoint_levels [3]: the U-Net has levels 0 to 2",
        ),
    ],
)
def test_bad_memory_options(tiny_data, tmp_path, monkeypatch, capsys, override, match) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "mine.txt").write_text("a user's file")
    before = _tree(tmp_path)
    run_failing(fit_args(tiny_data, **override), capsys, match)
    assert _tree(tmp_path) == before


def _step(task: MixedTask, batch: dict) -> tuple[torch.Tensor, list[torch.Tensor]]:
    task.train()
    task.zero_grad(set_to_none=True)
    loss = task.loss(batch)
    loss.backward()
    return loss.detach(), [p.grad.clone() for p in task.net.parameters()]


@pytest.fixture(scope="module")
def tiny_batch(tiny_data):
    from ensml.data.datamodule import EnsembleDataModule
    from tests.conftest import TINY_PERIODS

    dm = EnsembleDataModule(
        str(tiny_data["forecast"]), str(tiny_data["analysis"]), batch_size=3, **TINY_PERIODS
    )
    dm.setup("fit")
    return dm, next(iter(dm.train_dataloader()))


@pytest.mark.slow  # torch.compile
@pytest.mark.parametrize(
    ("options", "rtol", "depth"),
    [
        ({"channels_last": True, "fused_norm_act": True}, 1e-5, 2),  # float32 rounding
        ({"bf16": True}, 3e-2, 2),  # bfloat16 has 8 bits of mantissa
        ({"compile": True, "checkpointing": "levels"}, 1e-4, 1),  # depth 1: a shorter compile
    ],
)
def test_speed_options_train_like_the_plain_step(tiny_batch, options, rtol, depth) -> None:
    dm, batch = tiny_batch
    torch.manual_seed(0)
    plain = MixedTask.from_data(dm, width=4, depth=depth, norm_groups=2)
    torch.manual_seed(0)
    fast = MixedTask.from_data(dm, width=4, depth=depth, norm_groups=2, **options)
    assert plain.state_dict().keys() == fast.state_dict().keys()
    (l0, g0), (l1, g1) = _step(plain, batch), _step(fast, batch)
    torch.testing.assert_close(l1, l0, rtol=rtol, atol=0)
    scale = max(g.abs().max() for g in g0)
    for a, b in zip(g1, g0):
        torch.testing.assert_close(a, b, rtol=0, atol=rtol * 10 * scale)
    fast.eval()  # validation and prediction: the plain float32 network
    with torch.no_grad():
        for a, b in zip(fast(batch), plain.eval()(batch)):
            torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)


def test_compile_with_swapping_is_refused() -> None:
    from ensml.errors import EnsmlError

    with pytest.raises(EnsmlError, match="compile cannot trace swapped activations; set offload: none"):
        MixedTask(grid_shape=(16, 32), compile=True, offload="disk")
