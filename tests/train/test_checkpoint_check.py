"""Every checkpoint is read through one function (ensml.train.checkpoint_file.read_checkpoint).

A table: each doctored copy of the smoke fit's checkpoint (a renamed state key, a wrong tensor
shape, a hyperparameter of a newer ensml, another grid, a shifted grid), and model options that
disagree with the checkpoint, under each verb that reads checkpoints (``predict``, ``test``,
``fit --ckpt_path``, ``prune``, ``postprocess``). Each row must exit 1 with exactly one
``ensml:`` line naming the fault, and leave a sandbox of a user's files, the inputs and the
checkpoints byte-identical, with nothing created. The checkpoints are doctored with
``torch.load``/``torch.save`` from the session's one trained model (``fitted``).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch

from ensml.cli.main import main
from ensml.train.checkpoint_file import read_checkpoint
from tests.conftest import SMOKE, tiny_data_args, write_smoke_config
from tests.data.outputs_sandbox import make_sandbox, snapshot

pytestmark = pytest.mark.timeout(120)


def _renamed(ckpt: dict[str, Any]) -> None:
    state = ckpt["state_dict"]
    state["net.head.proj.weight"] = state.pop("net.head.conv.weight")


def _reshaped(ckpt: dict[str, Any]) -> None:
    weight = ckpt["state_dict"]["net.head.conv.weight"]
    ckpt["state_dict"]["net.head.conv.weight"] = torch.zeros(weight.shape[0], weight.shape[1] + 1, 1, 1, 1)


def _newer(ckpt: dict[str, Any]) -> None:
    ckpt["hyper_parameters"]["ensemble_dropout"] = 0.1


def _coarser_grid(ckpt: dict[str, Any]) -> None:
    """A consistent checkpoint of a model trained on every other point (8 × 16)."""
    state = ckpt["state_dict"]
    for key in ("clim_mean", "static", "local.a", "local.b"):
        state[key] = state[key][..., ::2, ::2].clone()
    state["lat_weights"] = state["lat_weights"][::2].clone()
    ckpt["hyper_parameters"]["grid_shape"] = (8, 16)
    grid = ckpt["ensml_grid"]
    grid.update(latitude=grid["latitude"][::2], longitude=grid["longitude"][::2])


def _shifted_grid(ckpt: dict[str, Any]) -> None:
    """The same sizes, longitudes one degree east."""
    ckpt["ensml_grid"]["longitude"] = [x + 1.0 for x in ckpt["ensml_grid"]["longitude"]]


DOCTORS: dict[str, Callable[[dict[str, Any]], None]] = {
    "renamed": _renamed,
    "reshaped": _reshaped,
    "newer": _newer,
    "coarser": _coarser_grid,
    "shifted": _shifted_grid,
}

#: What the one line says about each doctored checkpoint.
SAYS: dict[str, tuple[str, ...]] = {
    "renamed": (
        "renamed.ckpt",
        "no state key 'net.head.conv.weight'",
        "unexpected state key 'net.head.proj.weight'",
    ),
    "reshaped": ("reshaped.ckpt", "'net.head.conv.weight' has shape (4, 5, 1, 1, 1)", "(4, 4, 1, 1, 1)"),
    "newer": ("newer.ckpt", "newer ensml", "unknown hyperparameter 'ensemble_dropout'"),
    "coarser": ("coarser.ckpt", "another grid", "16 × 32 points", "trained on 8 × 16 points"),
    "shifted": ("shifted.ckpt", "another grid", "longitude 0 … 348.75", "longitude 1 … 349.75"),
}


@pytest.fixture(scope="module")
def inputs(
    fitted: Path, tiny_data: dict[str, Path], tmp_path_factory: pytest.TempPathFactory
) -> dict[str, Any]:
    """The doctored checkpoints beside the trained one, a fit config of the tiny data."""
    folder = tmp_path_factory.mktemp("doctored")
    best = fitted / "runs/smoke/checkpoints/best.ckpt"
    for name, doctor in DOCTORS.items():
        ckpt = torch.load(best, map_location="cpu", weights_only=True)
        doctor(ckpt)
        torch.save(ckpt, folder / f"{name}.ckpt")
    config = write_smoke_config(tiny_data, folder / "fit.yaml")
    return {"dir": folder, "best": best, "config": config, **tiny_data}


def _lightning(verb: str) -> Callable[[dict[str, Any], Path], list[str]]:
    def args(i: dict[str, Any], ckpt: Path) -> list[str]:
        return [verb, "--config", SMOKE, *tiny_data_args(i), f"--ckpt_path={ckpt}"]

    return args


def _prune(i: dict[str, Any], ckpt: Path) -> list[str]:
    # With retraining, so that prune has data to compare the checkpoint with.
    return [
        "prune",
        f"--ckpt_path={ckpt}",
        "--out_dir=pruned",
        "--retrain_epochs=1",
        f"--config={i['config']}",
    ]


def _postprocess(i: dict[str, Any], ckpt: Path) -> list[str]:
    return [
        "postprocess",
        f"--checkpoints=[{ckpt}]",
        f"--forecasts={i['forecast']}",
        f"--analysis={i['analysis']}",
        "--out_dir=pp",
        "--cluster=none",
    ]


VERBS: dict[str, Callable[[dict[str, Any], Path], list[str]]] = {
    "predict": _lightning("predict"),
    "test": _lightning("test"),
    "fit --ckpt_path": _lightning("fit"),
    "prune": _prune,
    "postprocess": _postprocess,
}

#: postprocess checks each forecast file against the checkpoints on its own: a file on another
#: grid fails alone (exit 2, its reason in the manifest) while the others are done
#: (tests/postprocess/test_bad_inputs.py); see test_postprocess_fails_each_file_on_another_grid.
PER_FILE = {("postprocess", "coarser"), ("postprocess", "shifted")}

ROWS = [(verb, doctor) for verb in VERBS for doctor in DOCTORS if (verb, doctor) not in PER_FILE]

#: Model options that disagree with the checkpoint (trained with the smoke config: width 4).
OPTION_ROWS: list[tuple[str, list[str], tuple[str, ...]]] = [
    ("fit --ckpt_path", ["--model.init_args.width=16"], ("option --model.init_args.width 16", "width 4")),
    ("fit --ckpt_path", ["--model.init_args.lr=0.01"], ("option --model.init_args.lr 0.01", "lr 0.002")),
    ("predict", ["--model.init_args.width=16"], ("option --model.init_args.width 16", "width 4")),
    ("predict", ["--model.init_args.depth=3"], ("option --model.init_args.depth 3", "depth 2")),
    ("test", ["--model.init_args.width=8"], ("option --model.init_args.width 8", "width 4")),
    (
        "test",
        ["--model.init_args.local_affine=false"],
        ("--model.init_args.local_affine False", "local_affine True"),
    ),
]


def _run_refused(
    args: list[str], says: tuple[str, ...], inputs: dict[str, Any], work: Path, capsys: pytest.CaptureFixture
) -> None:
    """Run ``ensml ARGS`` in ``work`` (a user's folder): exit 1, one line, nothing changed or created."""
    make_sandbox(work / "user", work / "outside")
    roots = (work, inputs["dir"], inputs["best"].parents[2], Path(inputs["forecast"]).parent)
    before = snapshot(*roots)
    status = main([str(a) for a in args])
    lines = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert status == 1, f"exit status {status}: {lines[-5:]}"
    assert len(lines) == 1 and lines[0].startswith("ensml: "), lines[:8]
    for text in says:
        assert text in lines[0], f"{text!r} not in {lines[0]!r}"
    assert snapshot(*roots) == before, "a user's file, an input or a checkpoint changed, or a file appeared"


@pytest.mark.parametrize(("verb", "doctor"), ROWS, ids=[f"{v}: {d}" for v, d in ROWS])
def test_a_doctored_checkpoint_is_one_line(verb, doctor, inputs, tmp_path, monkeypatch, capsys) -> None:
    monkeypatch.chdir(tmp_path)
    args = VERBS[verb](inputs, inputs["dir"] / f"{doctor}.ckpt")
    _run_refused(args, SAYS[doctor], inputs, tmp_path, capsys)


@pytest.mark.parametrize(
    ("verb", "options", "says"), OPTION_ROWS, ids=[f"{r[0]}: {r[1][0]}" for r in OPTION_ROWS]
)
def test_a_model_option_that_disagrees_is_refused(
    verb, options, says, inputs, tmp_path, monkeypatch, capsys
) -> None:
    monkeypatch.chdir(tmp_path)
    args = [*VERBS[verb](inputs, inputs["best"]), *options]
    _run_refused(args, (*says, str(inputs["best"])), inputs, tmp_path, capsys)


@pytest.mark.parametrize("doctor", ["coarser", "shifted"])
def test_postprocess_fails_each_file_on_another_grid(doctor, inputs, tmp_path, monkeypatch, capsys) -> None:
    monkeypatch.chdir(tmp_path)
    status = main(VERBS["postprocess"](inputs, inputs["dir"] / f"{doctor}.ckpt"))
    captured = capsys.readouterr()
    assert status == 2 and captured.err.strip().splitlines()[-1].startswith("ensml: 1 of 1 units failed")
    reason = json.loads((tmp_path / "pp" / "manifest.jsonl").read_text().splitlines()[-1])["reason"]
    for text in ("another grid than the checkpoints", *SAYS[doctor][2:]):
        assert text in reason, reason
    assert not list((tmp_path / "pp").glob("*.nc"))


@pytest.mark.slow
def test_the_trained_checkpoint_passes_and_running_options_may_differ(inputs, tmp_path, monkeypatch) -> None:
    ckpt = read_checkpoint(inputs["best"])
    ckpt.check_options({"width": 4, "compile": True, "checkpointing": "levels"})
    assert ckpt.task_class.__name__ == "MixedTask" and ckpt.grid_shape == (16, 32)
    torch.testing.assert_close(
        ckpt.build().state_dict()["net.head.conv.weight"], ckpt.state_dict["net.head.conv.weight"]
    )
    monkeypatch.chdir(tmp_path)  # how a network runs is the config's to choose, also with a checkpoint
    args = [
        *VERBS["predict"](inputs, inputs["best"]),
        "--model.init_args.checkpointing=levels",
        "--trainer.limit_predict_batches=1",
    ]
    assert main(args) == 0


def test_the_table_covers_every_doctor_and_verb() -> None:
    assert {v for v, _ in ROWS} == set(VERBS) and {d for _, d in ROWS} == set(DOCTORS)
    assert len(ROWS) + len(OPTION_ROWS) >= 29
