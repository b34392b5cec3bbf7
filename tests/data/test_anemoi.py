"""Anemoi datasets read through ensml's one entry point (:mod:`ensml.data.layouts.anemoi`).

These tests need anemoi-datasets, which pins zarr 2 and so lives in its own environment
(``make env-anemoi``: ``.venv-anemoi``). The main suite runs this file there
(``tests/data/test_anemoi_env.py``); in an environment without anemoi-datasets they skip.
The datasets are made by ``anemoi-datasets create`` itself, offline, from the real GRIB sample
(:mod:`tests.data.anemoi_build`), and every value read is compared with ensml's GRIB reader or
with the netCDF the dataset was made from.
"""

from __future__ import annotations

import hashlib
import pickle
from pathlib import Path

import numpy as np
import pytest
import xarray as xr

import ensml  # noqa: F401  (before anemoi, which loads eccodes: pyproj first, see ensml/__init__.py)

pytest.importorskip(
    "anemoi.datasets",
    reason="no anemoi-datasets here: tests/data/test_anemoi_env.py runs this file in .venv-anemoi",
)

from ensml.cli.main import main
from ensml.data.grid import describe, horizontal_dims
from ensml.data.layouts.formats import detect_format
from ensml.data.open import open_analysis, open_forecast, open_inputs
from ensml.data.weights import area_weights
from ensml.errors import EnsmlError
from tests.data import anemoi_build

pytestmark = [pytest.mark.realdata, pytest.mark.slow, pytest.mark.timeout(300)]


@pytest.fixture(scope="module")
def made(real_data: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """The regular and the reduced-grid datasets, and one with a missing date, made once (30 s)."""
    folder = tmp_path_factory.mktemp("anemoi")
    cells, source = anemoi_build.cells(real_data, folder)
    missing = anemoi_build.regular(real_data, folder, missing=["2017-01-01T12:00:00"])
    return {
        "regular": anemoi_build.regular(real_data, folder),
        "cells": cells,
        "source": source,
        "missing": missing,
    }


@pytest.fixture(scope="module")
def grib(real_data: Path) -> xr.Dataset:
    """The same sample through ensml's GRIB reader."""
    return open_forecast(real_data / anemoi_build.GRIB).load()


def test_detected_by_content(made: dict[str, Path]) -> None:
    assert detect_format(made["regular"]) == "anemoi"
    assert detect_format(made["cells"]) == "anemoi"


def test_regular_forecast_equals_the_grib_reader(made: dict[str, Path], grib: xr.Dataset) -> None:
    fc = open_forecast(made["regular"])
    assert dict(fc.sizes) == dict(grib.sizes)
    assert fc.t.dims == grib.t.dims  # (init_time, lead_time, member, level, latitude, longitude)
    for coord in ("init_time", "lead_time", "member", "level", "latitude", "longitude", "valid_time"):
        np.testing.assert_array_equal(fc[coord].values, grib[coord].values, err_msg=coord)
    for var in ("t", "z"):
        np.testing.assert_array_equal(fc[var].values, grib[var].values)  # bit for bit
    assert fc.t.attrs["units"] == "K"
    assert horizontal_dims(fc) == ("latitude", "longitude")


def test_analysis_is_one_member_chosen_by_anemoi(made: dict[str, Path], grib: xr.Dataset) -> None:
    an = open_analysis(made["regular"], reader={"anemoi": {"members": [3]}})
    assert an.t.dims == ("time", "level", "latitude", "longitude")
    np.testing.assert_array_equal(an.time.values, grib.valid_time.values[:, 0])
    np.testing.assert_array_equal(an.z.values, grib.z.isel(lead_time=0).sel(member=3).values)


def test_anemoi_options_select_and_subset(made: dict[str, Path], grib: xr.Dataset) -> None:
    options = {"select": ["t_500"], "start": "2017-01-01T12:00:00", "members": [1, 7]}
    fc = open_forecast(made["regular"], reader={"anemoi": options})
    assert list(fc.data_vars) == ["t"] and fc.level.values.tolist() == [500.0]
    assert fc.sizes["init_time"] == 3 and fc.sizes["member"] == 2
    ref = grib.t.isel(init_time=slice(1, None), member=[1, 7]).sel(level=[500.0])
    np.testing.assert_array_equal(fc.t.values, ref.values)


def test_missing_dates_are_left_out(made: dict[str, Path], grib: xr.Dataset) -> None:
    fc = open_forecast(made["missing"])
    assert fc.init_time.values.tolist() == grib.init_time.values[[0, 2, 3]].tolist()
    np.testing.assert_array_equal(fc.z.values, grib.z.isel(init_time=[0, 2, 3]).values)


def test_lazy_reads_are_the_loaded_values(made: dict[str, Path]) -> None:
    fc = open_forecast(made["regular"])
    whole = fc.z.values
    picks = {"init_time": [0, 3], "member": slice(2, 9, 3), "level": 1, "latitude": [0, 30, 60]}
    np.testing.assert_array_equal(fc.z.isel(picks).values, fc.z.load().isel(picks).values)
    chunked = open_forecast(made["regular"], chunks={})
    assert chunked.z.chunks[0] == (1, 1, 1, 1)  # anemoi's chunks: a date each
    np.testing.assert_array_equal(chunked.z.values, whole)
    again = pickle.loads(pickle.dumps(chunked))  # to data-loader workers and dask workers
    np.testing.assert_array_equal(again.z.values, whole)


def test_reduced_grid_is_read_on_its_cells(made: dict[str, Path]) -> None:
    fc = open_forecast(made["cells"])
    source = xr.open_dataset(made["source"])
    assert horizontal_dims(fc) == ("cell",)
    assert describe(fc) == "unstructured grid of 4260 cells (cell)"
    assert list(fc.data_vars) == ["t", "z"]  # cell_area is a coordinate, not a variable to score
    np.testing.assert_array_equal(fc.latitude.values, source.latitude.values)
    np.testing.assert_array_equal(fc.longitude.values, source.longitude.values)
    for var in ("t", "z"):
        ref = source[var].transpose("time", "number", "level", "values").values
        np.testing.assert_array_equal(fc[var].isel(lead_time=0).values, ref)
    an = open_analysis(made["cells"], reader={"anemoi": {"members": [0]}})
    inputs = open_inputs(made["cells"], an, variables=["t"], leads=0)  # one grid: the same cells
    assert inputs.members == 10


def test_cell_area_given_by_the_dataset_weighs_the_cells(made: dict[str, Path]) -> None:
    fc = open_forecast(made["cells"])
    w = area_weights(fc)
    _, _, exact = anemoi_build.reduced_cells(np.arange(90, -91, -3.0), np.arange(0, 360, 3.0))
    assert w.attrs["weighting"] == "cell area given by the data (cell_area)"
    np.testing.assert_allclose(w.values, exact / exact.mean(), rtol=1e-6)  # float32 in the store
    assert exact.sum() == pytest.approx(4 * np.pi)  # the cells tile the sphere


def test_cell_areas_computed_from_the_coordinates(made: dict[str, Path]) -> None:
    """Without cell_area (dropped by anemoi's own ``drop``), the spherical Voronoi cells of the
    centres: within 0.4 % of the exact band × width areas inside rows of one spacing (Voronoi edges
    are great circles, not latitude circles: 0.37 % at 87° with 12° between cells); beside a change
    of spacing an edge is no longer the mid-latitude, so those rows differ (by up to 20 %)."""
    fc = open_forecast(made["cells"], reader={"anemoi": {"drop": ["cell_area"]}})
    assert "cell_area" not in fc.coords
    w = area_weights(fc)
    assert w.attrs["weighting"] == "spherical Voronoi cell area from the cell centres"
    _, _, exact = anemoi_build.reduced_cells(np.arange(90, -91, -3.0), np.arange(0, 360, 3.0))
    ratio = w.values / (exact / exact.mean())
    lat = np.abs(fc.latitude.values)
    away = (np.abs(lat - 61.5) > 3) & (np.abs(lat - 31.5) > 3)  # rows beside a change of spacing
    np.testing.assert_allclose(ratio[away], 1.0, rtol=4e-3)
    assert np.abs(ratio - 1).max() < 0.25


def _crps(members: np.ndarray, obs: np.ndarray) -> np.ndarray:
    """Ensemble CRPS by its kernel form, members on axis 0: E|X − y| − ½ E|X − X'|."""
    skill = np.abs(members - obs).mean(axis=0)
    spread = np.abs(members[:, None] - members[None, :]).mean(axis=(0, 1))
    return skill - 0.5 * spread


def test_evaluate_scores_the_cells_with_their_areas(made: dict[str, Path], tmp_path: Path) -> None:
    out = tmp_path / "eval"
    args = ["evaluate", "--forecast", str(made["cells"]), "--analysis", str(made["cells"])]
    args += ["--analysis_reader.anemoi", "{members: [0]}", "--leads", "0h", "--out_dir", str(out)]
    assert main(args) == 0
    import pandas as pd

    table = pd.read_csv(out / "scores.csv")
    assert "cell area given by the data" in (out / "scores.md").read_text()
    source = xr.open_dataset(made["source"])
    _, _, exact = anemoi_build.reduced_cells(np.arange(90, -91, -3.0), np.arange(0, 360, 3.0))
    for var, level in (("t", 850.0), ("z", 500.0)):
        fc = source[var].sel(level=level).transpose("number", "time", "values").values.astype(np.float64)
        crps = _crps(fc, fc[0])  # (time, values): the analysis is member 0
        ref = float((crps * exact).sum() / (exact.sum() * crps.shape[0]))
        raw = table.forecast.str.startswith("raw ensemble")
        row = table[(table.variable == var) & (table.level_hPa == level) & raw]
        assert float(row.crps.iloc[0]) == pytest.approx(ref, rel=1e-4)


def _hashes(*roots: Path) -> dict[str, str]:
    out = {}
    for root in roots:
        for path in sorted(root.rglob("*")):
            out[str(path)] = hashlib.sha256(path.read_bytes()).hexdigest() if path.is_file() else "dir"
    return out


BAD = [
    (
        "forecast without an ensemble",
        ["--forecast", "{regular}", "--reader.anemoi", "{members: [0]}"],
        ["has no ensemble", "holds 1 member", "give it as the analysis"],
    ),
    (
        "analysis of ten members",
        ["--forecast", "{regular}", "--analysis", "{regular}"],
        ["holds 10 ensemble members", "reader.anemoi: {members: [0]}"],
    ),
    (
        "an option anemoi refuses",
        ["--forecast", "{regular}", "--reader.anemoi", "{bogus: 1}"],
        ["cannot be opened with reader.anemoi", "Unsupported arguments: bogus"],
    ),
    (
        "a member anemoi has not",
        ["--forecast", "{regular}", "--reader.anemoi", "{members: [12]}"],
        ["cannot be opened", "out of range"],
    ),
]


@pytest.mark.parametrize("row", BAD, ids=[row[0] for row in BAD])
def test_bad_settings_are_one_line_and_harmless(
    row: tuple, made: dict[str, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys
) -> None:
    _, args, says = row
    monkeypatch.chdir(tmp_path)
    (tmp_path / "notes.txt").write_text("the user's own file\n")
    roots = (tmp_path, made["regular"])
    before = _hashes(*roots)
    if "--analysis" not in args:  # member 0 as the analysis: a setting that works
        args = [*args, "--analysis", "{regular}", "--analysis_reader.anemoi", "{members: [0]}"]
    args = [a.replace("{regular}", str(made["regular"])) for a in args]
    status = main(["evaluate", *args, "--leads", "0h", "--out_dir", str(tmp_path / "eval")])
    lines = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert status == 1 and len(lines) == 1, lines
    assert lines[0].startswith("ensml: ") and "Traceback" not in lines[0]
    for text in says:
        assert text in lines[0], (text, lines[0])
    assert _hashes(*roots) == before


def test_open_errors_name_the_dataset(made: dict[str, Path]) -> None:
    with pytest.raises(EnsmlError, match=r"forecast anemoi dataset .*era5-eda.zarr has no ensemble"):
        open_forecast(made["regular"], reader={"anemoi": {"members": [0]}})


def test_variables_that_do_not_fit_ensml_are_named(made: dict[str, Path]) -> None:
    mixed = {"select": ["t_500", "t_850", "z_500"]}
    with pytest.raises(
        EnsmlError, match=r"do not share one set of levels \(t on 850, 500 hPa, z on 500 hPa\)"
    ):
        open_forecast(made["regular"], reader={"anemoi": mixed})
    both = {"rename": {"cell_area": "t"}}  # a surface t beside t_850 and t_500
    with pytest.raises(EnsmlError, match=r"'t' is both on pressure levels and at the surface.*drop: \[t\]"):
        open_forecast(made["cells"], reader={"anemoi": both})


@pytest.mark.timeout(600)
def test_fit_trains_on_an_anemoi_dataset_as_on_its_grib(
    made: dict[str, Path], real_data: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The smoke fit on the anemoi dataset (member 0 as the analysis) ends with the weights of the
    same fit on the GRIB file (member 0 by a GRIB filter): the same data, read two ways. The
    normalisation statistics are float32 sums over other chunks (a date each vs the file), so
    they differ in the last bit (2e-3 in a z mean of 3e4), which training carries into the
    weights (at most 2e-3 here, where a fit on other data differs by tenths)."""
    import torch

    grib = str(real_data / anemoi_build.GRIB)
    common = ["--data.input_leads", "[0]", "--data.target_leads", "[0]", "--data.batch_size", "1"]
    common += ["--data.train_period", "[2017-01-01T00, 2017-01-01T12]"]
    common += ["--data.val_period", "[2017-01-02T00, 2017-01-02T00]"]
    common += ["--data.test_period", "[2017-01-02T12, 2017-01-02T12]"]
    runs = {
        "anemoi": [str(made["regular"]), "{anemoi: {members: [0]}}"],
        "grib": [grib, "{filter_by_keys: {number: 0}}"],
    }
    weights = {}
    for name, (path, analysis_reader) in runs.items():
        (tmp_path / name).mkdir()
        monkeypatch.chdir(tmp_path / name)
        args = ["fit", "--config", str(anemoi_build.SMOKE), "--data.forecast", path, "--data.analysis", path]
        assert main([*args, "--data.analysis_reader", analysis_reader, *common]) == 0
        ckpt = torch.load("runs/smoke/checkpoints/last.ckpt", weights_only=False)
        weights[name] = ckpt["state_dict"]
    assert weights["anemoi"].keys() == weights["grib"].keys()
    for key, value in weights["anemoi"].items():
        torch.testing.assert_close(value, weights["grib"][key], rtol=1e-3, atol=5e-3, msg=key)
