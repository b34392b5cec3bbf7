"""``ensml data synth --format zarr`` (v2 and v3) and the missing-chunk check of zarr stores."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pytest
import xarray as xr

from ensml.data.layouts.zarr import check_chunks
from ensml.data.open import open_analysis, open_dataset, open_forecast
from ensml.data.synth.generate import synth
from ensml.errors import EnsmlError

KW = dict(n_lat=8, n_lon=16, start="2017-01-01", end="2017-01-15", every_days=2, seed=2, surface=True)


@pytest.fixture(scope="module")
def netcdf(tmp_path_factory) -> dict[str, Path]:
    return synth(tmp_path_factory.mktemp("nc"), **KW)


@pytest.mark.slow
@pytest.mark.parametrize("zarr_format", [2, 3])
def test_zarr_stores_hold_what_the_netcdf_files_hold(netcdf, tmp_path, zarr_format) -> None:
    stores = synth(tmp_path, format="zarr", zarr_format=zarr_format, **KW)
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        ".ensml",
        "analysis.zarr",
        "forecast.zarr",
        "oracle.zarr",
    ]
    marker = ".zarray" if zarr_format == 2 else "zarr.json"
    assert (stores["forecast"] / "z" / marker).is_file()
    fz, fn = open_forecast(stores["forecast"]).load(), open_forecast(netcdf["forecast"]).load()
    xr.testing.assert_equal(fz, fn)
    assert fz.attrs.keys() == fn.attrs.keys() and fz["t2m"].attrs == fn["t2m"].attrs
    for key in fn.attrs.keys() - {"history"}:
        np.testing.assert_array_equal(fz.attrs[key], fn.attrs[key])
    xr.testing.assert_equal(
        open_analysis(stores["analysis"]).load(), open_analysis(netcdf["analysis"]).load()
    )
    orc_z, orc_n = open_dataset(stores["oracle"], "oracle"), open_dataset(netcdf["oracle"], "oracle")
    np.testing.assert_array_equal(orc_z["t2m_std"].values, orc_n["t2m_std"].values)
    # A forecast chunk is one member's field at one init and lead (all levels, the whole grid).
    with xr.open_zarr(stores["forecast"], consolidated=zarr_format == 2) as ds:
        assert ds["z"].encoding["chunks"] == (1, 1, 1, 2, 8, 16)
        assert ds["t2m"].encoding["chunks"] == (1, 1, 1, 8, 16)
        # zarr v3 stores one init time's chunks in one shard (one file, read in part)
        assert ds["z"].encoding.get("shards") == (None if zarr_format == 2 else (1, 3, 10, 2, 8, 16))
        assert ds.attrs["Conventions"].startswith("CF")


@pytest.mark.slow
@pytest.mark.parametrize("zarr_format", [2, 3])
def test_a_missing_chunk_is_refused_naming_store_variable_and_key(tmp_path, zarr_format) -> None:
    stores = synth(tmp_path, format="zarr", zarr_format=zarr_format, **KW)
    check_chunks(stores["forecast"])  # complete
    # v2: a chunk per member field (8 inits x 3 leads x 10 members); v3: a shard per init time
    key, total = ("3.0.0.0.0.0", 240) if zarr_format == 2 else ("c/3/0/0/0/0/0", 8)
    chunk = stores["forecast"] / "t" / key
    assert chunk.is_file()
    chunk.unlink()
    message = rf"^zarr store .*forecast\.zarr: variable 't' is missing 1 of its {total} chunks, e\.g\. '{key}"
    with pytest.raises(EnsmlError, match=message):
        open_forecast(stores["forecast"], ["z", "t"])


def test_check_chunks_ignores_integer_masks_with_omitted_fill_chunks(tmp_path) -> None:
    ds = xr.Dataset({"mask": (("x",), np.zeros(8, dtype="uint8")), "v": (("x",), np.arange(8.0))})
    ds.to_zarr(tmp_path / "s.zarr", encoding={"mask": {"chunks": (2,)}, "v": {"chunks": (4,)}}, zarr_format=3)
    check_chunks(tmp_path / "s.zarr")  # zarr skipped the all-zero mask chunks: not damage
    shutil.rmtree(tmp_path / "s.zarr" / "v" / "c")
    with pytest.raises(EnsmlError, match=r"variable 'v' is missing 2 of its 2 chunks"):
        check_chunks(tmp_path / "s.zarr")


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"format": "grib"}, r"^synth format must be netcdf or zarr, got 'grib'$"),
        ({"format": "zarr", "zarr_format": 4}, r"^synth zarr_format must be 2 or 3, got 4$"),
    ],
)
def test_impossible_format_options(tmp_path, options, message) -> None:
    with pytest.raises(EnsmlError, match=message):
        synth(tmp_path / "out", **KW, **options)
    assert not (tmp_path / "out").exists()


@pytest.mark.slow
def test_existing_stores_are_kept_unless_overwrite(tmp_path) -> None:
    synth(tmp_path, format="zarr", **KW)
    with pytest.raises(
        EnsmlError, match=r"already holds analysis\.zarr, forecast\.zarr, oracle\.zarr of an earlier synth"
    ):
        synth(tmp_path, format="zarr", **KW)
    synth(tmp_path, format="zarr", overwrite=True, **{**KW, "seed": 5})
    assert open_forecast(tmp_path / "forecast.zarr").attrs["synth_seed"] == 5
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == [".ensml"]  # the ledger
    assert list((tmp_path / ".ensml" / "staging").iterdir()) == []  # no staging left


def test_cli_writes_zarr(tmp_path) -> None:
    from ensml.cli.main import main

    args = [
        "data",
        "synth",
        f"--out_dir={tmp_path}",
        "--format=zarr",
        "--zarr_format=2",
        "--n_lat=4",
        "--n_lon=8",
    ]
    assert main([*args, "--start=2017-01-01", "--end=2017-01-05"]) == 0
    assert (tmp_path / "forecast.zarr" / ".zgroup").is_file()
