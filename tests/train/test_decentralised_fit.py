"""``ensml fit`` with eager-SGD and WAGMA-SGD on two gloo ranks.

Where the algorithm is deterministic it must reproduce DDP: eager-SGD whose quorum is every rank
is DDP's gradient average, and WAGMA with one group of every rank, waiting for all of it, is
model averaging after each local step, which with plain SGD is DDP's step. With a straggler the
runs must finish, with every round counted.
"""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest
import torch

from tests.cli.process import run_cli
from tests.conftest import SMOKE, tiny_data_args

pytestmark = [pytest.mark.distributed, pytest.mark.timeout(300)]

STEPS = {
    "trainer.max_epochs": 1,
    "trainer.limit_train_batches": 4,
    "trainer.limit_val_batches": 1,
    "trainer.devices": 2,
}
SGD = ["--optimizer=torch.optim.SGD", "--optimizer.lr=0.05"]
CKPT = "runs/smoke/checkpoints/last.ckpt"


def strategy(cls: str, **init: object) -> str:
    spec = {"class_path": f"ensml.train.decentralised.{cls}", "init_args": init}
    return "--trainer.strategy=" + json.dumps(spec)


def straggler(**init: object) -> str:
    spec = {"class_path": "ensml.train.stragglers.Stragglers", "init_args": init}
    return "--trainer.callbacks+=" + json.dumps(spec)


RUNS = {
    "ddp": ["--trainer.strategy=ddp"],
    "eager_all": [strategy("EagerStrategy", quorum=2)],
    "ddp_sgd": ["--trainer.strategy=ddp", *SGD],
    "wagma_all": [strategy("WagmaStrategy", group_size=2, group_quorum=2, period=0), *SGD],
    "solo_straggler": [
        "--trainer.strategy=eager_solo",
        straggler(ranks=[1], slowdown=3.0),
        "--trainer.callbacks+=ensml.train.progress.TrainingClock",
    ],
    "wagma_straggler": ["--trainer.strategy=wagma", straggler(ranks="random", delay="pareto", delay_s=0.01)],
}


@pytest.fixture(scope="module")
def runs(tiny_data: dict[str, Path], tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    out = {}
    for name, extra in RUNS.items():
        work = tmp_path_factory.mktemp(name)
        done = run_cli(["fit", "--config", SMOKE, *tiny_data_args(tiny_data, **STEPS), *extra], work)
        assert done.returncode == 0, f"{name}: {done.stdout[-3000:]}"
        out[name] = work
    return out


def _weights(work: Path) -> dict[str, torch.Tensor]:
    saved = torch.load(work / CKPT, map_location="cpu", weights_only=False)
    assert saved["global_step"] == 4
    return saved["state_dict"]


def _assert_same(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> None:
    assert a.keys() == b.keys()
    for key in a:
        torch.testing.assert_close(b[key], a[key], rtol=1e-5, atol=1e-6, msg=key)


def _last(work: Path, column: str) -> float:
    rows = [r for r in csv.DictReader(open(work / "runs/smoke/metrics.csv")) if r.get(column)]
    return float(rows[-1][column])


def test_eager_with_a_quorum_of_all_ranks_is_ddp(runs: dict[str, Path]) -> None:
    _assert_same(_weights(runs["ddp"]), _weights(runs["eager_all"]))


def test_wagma_with_one_synchronous_group_is_ddp_under_sgd(runs: dict[str, Path]) -> None:
    ddp, wagma = _weights(runs["ddp_sgd"]), _weights(runs["wagma_all"])
    _assert_same(ddp, wagma)
    assert any(not torch.equal(ddp[k], _weights(runs["ddp"])[k]) for k in ddp)  # SGD did change them


def test_runs_with_a_straggler_finish_and_count_their_contributions(runs: dict[str, Path]) -> None:
    for name in ("solo_straggler", "wagma_straggler"):
        assert all(torch.isfinite(v).all() for v in _weights(runs[name]).values() if v.is_floating_point())
    # The counts logged with the validation after 4 rounds: every round had the fresh work of the
    # rank that started it and at most both ranks' work; the slow rank's arrives late or not at all.
    work = runs["solo_straggler"]
    fresh, stale, computed = (_last(work, f"dist/{k}") for k in ("fresh", "stale", "computed_all"))
    assert 4 <= fresh + stale <= 8 and fresh >= 4
    assert 4 <= computed <= 8 and fresh + stale <= computed


CONVERGE = {
    "trainer.max_epochs": 3,
    "trainer.limit_train_batches": 8,
    "trainer.limit_val_batches": 2,
    "trainer.devices": 2,
    "data.batch_size": 4,
}
CLOCK = "--trainer.callbacks+=ensml.train.progress.TrainingClock"


@pytest.fixture(scope="module")
def converged(tiny_data: dict[str, Path], tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Three epochs of DDP, and of each decentralised strategy with rank 1 twice as slow."""
    slow = straggler(ranks=[1], slowdown=2.0)
    runs = {
        "ddp": ["--trainer.strategy=ddp"],
        "eager_solo": ["--trainer.strategy=eager_solo", slow],
        "eager_majority": ["--trainer.strategy=eager_majority", slow],
        "wagma": [strategy("WagmaStrategy", period=4), slow],
    }
    out = {}
    for name, extra in runs.items():
        work = tmp_path_factory.mktemp(f"converge-{name}")
        done = run_cli(
            ["fit", "--config", SMOKE, *tiny_data_args(tiny_data, **CONVERGE), CLOCK, *extra], work
        )
        assert done.returncode == 0, f"{name}: {done.stdout[-3000:]}"
        out[name] = work
    return out


def _curve(work: Path) -> list[float]:
    return [
        float(r["val/crps"])
        for r in csv.DictReader(open(work / "runs/smoke/metrics.csv"))
        if r.get("val/crps")
    ]


@pytest.mark.parametrize("name", ["eager_solo", "eager_majority", "wagma"])
def test_decentralised_training_converges_like_ddp_under_a_straggler(
    converged: dict[str, Path], name: str
) -> None:
    ddp, curve = _curve(converged["ddp"]), _curve(converged[name])
    assert len(curve) == len(ddp) == 3
    assert curve[-1] < curve[0]  # it learns
    assert abs(curve[-1] / ddp[-1] - 1) < 0.05, (curve, ddp)  # and ends near DDP's CRPS
