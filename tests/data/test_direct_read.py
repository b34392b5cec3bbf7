"""Chunks read directly (ensml.data.direct_read): the values HDF5 and zarr themselves read.

References: h5py's own reads of the same dataset (HDF5's filter pipeline) for the chunk decoding,
and xarray's reads through netCDF-C and zarr (``SampleReader`` with the direct reads turned off)
for whole samples, compared bit for bit (zarr v3 sharded and not; v2 stays with zarr), on
chunkings that do and do not line up with a sample, files whose latitudes run south to north
or longitudes from -180, slabs and several leads. What is not read directly (a packed variable,
a unit converted on open, netCDF-3, renames, several files) goes through xarray as before, and
a chunk never written or holding the fill value gives ensml's usual one-line error.
"""

from __future__ import annotations

import copy
import gc
import os
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import h5py
import netCDF4
import numpy as np
import pytest
import xarray as xr
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ensml.data.direct_netcdf import NetcdfChunks, unshuffle
from ensml.data.direct_read import by_chunk, index_slice
from ensml.data.direct_zarr import ZarrChunks
from ensml.data.sample_read import SampleReader, SampleSpec
from ensml.data.synth.generate import synth
from ensml.errors import EnsmlError

SPEC = SampleSpec(("z", "t"), (500.0, 850.0), (0, 24, 48), (24, 48), 5, 10)
KW = dict(n_lat=9, n_lon=16, start="2017-01-01", end="2017-01-13", every_days=2, seed=5)
pytestmark = pytest.mark.timeout(120)


@pytest.fixture(scope="module")
def files(tmp_path_factory) -> dict[str, Path]:
    return synth(tmp_path_factory.mktemp("direct"), **KW)


def inits(path: Path) -> np.ndarray:
    with xr.open_dataset(path) as fc:
        return fc["init_time"].values[:-1]  # the last one's 48 h analysis is past the data


def reader(forecast, analysis, **kw) -> SampleReader:
    first = forecast[0] if isinstance(forecast, list) else forecast
    return SampleReader(forecast, analysis, inits(Path(first)), SPEC, **kw)


def through_xarray(r: SampleReader) -> SampleReader:
    """The same reader with the direct reads off: every read through xarray and netCDF-C."""
    slow = copy.copy(r)
    slow._direct = (None, None)
    return slow


def assert_same_bits(a: dict[str, np.ndarray], b: dict[str, np.ndarray]) -> None:
    assert a.keys() == b.keys()
    for key in a:
        assert a[key].dtype == b[key].dtype and a[key].shape == b[key].shape, key
        assert np.array_equal(a[key].view(np.uint8), b[key].view(np.uint8)), key


def assert_one_bad_sample(forecast, analysis, bad: int, names: str) -> None:
    """The forecast reads directly, sample 1 as xarray reads it, and sample ``bad`` (NaN or the
    fill value in ``names``) is ensml's one-line error."""
    r = reader(forecast, analysis)
    r.open()
    assert r._direct[0].variables == ("z", "t")
    assert_same_bits(r.read(1), through_xarray(r).read(1))
    with pytest.raises(EnsmlError, match=f"has NaN or infinite values in {names} at"):
        r.read(bad)


def rewrite(
    src: Path, dst: Path, chunks: dict[str, int] | None = None, flip: bool = False, west: bool = False, **enc
) -> Path:
    """``src`` written again with other chunks, latitudes south to north, longitudes from -180
    (``west``) or other encodings."""
    with xr.open_dataset(src) as ds:
        ds = ds.load()
    if flip:
        ds = ds.isel(latitude=slice(None, None, -1))
    if west:
        ds = ds.assign_coords(longitude=(ds["longitude"] + 180.0) % 360.0 - 180.0).sortby("longitude")
    encoding = {}
    for v in ("z", "t"):
        dims = ds[v].dims
        e = {"zlib": True, "complevel": 1, "shuffle": True, **enc}
        if chunks is not None:
            e["chunksizes"] = tuple(min(chunks.get(d, n), n) for d, n in zip(dims, ds[v].shape))
        encoding[v] = e
    ds.to_netcdf(dst, encoding=encoding)
    return dst


# -- the pieces ---------------------------------------------------------------------------------
@given(st.binary(min_size=0, max_size=200), st.sampled_from([1, 2, 4, 8]))
def test_unshuffle_undoes_hdf5s_shuffle(data: bytes, itemsize: int) -> None:
    n = len(data) // itemsize
    body = np.frombuffer(data[: n * itemsize], np.uint8).reshape(n, itemsize)
    shuffled = body.T.tobytes() + data[n * itemsize :]  # byte i of every element in block i
    assert unshuffle(shuffled, itemsize).tobytes() == data


@given(st.lists(st.integers(0, 40), min_size=1, max_size=12), st.integers(1, 7))
def test_by_chunk_puts_every_position_once_in_its_chunk(positions: list[int], size: int) -> None:
    pos = np.array(positions)
    out = np.full(pos.size, -1)
    for origin, into, take in by_chunk(pos, size):
        where = np.arange(pos.size)[into]
        assert (out[where] == -1).all()
        out[where] = origin + np.arange(size)[take]
    assert np.array_equal(out, pos)


def test_index_slice_keeps_steps_and_arrays() -> None:
    assert index_slice(np.array([3])) == slice(3, 4, 1)
    assert index_slice(np.array([2, 4, 6])) == slice(2, 8, 2)
    assert index_slice(np.array([2, 1, 0])) == slice(2, None, -1)
    assert isinstance(index_slice(np.array([0, 1, 3])), np.ndarray)


# -- chunks against HDF5's own reads ---------------------------------------------------------------
@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    chunks=st.tuples(st.integers(1, 3), st.integers(1, 4), st.integers(1, 5), st.integers(1, 9)),
    shuffle=st.booleans(),
    dtype=st.sampled_from(["f4", "f8"]),
    endian=st.sampled_from(["little", "big"]),
    level=st.integers(0, 9),
)
def test_chunks_decode_as_hdf5_reads_them(tmp_path: Path, chunks, shuffle, dtype, endian, level) -> None:
    rng = np.random.default_rng(sum(chunks))
    order = ">" if endian == "big" else "<"
    values = rng.normal(size=(3, 4, 5, 9)).astype(np.dtype(dtype).newbyteorder(order))
    path = tmp_path / f"h{'_'.join(map(str, chunks))}{int(shuffle)}{dtype}{endian}{level}.nc"
    dims = ("init_time", "member", "latitude", "longitude")
    with netCDF4.Dataset(path, "w") as nc:  # netCDF4 writes big-endian variables, xarray does not
        for dim, n in zip(dims, values.shape):
            nc.createDimension(dim, n)
            nc.createVariable(dim, "i4", (dim,))[:] = np.arange(n)
        z = nc.createVariable(
            "z",
            values.dtype,
            dims,
            zlib=level > 0,
            complevel=max(level, 1),
            shuffle=shuffle,
            chunksizes=chunks,
            endian=endian,
        )
        z[:] = values
    with xr.open_dataset(path) as opened:
        direct = NetcdfChunks(path, opened, ["z"])
        at = {"init_time": 1, "member": slice(1, 4), "latitude": np.array([4, 0, 2])}
        got = direct.read("z", at, ("latitude", "member", "longitude"))
        direct.close()
    with h5py.File(path, "r") as f:
        assert f["z"].dtype.byteorder == (">" if endian == "big" else "<")
        expected = f["z"][1, 1:4][:, [4, 0, 2]].transpose(1, 0, 2)
    assert got is not None and got.dtype == expected.dtype
    assert np.array_equal(got, expected)


# -- whole samples against xarray -----------------------------------------------------------------------
def test_synth_files_read_directly_and_as_xarray_reads_them(files) -> None:
    r = reader(files["forecast"], files["analysis"])
    r.open()
    assert all(d is not None and d.variables == ("z", "t") for d in r._direct)
    assert r.threads_decompress()
    slow = through_xarray(r)
    for i in range(len(r.init_times)):
        assert_same_bits(r.staged(i), slow.staged(i))


@pytest.mark.parametrize(
    "chunks, flip, west",
    [
        (
            {"init_time": 2, "lead_time": 2, "member": 3, "level": 1, "latitude": 4, "longitude": 5},
            False,
            False,
        ),
        ({"init_time": 1, "lead_time": 3, "member": 10, "latitude": 9, "longitude": 16}, True, False),
        ({"init_time": 1, "lead_time": 1, "member": 1, "latitude": 9, "longitude": 6}, False, True),
    ],
    ids=["chunks across samples and fields", "latitudes south to north", "longitudes from -180"],
)
@pytest.mark.parametrize("sampling", ["first", "random"])
def test_other_chunkings_and_orders_read_the_same_bits(files, tmp_path, chunks, flip, west, sampling) -> None:
    fc = rewrite(files["forecast"], tmp_path / "fc.nc", chunks, flip, west)
    an = rewrite(files["analysis"], tmp_path / "an.nc", {"time": 3, "latitude": 2}, flip, west)
    r = reader(fc, an, member_sampling=sampling, slab=(slice(1, 8), slice(3, 14)))
    r.open()
    assert all(d is not None and d.variables == ("z", "t") for d in r._direct)
    slow = through_xarray(r)
    for i in (0, 3, len(r.init_times) - 1):
        assert_same_bits(r.read(i), slow.read(i))


def test_what_does_not_read_directly_goes_through_xarray(files, tmp_path) -> None:
    # t packed in int16 (scale_factor, add_offset); netCDF-3; renames; several files
    with xr.open_dataset(files["forecast"]) as ds:
        ds = ds.load()
    ds["t"].encoding.update(dtype="int16", scale_factor=0.01, add_offset=250.0, _FillValue=-32767)
    ds.to_netcdf(tmp_path / "packed.nc")
    r = reader(tmp_path / "packed.nc", files["analysis"])
    r.open()
    assert r._direct[0].variables == ("z",) and not r.threads_decompress()
    assert_same_bits(r.read(1), through_xarray(r).read(1))

    with xr.open_dataset(files["forecast"]) as ds:
        ds.load().to_netcdf(tmp_path / "classic.nc", format="NETCDF3_64BIT")
    classic = reader(tmp_path / "classic.nc", files["analysis"])
    classic.open()
    assert classic._direct[0] is None and not classic.threads_decompress()

    with xr.open_dataset(files["forecast"]) as ds:
        ds.load().rename({"z": "geopotential"}).to_netcdf(tmp_path / "named.nc")
    renamed = reader(tmp_path / "named.nc", files["analysis"], reader={"rename": {"geopotential": "z"}})
    renamed.open()
    assert renamed._direct[0] is None and renamed._direct[1] is not None
    assert_same_bits(renamed.read(1), through_xarray(renamed).read(1))

    with xr.open_dataset(files["forecast"]) as ds:  # the init times split into two files
        ds.load().isel(init_time=slice(0, 3)).to_netcdf(tmp_path / "part1.nc")
        ds.load().isel(init_time=slice(3, None)).to_netcdf(tmp_path / "part2.nc")
    several = reader([tmp_path / "part1.nc", tmp_path / "part2.nc"], files["analysis"])
    several.open()
    assert several._direct[0] is None


def test_a_unit_converted_on_open_is_read_through_xarray(tmp_path) -> None:
    """Precipitation in metres becomes kg m-2 on open (x 1000): the check at open sees it."""
    dims = ("time", "latitude", "longitude")
    tp = np.abs(np.random.default_rng(0).normal(size=(4, 3, 5))).astype("f4") / 1000
    ds = xr.Dataset(
        {"tp": (dims, tp, {"units": "m"}), "t": (dims, tp + 250)},
        coords={
            "time": np.arange("2017-01-01", "2017-01-05", dtype="datetime64[D]").astype("datetime64[ns]"),
            "latitude": [10.0, 0.0, -10.0],
            "longitude": np.arange(5.0),
        },
    )
    ds.to_netcdf(
        tmp_path / "an.nc", encoding={v: {"zlib": True, "chunksizes": (1, 3, 5)} for v in ("tp", "t")}
    )
    from ensml.data.open import open_analysis

    opened = open_analysis(tmp_path / "an.nc", ["tp", "t"])
    direct = NetcdfChunks(tmp_path / "an.nc", opened, ["tp", "t"])
    assert direct.variables == ("t",)
    direct.close()


def test_a_chunk_never_written_or_the_fill_value_is_ensmls_one_line_error(files, tmp_path) -> None:
    fc = rewrite(files["forecast"], tmp_path / "fc.nc", _FillValue=np.float32(-999.0))
    with netCDF4.Dataset(fc, "a") as nc:  # one member field holds the fill value
        nc["z"][2, 1, 0] = np.full(nc["z"].shape[3:], -999.0, "f4")
    assert_one_bad_sample(fc, files["analysis"], 2, "z")

    # chunks never written: the variables hold NaN there, their fill value
    with xr.open_dataset(files["forecast"]) as ds:
        ds = ds.load()
    holes = tmp_path / "holes.nc"
    ds.drop_vars(["z", "t"]).to_netcdf(holes)
    with netCDF4.Dataset(holes, "a") as nc:
        for name in ("z", "t"):
            chunks = (1, 1, 1, *ds[name].shape[3:])
            out = nc.createVariable(
                name, "f4", ds[name].dims, zlib=True, chunksizes=chunks, fill_value=np.nan
            )
            out[:2] = ds[name].values[:2]  # init times 0 and 1 only
    assert_one_bad_sample(holes, files["analysis"], 3, "z, t")


def test_reader_threads_read_the_same_bits_at_once(files) -> None:
    """Reads share no HDF5 call (h5py is not safe from several threads): many at once, same bits."""
    r = reader(files["forecast"], files["analysis"])
    r.open()
    slow = through_xarray(r)
    n = len(r.init_times)
    expected = [slow.staged(i) for i in range(n)]
    with ThreadPoolExecutor(4) as pool:
        got = list(pool.map(r.staged, [i % n for i in range(4 * n)]))
    for i, blocks in enumerate(got):
        assert_same_bits(blocks, expected[i % n])


def test_the_file_is_closed_once_the_reads_are_forgotten(files) -> None:
    with xr.open_dataset(files["analysis"]) as an:
        direct = NetcdfChunks(Path(files["analysis"]), an, ["z", "t"])
        fd = direct._fd
        os.fstat(fd)
        del direct
        gc.collect()
    with pytest.raises(OSError):
        os.fstat(fd)


# -- zarr ----------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def stores(tmp_path_factory) -> dict[str, dict[str, Path]]:
    """The synthetic stores, zarr v3 (sharded, one shard per init time) and v2."""
    root = tmp_path_factory.mktemp("zarr")
    return {f"v{v}": synth(root / f"v{v}", format="zarr", zarr_format=v, **KW) for v in (3, 2)}


@pytest.mark.filterwarnings("ignore:Failed to open Zarr store with consolidated metadata")
@pytest.mark.parametrize("sampling", ["first", "random"])
def test_zarr_v3_shards_read_directly_and_as_zarr_reads_them(stores, sampling) -> None:
    files = stores["v3"]
    r = reader(
        files["forecast"], files["analysis"], member_sampling=sampling, slab=(slice(2, 9), slice(0, 11))
    )
    r.open()
    assert all(isinstance(d, ZarrChunks) and d.variables == ("z", "t") for d in r._direct)
    slow = through_xarray(r)
    for i in range(len(r.init_times)):
        assert_same_bits(r.read(i), slow.read(i))


@pytest.mark.filterwarnings("ignore:Failed to open Zarr store with consolidated metadata")
def test_zarr_v3_unsharded_chunks_and_v2_stores(stores, tmp_path) -> None:
    with xr.open_zarr(stores["v3"]["forecast"]) as ds:
        ds = ds.load()
    chunks = {"init_time": 2, "lead_time": 1, "member": 3, "level": 2, "latitude": 4, "longitude": 16}
    for v in ("z", "t"):
        ds[v].encoding = {"chunks": tuple(chunks[d] for d in ds[v].dims)}
    ds.to_zarr(tmp_path / "plain.zarr", zarr_format=3)
    r = reader(tmp_path / "plain.zarr", stores["v3"]["analysis"])
    r.open()
    assert isinstance(r._direct[0], ZarrChunks) and r._direct[0].variables == ("z", "t")
    assert_same_bits(r.read(2), through_xarray(r).read(2))

    v2 = reader(stores["v2"]["forecast"], stores["v2"]["analysis"])
    v2.open()
    assert v2._direct == (None, None) and v2.threads_decompress()  # zarr's own reads


@pytest.mark.filterwarnings("ignore:Failed to open Zarr store with consolidated metadata")
def test_a_zarr_chunk_with_the_fill_value_or_missing_is_ensmls_one_line_error(stores, tmp_path) -> None:
    import shutil

    import zarr

    store = tmp_path / "fc.zarr"
    shutil.copytree(stores["v3"]["forecast"], store)
    zarr.open_array(store / "z", mode="r+")[2, 1, 0] = np.nan  # one member field: the fill value
    assert_one_bad_sample(store, stores["v3"]["analysis"], 2, "z")
