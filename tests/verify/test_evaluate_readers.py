"""``evaluate``'s reader options: the forecast and the analysis are read as ``fit``'s data reads
them (variable renames, GRIB filters), given on the command line."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest
import xarray as xr

from ensml.verify.evaluate import evaluate
from tests.cli.process import run_cli


def _named(tiny_data: dict[str, Path], tmp_path: Path) -> tuple[Path, Path]:
    """The tiny forecast with ``t`` called ``temperature``, the analysis with it called ``ta``."""
    paths = []
    for what, name in (("forecast", "temperature"), ("analysis", "ta")):
        with xr.open_dataset(tiny_data[what]) as ds:
            ds[["t"]].rename(t=name).load().to_netcdf(tmp_path / f"{what}.nc")
        paths.append(tmp_path / f"{what}.nc")
    return paths[0], paths[1]


@pytest.mark.slow
def test_renames_make_two_vocabularies_one(tiny_data: dict[str, Path], tmp_path: Path) -> None:
    """Scores of renamed files equal those of the originals, variable by variable."""
    fc, an = _named(tiny_data, tmp_path)
    renamed = evaluate(
        str(fc),
        str(an),
        leads=24,
        levels=500,
        out_dir=None,
        reader={"rename": {"temperature": "t"}},
        analysis_reader={"rename": {"ta": "t"}},
    )
    plain = evaluate(
        str(tiny_data["forecast"]),
        str(tiny_data["analysis"]),
        leads=24,
        levels=500,
        variables="t",
        out_dir=None,
    )
    pd.testing.assert_frame_equal(renamed.table, plain.table)


@pytest.mark.slow  # evaluate end to end
def test_reader_options_from_the_command_line(tiny_data: dict[str, Path], tmp_path: Path) -> None:
    fc, an = _named(tiny_data, tmp_path)
    args = [
        "evaluate",
        f"--forecast={fc}",
        f"--analysis={an}",
        "--leads=24",
        "--levels=500",
        "--reader={rename: {temperature: t}}",
        "--analysis_reader={rename: {ta: t}}",
        f"--out_dir={tmp_path / 'out'}",
    ]
    done = run_cli(args, tmp_path)
    assert done.returncode == 0, done.stdout
    table = pd.read_csv(tmp_path / "out" / "scores.csv")
    assert set(table["variable"]) == {"t"}


@pytest.mark.slow
def test_a_rename_of_a_missing_variable_is_one_line(tiny_data: dict[str, Path], tmp_path: Path) -> None:
    fc, an = _named(tiny_data, tmp_path)
    args = [
        "evaluate",
        f"--forecast={fc}",
        f"--analysis={an}",
        "--leads=24",
        "--analysis_reader={rename: {q: t}}",
        "--out_dir=null",
    ]
    done = run_cli(args, tmp_path)
    assert done.returncode == 1, done.stdout  # bad data (ensml.errors)
    lines = done.stdout.strip().splitlines()
    assert len(lines) == 1 and "reader.rename names 'q', which it lacks" in lines[0], lines
    assert "Traceback" not in done.stdout
