"""``ensml evaluate`` refuses inputs it would mis-score silently: one line naming the file, no output.

What made each predictions, spread predictions and members file is read back from it (its
``ensml_*`` run metadata): a file without it, files of two runs in one option, a model of the
other kind and a ``--k`` that disagrees are refused.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import xarray as xr

from ensml.cli.main import main
from tests.cli.bad_rows import hashes, sandbox
from tests.verify.test_cases import run_failing as run_failing_in


@pytest.fixture
def work(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.chdir(tmp_path)
    return tmp_path


def run_failing(args: list[str], capsys: pytest.CaptureFixture, match: str) -> str:
    """Exit status 1, one line naming ``match``, no traceback, nothing written in this folder."""
    return run_failing_in(args, capsys, match, Path.cwd())


@pytest.fixture
def preds(fitted: Path) -> Path:
    """The smoke MixedTask's predictions: z_mean, t_mean, z_std, t_std at +48 h, 20 test inits."""
    return fitted / "runs" / "smoke" / "predictions.nc"


def _variant(src: Path, dst: Path, change: Callable[[xr.Dataset], xr.Dataset]) -> Path:
    with xr.open_dataset(src) as ds:
        out = change(ds.load())
    out.to_netcdf(dst)
    return dst


def _set(var: str, index: tuple, value: float) -> Callable[[xr.Dataset], xr.Dataset]:
    def change(ds: xr.Dataset) -> xr.Dataset:
        ds[var][index] = value
        return ds

    return change


def _evaluate(data: dict[str, Path], *extra: object, **files: object) -> list[str]:
    paths = {"forecast": data["forecast"], "analysis": data["analysis"], **files}
    return ["evaluate", *(f"--{k}={v}" for k, v in paths.items()), "--out_dir=out", *map(str, extra)]


def _spread_file(preds: Path, dst: Path) -> Path:
    """A spread model's ``ensml predict`` output: ``<var>_std`` only."""
    return _variant(preds, dst, lambda ds: ds[["z_std", "t_std"]].assign_attrs(ensml_task="SpreadTask"))


def test_nan_in_predictions(tiny_data, preds, work, capsys) -> None:
    bad = _variant(preds, work / "p.nc", _set("z_mean", (3, 1, 2, 4), np.nan))
    line = run_failing(_evaluate(tiny_data, predictions=bad), capsys, f"predictions file {bad}: 1 NaN value")
    assert (
        "in 'z_mean' (first at init_time=2017-11-12 00:00, level=850, latitude=61.875, longitude=45)" in line
    )
    assert not (work / "out").exists()


def test_inf_in_predictions(tiny_data, preds, work, capsys) -> None:
    bad = _variant(preds, work / "p.nc", _set("t_std", (0, 0, 0, 0), -np.inf))
    run_failing(
        _evaluate(tiny_data, predictions=bad), capsys, f"predictions file {bad}: 1 infinite value in 't_std'"
    )


def test_nan_in_one_file_of_a_glob_names_that_file(tiny_data, preds, work, capsys) -> None:
    with xr.open_dataset(preds) as ds:
        ds.load().isel(init_time=slice(0, 10)).to_netcdf(work / "p0.nc")
        part = ds.load().isel(init_time=slice(10, None))
    part["z_std"][2, 0, 5, 5] = np.nan
    part.to_netcdf(work / "p1.nc")
    run_failing(
        _evaluate(tiny_data, predictions=work / "p*.nc"), capsys, f"predictions file {work / 'p1.nc'}: 1 NaN"
    )


def test_predictions_missing_a_variable(tiny_data, preds, work, capsys) -> None:
    bad = _variant(preds, work / "p.nc", lambda ds: ds.drop_vars(["t_mean", "t_std"]))
    line = run_failing(
        _evaluate(tiny_data, predictions=bad), capsys, f"predictions file {bad} has no t_mean, t_std"
    )
    assert "found: z_mean, z_std" in line and "--variables" in line
    # asked for z alone, the same file is scored
    assert main(_evaluate(tiny_data, "--variables=[z]", predictions=bad)) == 0 and (work / "out").is_dir()


def test_spread_predictions_missing_a_variable(tiny_data, preds, work, capsys) -> None:
    bad = _variant(preds, work / "s.nc", lambda ds: ds[["z_std"]].assign_attrs(ensml_task="SpreadTask"))
    run_failing(
        _evaluate(tiny_data, spread_predictions=bad), capsys, f"spread predictions file {bad} has no t_std"
    )


def test_mixed_predictions_as_spread_predictions(tiny_data, preds, work, capsys) -> None:
    line = run_failing(
        _evaluate(tiny_data, spread_predictions=preds), capsys, "holds Gaussian (post-processing) predictions"
    )
    assert line.startswith(f"ensml: spread predictions file {preds}") and line.endswith(
        "pass it as --predictions"
    )


def test_spread_predictions_as_predictions(tiny_data, preds, work, capsys) -> None:
    spread = _spread_file(preds, work / "s.nc")
    line = run_failing(_evaluate(tiny_data, predictions=spread), capsys, "holds a spread model's predictions")
    assert line.startswith(f"ensml: predictions file {spread}") and line.endswith("--spread_predictions")
    assert main(_evaluate(tiny_data, spread_predictions=spread)) == 0  # where it belongs


def test_postprocess_spread_output_as_predictions(tiny_data, preds, work, capsys) -> None:
    """An ``ensml postprocess`` file of a spread model has ``<var>_mean`` too: its task decides."""

    def spread_task(ds: xr.Dataset) -> xr.Dataset:
        return ds.assign_attrs(ensml_task="SpreadTask")

    bad = _variant(preds, work / "pp.nc", spread_task)
    run_failing(
        _evaluate(tiny_data, predictions=bad),
        capsys,
        "(ensml_task SpreadTask): pass it as --spread_predictions",
    )


@pytest.mark.slow
def test_nan_in_forecast(tiny_data, work, capsys) -> None:
    # init 2017-12-27 (the last verified at 48 h), lead 48 h, member 1, level 500
    bad = _variant(tiny_data["forecast"], work / "f.nc", _set("z", (120, 2, 0, 0, 3, 7), np.nan))
    line = run_failing(_evaluate(tiny_data, forecast=bad), capsys, f"forecast {bad}: 1 NaN value in 'z'")
    assert "first at init_time=2017-12-27 00:00, member=1, level=500" in line


def test_inf_in_analysis(tiny_data, work, capsys) -> None:
    # 2017-03-01 is the valid time of the 2017-02-27 init at 48 h
    bad = _variant(tiny_data["analysis"], work / "a.nc", _set("t", (59, 1, 4, 4), np.inf))
    line = run_failing(_evaluate(tiny_data, analysis=bad), capsys, f"analysis {bad}: 1 infinite value in 't'")
    assert "first at time=2017-03-01 00:00, level=850" in line


def _members(tiny_data: dict[str, Path], preds: Path, dst: Path, change=None) -> Path:
    """Calibrated members: the forecast with the run metadata of the smoke model's predictions."""
    with xr.open_dataset(preds) as p:
        attrs = dict(p.attrs)
    return _variant(tiny_data["forecast"], dst, lambda ds: (change(ds) if change else ds).assign_attrs(attrs))


@pytest.mark.slow
def test_nan_in_members(tiny_data, preds, work, capsys) -> None:
    bad = _members(tiny_data, preds, work / "m.nc", _set("t", (110, 2, 4, 1, 0, 0), np.nan))
    run_failing(_evaluate(tiny_data, members=bad), capsys, f"members file {bad}: 1 NaN value in 't'")


# --- run metadata ---------------------------------------------------------------------------------


def _meta(**attrs: object) -> Callable[[xr.Dataset], xr.Dataset]:
    return lambda ds: ds.assign_attrs({f"ensml_{k}": v for k, v in attrs.items()})


@pytest.mark.parametrize("option", ["predictions", "spread_predictions", "members"])
def test_file_without_run_metadata(tiny_data, preds, work, capsys, option) -> None:
    source = tiny_data["forecast"] if option == "members" else preds
    bare = _variant(source, work / "bare.nc", lambda ds: ds.drop_attrs())
    what = option.replace("_", " ")
    line = run_failing(
        _evaluate(tiny_data, **{option: bare}), capsys, f"{what} file {bare} has no ensml_task"
    )
    assert line.endswith(
        "it was not written by ensml predict or ensml postprocess of this version, so what "
        "made it cannot be checked"
    )


def test_two_checkpoints_in_one_predictions_glob(tiny_data, preds, work, capsys) -> None:
    first = _variant(preds, work / "p0.nc", lambda ds: ds.isel(init_time=slice(0, 10)))
    second = _variant(
        preds,
        work / "p1.nc",
        lambda ds: _meta(checkpoint_sha256="9f" * 32)(ds.isel(init_time=slice(10, None))),
    )
    with xr.open_dataset(preds) as ds:
        sha = ds.attrs["ensml_checkpoint_sha256"][:12]
    line = run_failing(_evaluate(tiny_data, predictions=work / "p*.nc"), capsys, "come from different runs")
    assert line == (
        f"ensml: predictions files {first} and {second} come from different runs (checkpoint {sha} vs "
        f"{'9f' * 6}); score one run at a time"
    )


@pytest.mark.slow
def test_k_comes_from_the_run(tiny_data, preds, work, capsys) -> None:
    line = run_failing(_evaluate(tiny_data, "--k=3", predictions=preds), capsys, "k=3 was given")
    assert line == f"ensml: k=3 was given, but predictions {preds} was made from k=5 members; leave k unset"
    three = _variant(preds, work / "k3.nc", _meta(k=3, members="0 1 2"))
    assert main(_evaluate(tiny_data, predictions=three)) == 0
    forecasts = set(pd.read_csv(work / "out" / "scores.csv")["forecast"])
    assert "raw subset (3 members)" in forecasts and "raw subset (5 members)" not in forecasts
    assert main([*_evaluate(tiny_data, predictions=preds), "--k=5"]) == 0  # agrees: fine


@pytest.mark.parametrize("verb", ["evaluate", "report"])
def test_a_disagreeing_k_is_one_line_and_harmless(tiny_data, preds, work, capsys, verb) -> None:
    """``--k`` repeats a fact of the predictions' run metadata: a disagreeing one is refused with
    one line and exit status 1 before any work, every file around byte-identical."""
    sandbox(work)
    roots = (work, Path(tiny_data["forecast"]).parent, preds.parent)
    before = hashes(*roots)
    args = [verb, *_evaluate(tiny_data, "--k=3", predictions=preds)[1:]]
    assert main(args) == 1
    lines = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert lines == [
        f"ensml: k=3 was given, but predictions {preds} was made from k=5 members; leave k unset"
    ]
    assert hashes(*roots) == before


def test_runs_of_two_k(tiny_data, preds, work, capsys) -> None:
    spread = _variant(
        preds,
        work / "s.nc",
        lambda ds: _meta(task="SpreadTask", k=3, members="0 1 2")(ds[["z_std", "t_std"]]),
    )
    run_failing(
        _evaluate(tiny_data, predictions=preds, spread_predictions=spread),
        capsys,
        f"predictions {preds} was made from k=5 members and spread predictions {spread} from k=3; score",
    )


@pytest.mark.parametrize(
    ("args", "match"),
    [
        (["--k=0"], "k"),
        (["--levels=[-500]"], "levels"),
        (["--leads=[24h, soon]"], "lead time 'soon' is not understood"),
    ],
)
def test_bad_option_values_are_one_line(tiny_data, work, capsys, args, match) -> None:
    run_failing(_evaluate(tiny_data, *args), capsys, match)


@pytest.mark.slow
def test_nan_in_oracle(tiny_data, work, capsys) -> None:
    with xr.open_dataset(tiny_data["oracle"]) as ds:
        index = (30, list(ds.lead_time.values).index(np.timedelta64(48, "h")), 0, 1, 1)
        assert ds["z_mean"].dims[:2] == ("init_time", "lead_time")
    bad = _variant(tiny_data["oracle"], work / "o.nc", _set("z_mean", index, np.nan))
    run_failing(_evaluate(tiny_data, oracle=bad), capsys, f"oracle {bad}: 1 NaN value in 'z_mean'")
