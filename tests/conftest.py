"""Shared fixtures: a tiny synthetic ensemble (seconds to make) and the real sample data."""

from __future__ import annotations

import os
from pathlib import Path

import lightning  # noqa: F401  (its log handlers bind the real stderr, not a test's captured one)
import numpy as np
import pytest

REPO = Path(__file__).resolve().parents[1]
CONFIGS = REPO / "configs"
SMOKE = str(CONFIGS / "smoke.yaml")
SHARED_DATA = REPO.parent / "shared" / "data" / "real"

# Periods of the tiny dataset: one year of inits every 3 days.
TINY_PERIODS = {
    "train_period": ["2017-01-01", "2017-08-31"],
    "val_period": ["2017-09-01", "2017-10-31"],
    "test_period": ["2017-11-01", "2017-12-31"],
}


@pytest.fixture(scope="session")
def tiny_data(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """forecast/analysis/oracle of a 16 × 32 grid, 10 members, 2017 every 3 days."""
    from ensml.data.synth.generate import synth

    out = tmp_path_factory.mktemp("tiny") / "synth"
    return synth(out, n_lat=16, n_lon=32, start="2017-01-01", end="2017-12-31", every_days=3, seed=1)


def write_smoke_config(data: dict[str, Path], path: Path) -> Path:
    """Write the smoke config, its data section pointed at the tiny dataset, to ``path``."""
    import yaml

    cfg = yaml.safe_load(Path(SMOKE).read_text())
    section = yaml.safe_load((Path(SMOKE).parent / "data.yaml").read_text())
    section.update(forecast=str(data["forecast"]), analysis=str(data["analysis"]), target_leads=48)
    section.update({k: list(v) for k, v in TINY_PERIODS.items()})
    cfg["data"] = section
    path.write_text(yaml.safe_dump(cfg))
    return path


def tiny_data_args(data: dict[str, Path], **overrides: object) -> list[str]:
    """CLI overrides pointing the smoke config at the tiny dataset.

    One target lead (48 h) unless ``overrides`` say otherwise: the tests of one lead's layout
    stay as they were; ``tests/train/test_target_leads.py`` covers models of several leads (the
    default of ``configs/data.yaml``, which ``make demo`` runs).
    """
    args = [f"--data.forecast={data['forecast']}", f"--data.analysis={data['analysis']}"]
    overrides = {"data.target_leads": 48, **overrides}
    for key, (start, end) in TINY_PERIODS.items():
        args.append(f"--data.{key}=[{start}, {end}]")
    args += [f"--{k}={v}" for k, v in overrides.items()]
    return args


@pytest.fixture(scope="session")
def fitted(tiny_data: dict[str, Path], tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A smoke MixedTask trained (and run on the test split) in a fresh working directory."""
    from ensml.cli.main import main

    work = tmp_path_factory.mktemp("cli")
    with pytest.MonkeyPatch.context() as mp:
        mp.chdir(work)
        assert main(["fit", "--config", SMOKE, *tiny_data_args(tiny_data)]) == 0
        ckpt = "--ckpt_path=runs/smoke/checkpoints/best.ckpt"
        assert main(["predict", "--config", SMOKE, *tiny_data_args(tiny_data), ckpt]) == 0
    return work


@pytest.fixture(scope="session")
def real_data() -> Path:
    """../shared/data/real; skipped when absent unless ENSML_REQUIRE_REAL_DATA is set (CI)."""
    if not SHARED_DATA.is_dir():
        if os.environ.get("ENSML_REQUIRE_REAL_DATA"):
            pytest.fail(f"ENSML_REQUIRE_REAL_DATA is set but {SHARED_DATA} is missing")
        pytest.skip(f"real sample data not found at {SHARED_DATA}")
    return SHARED_DATA


def cell_area_weights(latitude_deg: np.ndarray) -> np.ndarray:
    """Exact cell-area weights of a latitude grid, by hand: |sin(upper edge) − sin(lower edge)|."""
    lat = np.deg2rad(np.asarray(latitude_deg, dtype=np.float64))
    edges = np.concatenate([[np.pi / 2], (lat[1:] + lat[:-1]) / 2, [-np.pi / 2]])
    return np.abs(np.sin(edges[:-1]) - np.sin(edges[1:]))
