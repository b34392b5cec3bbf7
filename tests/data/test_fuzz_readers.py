"""Fuzzing the readers: truncated, bit-flipped and random-byte netCDF, GRIB and zarr inputs.

Built in a temporary folder from real small files (the tiny synthetic netCDF, the ERA5 EDA GRIB
of ../shared/data, a zarr store written from the synthetic data). Reading a damaged input
(:func:`ensml.data.open.load_dataset`: open, normalise, read every value) must either succeed, as a
bit flip inside stored values can, or raise :class:`EnsmlError` naming the file: never another
exception, a crash, or a hang (each read is bounded by an alarm).
"""

from __future__ import annotations

import os
import shutil
import signal
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
import xarray as xr
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ensml.data.open import load_dataset
from ensml.errors import EnsmlError

READ_LIMIT_S = 20
FUZZ = settings(
    max_examples=int(os.environ.get("FUZZ_EXAMPLES", 25)),
    deadline=None,
    derandomize=not os.environ.get("FUZZ_EXAMPLES"),
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)


@contextmanager
def time_limit(seconds: int) -> Iterator[None]:
    def hang(signum, frame):  # pragma: no cover - only on a hang
        raise TimeoutError(f"reading took more than {seconds} s")

    previous = signal.signal(signal.SIGALRM, hang)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)


def read_or_refuse(path: Path) -> None:
    """Read ``path`` whole; a refusal must be an EnsmlError that names the file."""
    with time_limit(READ_LIMIT_S):
        try:
            load_dataset(path, "forecast")
        except EnsmlError as exc:
            assert str(path) in str(exc), str(exc)
            assert "\n" not in str(exc), str(exc)


@pytest.fixture(scope="module")
def sources(tiny_data: dict[str, Path], real_data: Path, tmp_path_factory) -> dict[str, Path]:
    d = tmp_path_factory.mktemp("fuzz-sources")
    with xr.open_dataset(tiny_data["analysis"]) as an:
        small = an.isel(time=slice(0, 6)).load()
    small.to_netcdf(d / "small.nc")  # HDF5-based netCDF-4, zlib-compressed by xarray's defaults
    small.to_netcdf(d / "classic.nc", format="NETCDF3_64BIT")
    small.chunk({"time": 2}).to_zarr(d / "small.zarr", zarr_format=2, consolidated=False)
    shutil.copy(real_data / "cfgrib" / "forecast_monthly_ukmo.grib", d / "small.grib")
    for name in ("small.nc", "classic.nc", "small.grib"):
        read_or_refuse(d / name)  # the undamaged sources read
    load_dataset(d / "small.zarr", "forecast")
    return {
        "netcdf4": d / "small.nc",
        "netcdf3": d / "classic.nc",
        "grib": d / "small.grib",
        "zarr": d / "small.zarr",
    }


FILE_KINDS = ["netcdf4", "netcdf3", "grib"]
damage = st.one_of(
    st.tuples(st.just("truncate"), st.floats(0.0, 0.999)),
    st.tuples(st.just("flip"), st.floats(0.0, 0.999), st.integers(0, 7)),
    st.tuples(st.just("random"), st.binary(min_size=0, max_size=4096)),
)


def damaged(raw: bytes, how: tuple) -> bytes:
    if how[0] == "truncate":
        return raw[: int(len(raw) * how[1])]
    if how[0] == "flip":
        at = int(len(raw) * how[1])
        return raw[:at] + bytes([raw[at] ^ (1 << how[2])]) + raw[at + 1 :]
    return how[1]


@pytest.mark.slow
@pytest.mark.parametrize("kind", FILE_KINDS)
@FUZZ
@given(how=damage)
def test_damaged_file(kind: str, how: tuple, sources: dict[str, Path], tmp_path: Path) -> None:
    src = sources[kind]
    bad = tmp_path / f"damaged{src.suffix}"
    bad.write_bytes(damaged(src.read_bytes(), how))
    read_or_refuse(bad)


@FUZZ
@given(member=st.integers(0, 10_000), how=damage)
def test_damaged_zarr_store(member: int, how: tuple, sources: dict[str, Path], tmp_path: Path) -> None:
    store = tmp_path / "damaged.zarr"
    shutil.rmtree(store, ignore_errors=True)
    shutil.copytree(sources["zarr"], store)
    files = sorted(p for p in store.rglob("*") if p.is_file())
    target = files[member % len(files)]  # a metadata file or a chunk
    target.write_bytes(damaged(target.read_bytes(), how))
    read_or_refuse(store)
