"""Fixtures: the tiny dataset's test period as an archive (one file per init), and smoke checkpoints."""

from __future__ import annotations

import contextlib
import io
from collections.abc import Iterator, Mapping
from pathlib import Path

import pytest

from ensml.cli.main import main
from tests.conftest import SMOKE, TINY_PERIODS, tiny_data_args

TEST_PERIOD = TINY_PERIODS["test_period"]


@pytest.fixture(scope="session")
def archive_dir(tiny_data: dict[str, Path], tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The tiny test period (Nov–Dec 2017, every 3 days) as one forecast file per init."""
    from ensml.data.archive import archive

    out = tmp_path_factory.mktemp("archive")
    archive(str(tiny_data["forecast"]), str(out), period=tuple(TEST_PERIOD))
    return out


def _fit(tiny_data: dict[str, Path], work: Path, *overrides: str) -> Path:
    with pytest.MonkeyPatch.context() as mp:
        mp.chdir(work)
        assert main(["fit", "--config", SMOKE, *tiny_data_args(tiny_data), *overrides]) == 0
    return work / "runs/smoke/checkpoints/best.ckpt"


class _Checkpoints(Mapping[str, Path]):
    """Smoke checkpoints by name, each trained the first time a test asks for it (a test that
    needs only ``mixed48`` pays for no other fit)."""

    def __init__(self, tiny_data: dict[str, Path], fitted: Path, factory: pytest.TempPathFactory) -> None:
        self._tiny_data, self._factory = tiny_data, factory
        self._paths = {"mixed48": fitted / "runs/smoke/checkpoints/best.ckpt"}

    def __getitem__(self, name: str) -> Path:
        if name not in self._paths:
            overrides = OVERRIDES[name]  # a KeyError names an unknown checkpoint
            # inside a test: the fit's progress must not reach the test's captured output
            with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
                self._paths[name] = _fit(self._tiny_data, self._factory.mktemp(name), *overrides)
        return self._paths[name]

    def __iter__(self) -> Iterator[str]:
        return iter(["mixed48", *OVERRIDES])

    def __len__(self) -> int:
        return 1 + len(OVERRIDES)


#: The fit options of each smoke checkpoint beside ``mixed48`` (the ``fitted`` run).
OVERRIDES = {
    "mixed24": ("--data.input_leads=[0, 24]", "--data.target_leads=24"),
    "spread48": ("--model.class_path=ensml.train.tasks.SpreadTask",),
    "noanalysis48": ("--model.init_args.use_analysis=false",),
    "temporal48": ("--model.init_args.arch=unet3d_time",),
    "mixed2448": ("--data.target_leads=[24, 48]",),
    "generative48": ("--model.class_path=ensml.train.generative.GenerativeTask",),
}


@pytest.fixture(scope="session")
def checkpoints(
    tiny_data: dict[str, Path], fitted: Path, tmp_path_factory: pytest.TempPathFactory
) -> Mapping[str, Path]:
    """Smoke checkpoints: mixed at 48 h (the ``fitted`` run) and 24 h, spread at 48 h, mixed
    without the analysis at initialisation, a temporal network (lead time as a dimension), one
    mixed model of both target leads, 24 and 48 h, and a generative model at 48 h; each trained
    when first used."""
    return _Checkpoints(tiny_data, fitted, tmp_path_factory)


def pp_args(
    ckpts: list[Path], forecasts: str | Path, out: Path, *extra: str, analysis: Path | None = None
) -> list[str]:
    """Arguments of ``ensml postprocess`` in this process (``cluster: none``) unless ``extra`` says."""
    args = [
        "postprocess",
        f"--checkpoints=[{', '.join(str(c) for c in ckpts)}]",
        f"--forecasts={forecasts}",
        f"--out_dir={out}",
        "--cluster=none",
    ]
    if analysis is not None:
        args.append(f"--analysis={analysis}")
    return [*args, *extra]
