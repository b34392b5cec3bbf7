"""``ensml prune``: a pruned checkpoint that ``predict`` takes, the pruning read back, bad inputs."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from ensml.cli.main import main
from ensml.experiments.prune import PRUNING_KEY, read_pruning
from ensml.predictions import file_sha256
from tests.conftest import write_smoke_config
from tests.data.outputs_sandbox import make_sandbox, snapshot

pytestmark = pytest.mark.timeout(300)


@pytest.fixture
def work(fitted: Path, tiny_data, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, Path]:
    """A user's folder holding a fit config on the tiny data; the smoke fit's best checkpoint."""
    monkeypatch.chdir(tmp_path)
    return {
        "config": write_smoke_config(tiny_data, tmp_path / "fit.yaml"),
        "ckpt": fitted / "runs" / "smoke" / "checkpoints" / "best.ckpt",
    }


def _nets(state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    return {k: v for k, v in state.items() if k.startswith("net.") and k.endswith(".weight")}


@pytest.mark.slow
def test_prune_writes_a_checkpoint_that_predict_takes(work, capsys) -> None:
    assert main(["prune", "--ckpt_path", str(work["ckpt"]), "--out_dir", "out", "--sparsity", "0.8"]) == 0
    assert "prune: wrote out/pruned.ckpt: magnitude pruning, sparsity 80.0%" in capsys.readouterr().out
    record = read_pruning("out/pruned.ckpt")
    assert record["method"] == "magnitude" and record["target_sparsity"] == 0.8
    assert record["sparsity"] == pytest.approx(0.8, abs=1e-4)
    assert record["source_sha256"] == file_sha256(work["ckpt"]) and record["networks"] == ["net"]
    source = torch.load(work["ckpt"], weights_only=True)
    pruned = torch.load("out/pruned.ckpt", weights_only=True)
    assert PRUNING_KEY not in source and read_pruning(work["ckpt"]) is None
    assert set(pruned) == {*source, PRUNING_KEY}
    shapes = [{k: v.shape for k, v in c["state_dict"].items()} for c in (pruned, source)]
    assert shapes[0] == shapes[1]
    weights = torch.cat([v.flatten() for v in _nets(pruned["state_dict"]).values()])
    assert float((weights == 0).float().mean()) == pytest.approx(0.8, abs=1e-3)
    torch.testing.assert_close(pruned["state_dict"]["clim_mean"], source["state_dict"]["clim_mean"])

    args = [
        "predict",
        "--config",
        str(work["config"]),
        "--ckpt_path=out/pruned.ckpt",
        "--trainer.limit_predict_batches=2",
    ]
    assert main(args) == 0
    assert Path("runs/smoke/predictions.nc").is_file()


@pytest.mark.slow
def test_channel_pruning_retrained_in_steps(work, capsys) -> None:
    args = [
        "prune",
        "--ckpt_path",
        str(work["ckpt"]),
        "--out_dir",
        "out",
        "--sparsity",
        "0.5",
        "--method",
        "channel",
        "--config",
        str(work["config"]),
        "--retrain_epochs",
        "1",
        "--steps",
        "2",
    ]
    assert main(args) == 0
    record = read_pruning("out/pruned.ckpt")
    assert (record["method"], record["steps"], record["retrain_epochs"]) == ("channel", 2, 1)
    state = torch.load("out/pruned.ckpt", weights_only=True)["state_dict"]
    source = torch.load(work["ckpt"], weights_only=True)["state_dict"]
    for key, w in _nets(state).items():
        if key.startswith("net.head."):  # the output fields keep their channels
            assert (w.flatten(1) != 0).any(1).all(), key
            continue
        dim = 1 if key.startswith("net.upsamplers.") else 0
        dead = w.transpose(0, dim).flatten(1).eq(0).all(1)
        assert dead.float().mean() >= 0.5 - 1e-6, key
        assert (state[key[: -len("weight")] + "bias"][dead] == 0).all(), key
        assert not torch.equal(w, source[key]), key  # retrained
    assert not list(Path().glob("lightning_logs")) and not Path("runs").exists()  # retraining wrote nothing


def _user_folder(root: Path) -> Path:
    return make_sandbox(root / "user", root / "outside")


@pytest.mark.parametrize(
    ("options", "match"),
    [
        (["--sparsity", "1.0"], "option --sparsity: 1.0 is out of range"),
        (["--sparsity", "-0.1"], "option --sparsity: -0.1 is out of range"),
        (["--ckpt_path", "user/missing.ckpt"], "checkpoint user/missing.ckpt does not exist"),
        (["--ckpt_path", "user/scores.csv"], "checkpoint user/scores.csv cannot be read"),
        (["--out_dir", "user/scores.csv"], "out_dir user/scores.csv is a file"),
        (["--out_dir", "user"], "out_dir user holds"),
        (["--steps", "3"], "--steps 3 needs --retrain_epochs"),
        (["--retrain_epochs", "1"], "--retrain_epochs 1 needs --config"),
        (["--retrain_epochs", "1", "--config", "user/no.yaml"], "config file user/no.yaml does not exist"),
        (["--method", "random"], "option --method"),
    ],
)
def test_bad_inputs_are_one_line_and_touch_nothing(work, tmp_path, capsys, options, match) -> None:
    _user_folder(tmp_path)
    before = snapshot(tmp_path, work["ckpt"].parents[2])
    args = {"--ckpt_path": str(work["ckpt"]), "--out_dir": "new"}
    args.update(dict(zip(options[::2], options[1::2], strict=True)))
    assert main(["prune", *[x for kv in args.items() for x in kv]]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("ensml: ") and match in err[0], err
    assert snapshot(tmp_path, work["ckpt"].parents[2]) == before  # byte-identical, nothing new


def test_two_stage_task_prunes_both_networks_and_postprocess_loads_it(work) -> None:
    from ensml.postprocess.models import ModelSet, load_models
    from ensml.train.tasks import MixedTask

    source = torch.load(work["ckpt"], weights_only=True)
    hp = {**source["hyper_parameters"], "scheme": "two_stage"}
    task = MixedTask(**{k: v for k, v in hp.items() if not k.startswith("_")})
    stats = {k: v for k, v in source["state_dict"].items() if not k.startswith("net.")}
    task.load_state_dict({**task.state_dict(), **stats})
    torch.save({**source, "hyper_parameters": hp, "state_dict": task.state_dict()}, "two.ckpt")

    assert main(["prune", "--ckpt_path", "two.ckpt", "--out_dir", "out", "--sparsity", "0.6"]) == 0
    record = read_pruning("out/pruned.ckpt")
    assert record["networks"] == ["net", "net_sigma"] and record["sparsity"] == pytest.approx(0.6, abs=1e-3)
    assert record["layers"]["net.head.conv"] < 1 and "net_sigma.head.conv" in record["layers"]
    loaded = load_models(ModelSet.from_paths(["out/pruned.ckpt"]))[0]  # postprocess's loader
    for net in (loaded.net, loaded.net_sigma):  # each network pruned to the target on its own
        w = torch.cat([p.detach().flatten() for n, p in net.named_parameters() if n.endswith("weight")])
        assert float((w == 0).float().mean()) == pytest.approx(0.6, abs=1e-2)
