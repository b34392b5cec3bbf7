"""Bad predictive-distribution options in every verb that takes them: one ``ensml:`` line naming
the option and the value, exit 1, the sandbox of user files byte-identical, nothing written."""

from __future__ import annotations

from pathlib import Path

import pytest

from ensml.cli.main import main
from tests.cli.bad_rows import FIT, Row, check, hashes, inputs, row_args, sandbox  # noqa: F401

DIST = " --model.init_args.distribution"
CELSIUS = " --data.forecast {celsius_fc} --data.analysis {celsius_an}"
PREDICT = "predict --config {smoke} {data} --ckpt_path {ckpt}"
ROWS: list[Row] = [
    (
        "fit: unknown family",
        FIT + DIST + ' {{"t":"gamma"}}',
        1,
        ("model.distribution.t", "unknown distribution 'gamma'", "csg0"),
    ),
    (
        "fit: family of no variable",
        FIT + DIST + ' {{"q":"csg0"}}',
        1,
        ("model.distribution names q", "(z, t)"),
    ),
    (
        "fit: bqn degree too high",
        FIT + DIST + ' {{"z":"bqn:99"}}',
        1,
        ("model.distribution.z", "bqn degree must be 2 … 30, got 99"),
    ),
    ("fit: bqn degree not a number", FIT + DIST + ' {{"z":"bqn:x"}}', 1, ("model.distribution.z", "'bqn:x'")),
    (
        "fit: two_stage with csg0",
        FIT + DIST + ' {{"t":"csg0"}} --model.init_args.scheme two_stage',
        1,
        ("two_stage", "t: csg0"),
    ),
    (
        "fit: negative data in a family bounded at 0",
        FIT + DIST + ' {{"t":"csg0"}}' + CELSIUS,
        1,
        ("model.distribution.t", "csg0 is bounded below at 0", "reach -"),
    ),
    (
        "predict: checkpoint of another family",
        PREDICT + DIST + ' {{"t":"truncnormal"}}',
        1,
        ("trained with distribution {{z: normal, t: normal}}", "asks for {{z: normal, t: truncnormal}}"),
    ),
]


@pytest.fixture(scope="module")
def more(inputs, fitted, tmp_path_factory) -> dict[str, str]:  # noqa: F811
    """The inputs, a checkpoint of the normal family, and the tiny data with t in °C (below 0)."""
    import xarray as xr

    folder = tmp_path_factory.mktemp("celsius")
    out = {}
    for key in ("fc", "an"):
        with xr.open_dataset(inputs[key]) as ds:
            ds = ds.load()
        ds["t"] = ds["t"] - 273.15
        out[f"celsius_{key}"] = str(folder / Path(inputs[key]).name)
        ds.to_netcdf(out[f"celsius_{key}"])
    return {**inputs, **out, "ckpt": str(fitted / "runs/smoke/checkpoints/best.ckpt")}


@pytest.mark.slow
@pytest.mark.parametrize("row", [pytest.param(r, id=r[0]) for r in ROWS])
def test_bad_distribution_option(row: Row, more, tmp_path: Path, monkeypatch, capsys) -> None:
    sandbox(tmp_path)
    monkeypatch.chdir(tmp_path)
    watched = [tmp_path, Path(more["fc"]).parent, Path(more["celsius_fc"]).parent]
    before = hashes(*watched)
    status = main(row_args(row, more))
    check(row, status, capsys.readouterr().err, before, hashes(*watched))
