"""``ensml plan-memory``: the table of every policy, the written config, and its refusals."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest
import yaml

from ensml.cli.main import main
from ensml.errors import EnsmlError
from ensml.experiments.memory_plan import parse_bytes
from ensml.models.memory import MemoryPolicy
from ensml.models.memory_plan import PolicyFit, measure_grids, plan_memory
from ensml.models.memory_profile import StepMeasure
from tests.conftest import write_smoke_config

POLICIES = ["none", "levels", "levels [0, 1]", "all", "swap disk", "swap disk [0] + levels"]


@pytest.fixture
def config(tiny_data, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The smoke config on the tiny data, in a folder of the user's."""
    monkeypatch.chdir(tmp_path)
    return write_smoke_config(tiny_data, tmp_path / "mine.yaml")


def _tree(root: Path) -> dict[str, str]:
    return {
        str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(root.rglob("*"))
        if p.is_file()
    }


@pytest.mark.slow  # measures every memory policy
def test_plan_prints_every_policy_and_writes_the_config(config, tmp_path, capsys) -> None:
    args = ["plan-memory", "--config", str(config), "--memory_budget", "2GiB", "--steps", "1"]
    assert main([*args, "--out", "planned/fit.yaml"]) == 0
    out = capsys.readouterr().out
    rows = [line for line in out.splitlines() if line.split("  ")[0].strip() in POLICIES]
    assert len(rows) == 2 * len(POLICIES)  # one rank, and the default 2-rank spatial split
    assert "grid 16 x 32, budget 2.00 GiB" in out and "recommended: " in out
    written = (tmp_path / "planned" / "fit.yaml").read_text()
    assert written.startswith("# written by ensml plan-memory: ")
    init = yaml.safe_load(written)["model"]["init_args"]
    chosen = out.split("recommended: ")[1].splitlines()[0]
    levels = dict(swap_levels=tuple(init["swap_levels"]), checkpoint_levels=tuple(init["checkpoint_levels"]))
    policy = MemoryPolicy(init["checkpointing"], init["offload"], **levels)
    assert policy.name == chosen
    assert yaml.safe_load(written)["data"]["forecast"].endswith("forecast.nc")


@pytest.mark.slow  # measures every memory policy
def test_nothing_fits_is_an_error_and_nothing_is_written(config, tmp_path, capsys) -> None:
    before = _tree(tmp_path)
    args = ["plan-memory", "--config", str(config), "--memory_budget", "1KiB", "--steps", "1"]
    assert main([*args, "--spatial_ranks", "[]", "--out", "fit.yaml"]) == 1
    assert "no policy fits 0.00 GiB; fit.yaml not written" in capsys.readouterr().err
    assert _tree(tmp_path) == before


@pytest.mark.parametrize(
    ("extra", "match"),
    [
        (["--memory_budget", "8 potatoes"], "--memory_budget: '8 potatoes' is not a memory size"),
        (["--memory_budget=-1GiB"], "is not a memory size"),
        (["--out", "mine.yaml"], "--out mine.yaml is the config itself"),
        (["--out", "user.txt"], "user.txt"),
        (["--spatial_ranks", "[1]"], "--spatial_ranks"),
        (["--steps", "0"], "--steps"),
    ],
)
def test_bad_inputs_are_one_line_and_touch_nothing(config, tmp_path, capsys, extra, match) -> None:
    (tmp_path / "user.txt").write_text("a user's file")
    before = _tree(tmp_path)
    assert main(["plan-memory", "--config", str(config), *extra]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1].startswith("ensml: ") and match in err[-1], err
    assert _tree(tmp_path) == before


def test_a_missing_config_is_one_line(tmp_path, monkeypatch, capsys) -> None:
    monkeypatch.chdir(tmp_path)
    assert main(["plan-memory", "--config", "nope.yaml"]) == 1
    assert "config file nope.yaml does not exist" in capsys.readouterr().err


def test_parse_bytes() -> None:
    assert parse_bytes("8GiB") == 8 * 2**30
    assert parse_bytes("2.5 GB") == 2.5e9
    assert parse_bytes("512mib") == 512 * 2**20
    assert parse_bytes("4096") == 4096
    with pytest.raises(EnsmlError):
        parse_bytes("GiB")


def test_measure_grids() -> None:
    assert measure_grids((32, 64), 8) == [(16, 32), (32, 64)]
    assert measure_grids((361, 720), 8) == [(90, 180), (180, 360)]
    assert measure_grids((10, 12), 8) == [(8, 8), (10, 12)]


def _measure(step_s: float, peak: float) -> StepMeasure:
    return StepMeasure("x", step_s, step_s, int(peak / 2), int(peak), 0, 0.0)


def test_the_plan_is_the_affine_fit_in_grid_cells() -> None:
    """Two measurements, at 100 and 400 cells: the plan at 1000 cells extrapolates both lines."""
    fast = PolicyFit(MemoryPolicy(), [100, 400], [_measure(1.0, 1000.0), _measure(2.5, 4000.0)])
    small = PolicyFit(MemoryPolicy("levels"), [100, 400], [_measure(1.2, 400.0), _measure(3.0, 1600.0)])
    plan = plan_memory(
        [fast, small], (20, 50), 1000, budget_bytes=6000.0, fixed_bytes=500.0, batch_bytes_per_point=1.0
    )
    none, levels = plan.rows
    assert none.step_s == pytest.approx(1.0 + 1.5 / 300 * 900)  # 5.5 s
    assert none.total_bytes == pytest.approx(500 + 10_000 + 1000)  # state + peak + batch
    assert levels.total_bytes == pytest.approx(500 + 4_000 + 1000)
    assert (none.fits, levels.fits) == (False, True)
    assert plan.chosen is levels
    # levels: 500 + 5 bytes per cell <= 6000 -> 1100 cells, of aspect 20:50 -> 20 x 55 (rounded down)
    assert levels.largest == (20, 55)
