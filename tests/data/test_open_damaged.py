"""The one reader on paths that are not files and zarr stores damaged behind readable metadata.

The CLI rows are in ``tests/cli/test_bad_files_table.py``; these check the library calls (every
zarr version and consolidation, lazy and chunked reads) and an output folder left by a failure.
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest
import xarray as xr

from ensml.data.open import expand_paths, open_forecast
from ensml.data.outputs import OutputFolder
from ensml.errors import EnsmlError


def _forecast() -> xr.Dataset:
    rng = np.random.default_rng(0)
    shape = (4, 2, 3, 5, 6)
    return xr.Dataset(
        {
            v: (("init_time", "lead_time", "member", "latitude", "longitude"), rng.random(shape, "float32"))
            for v in "zt"
        },
        coords={
            "init_time": np.arange("2017-01-01", "2017-01-05", dtype="datetime64[D]").astype(
                "datetime64[ns]"
            ),
            "lead_time": np.array([0, 24], dtype="timedelta64[h]").astype("timedelta64[ns]"),
            "member": [0, 1, 2],
            "latitude": np.linspace(60, 20, 5),
            "longitude": np.linspace(0, 50, 6),
        },
    )


@pytest.mark.parametrize(("zarr_format", "consolidated"), [(2, True), (2, False), (3, True), (3, False)])
def test_a_lost_array_metadata_is_named(tmp_path: Path, zarr_format: int, consolidated: bool) -> None:
    store = tmp_path / "fc.zarr"
    _forecast().chunk({"init_time": 1}).to_zarr(store, zarr_format=zarr_format, consolidated=consolidated)
    (store / "t" / (".zarray" if zarr_format == 2 else "zarr.json")).unlink()
    with pytest.raises(
        EnsmlError, match=r"variable 't' has lost its metadata \(t/(\.zarray|zarr\.json) is missing"
    ):
        open_forecast(store)


@pytest.mark.parametrize("chunks", [None, {}])
def test_a_corrupt_chunk_is_one_error_naming_file_and_variable(tmp_path: Path, chunks: dict | None) -> None:
    store = tmp_path / "fc.zarr"
    _forecast().chunk({"init_time": 1}).to_zarr(store, zarr_format=3)
    chunk = next(p for p in sorted((store / "t").rglob("*")) if p.is_file() and p.name != "zarr.json")
    chunk.write_bytes(b"garbage " * 40)
    fc = open_forecast(store, chunks=chunks)  # metadata whole: opens
    fc["z"].load()  # the undamaged variable reads
    with pytest.raises(EnsmlError, match=r"forecast file .*fc\.zarr: variable 't' cannot be read"):
        fc["t"].load()


def test_paths_that_are_not_files_say_what_they_are(tmp_path: Path) -> None:
    os.mkfifo(tmp_path / "fifo.nc")
    (tmp_path / "a.nc").symlink_to("b.nc")
    (tmp_path / "b.nc").symlink_to("a.nc")
    (tmp_path / "broken.nc").symlink_to("nowhere.nc")
    for path, says in [
        (tmp_path / "fifo.nc", "is a FIFO"),
        (tmp_path / "a.nc", "symbolic-link loop"),
        (tmp_path / "broken.nc", "broken symbolic link"),
        ("/dev/null", "is a device"),
        (tmp_path / "none.nc", "does not exist"),
    ]:
        with pytest.raises(EnsmlError, match=says):
            expand_paths(path, "forecast")


def test_an_existing_name_with_glob_characters_is_that_file(tmp_path: Path) -> None:
    (tmp_path / "fc[1].nc").write_bytes(b"x")
    (tmp_path / "fc1.nc").write_bytes(b"x")
    assert expand_paths(tmp_path / "fc[1].nc", "forecast") == [tmp_path / "fc[1].nc"]
    assert expand_paths(tmp_path / "fc[0-9].nc", "forecast") == [tmp_path / "fc1.nc"]  # no such file: a glob


def test_a_run_failing_before_its_first_output_leaves_no_folder(tmp_path: Path) -> None:
    out = tmp_path / "new" / "out"
    with pytest.raises(EnsmlError, match="damaged"):
        with OutputFolder.open(out, "archive"):
            raise EnsmlError("input damaged")
    assert not (tmp_path / "new").exists()
    with OutputFolder.open(out, "archive") as folder:  # a run that wrote keeps its folder
        folder.write_text("a.txt", "a\n")
    assert (out / "a.txt").read_text() == "a\n"
