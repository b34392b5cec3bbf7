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


def test_fit_with_recomputed_and_swapped_levels_trains_the_same_weights(tiny_data, tmp_path, monkeypatch):
    memory = {
        "model.init_args.checkpointing": "levels",
        "model.init_args.offload": "disk",
        "model.init_args.swap_levels": "[0]",
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
    ],
)
def test_bad_memory_options(tiny_data, tmp_path, monkeypatch, capsys, override, match) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "mine.txt").write_text("a user's file")
    before = _tree(tmp_path)
    run_failing(fit_args(tiny_data, **override), capsys, match)
    assert _tree(tmp_path) == before
