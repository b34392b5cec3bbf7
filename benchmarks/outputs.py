"""The cost of safe outputs: writing through an OutputFolder against plain writes, in one run.

Two workloads, each timed ``--repeats`` times in interleaved rounds (so a burst of load hits
every variant alike), one line per comparison with the min and median and the ratio of the
medians:

- 200 small files (1 KiB): ``OutputFolder`` committing all at the end (evaluate, report),
  each file at once, and each at once after reserving them all (postprocess), against
  ``Path.write_bytes`` alone and with an fsync per file (what durability costs by itself).
- One 100 MB netCDF (float32, uncompressed so the disk, not zlib, is timed): ``write_netcdf``
  through the folder against ``Dataset.to_netcdf`` alone and followed by an fsync.

Every variant replaces the previous round's files, as a rerun of a command does. The folder's
price is the fsync of every file and folder (a rename that reaches the disk before the data
would leave an empty file after a power cut), the ledger's appends and the renames.

Usage: ``python benchmarks/outputs.py [--quick] [--repeats N] [--dir DIR]`` (``DIR``: where to
write, default the system's temporary folder; pick the disk you care about). Run by hand on a
quiet machine; tests never time.
"""

from __future__ import annotations

import argparse
import os
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path

import numpy as np
import xarray as xr
from crps import timings  # the interleaved rounds of every benchmark here (this folder is on sys.path)

from ensml.data.outputs import OutputFolder

SMALL = 1024  # bytes per small file


def line(what: str, ours: str, ref: str, t: dict[str, tuple[float, float]]) -> str:
    (a_min, a_med), (b_min, b_med) = t[ours], t[ref]
    return (
        f"{what}: {ours} min {a_min:.4f} / median {a_med:.4f} s, {ref} min {b_min:.4f} / median "
        f"{b_med:.4f} s -> {a_med / b_med:.2f}x"
    )


def small_files(root: Path, n: int) -> dict[str, Callable[[], object]]:
    """Variants writing ``n`` files of :data:`SMALL` bytes."""
    data = [os.urandom(SMALL) for _ in range(n)]
    plain, synced = root / "plain", root / "plain_fsync"
    plain.mkdir()
    synced.mkdir()

    def write_plain() -> None:
        for i, d in enumerate(data):
            (plain / f"f{i:03d}.txt").write_bytes(d)

    def write_synced() -> None:
        for i, d in enumerate(data):
            with open(synced / f"f{i:03d}.txt", "wb") as f:
                f.write(d)
                f.flush()
                os.fsync(f.fileno())

    names = [f"f{i:03d}.txt" for i in range(n)]

    def through(out: Path, whole: bool, reserve: bool = False) -> Callable[[], None]:
        def write() -> None:
            with OutputFolder.open(out, "evaluate" if whole else "postprocess", whole=whole) as folder:
                if reserve:  # as postprocess does before it submits the work: one fsync for all
                    folder.reserve(names)
                for name, d in zip(names, data):
                    folder.write_bytes(name, d)

        return write

    return {
        "ensml whole": through(root / "whole", True),
        "ensml each": through(root / "each", False),
        "ensml each reserved": through(root / "each_reserved", False, reserve=True),
        "plain write_bytes": write_plain,
        "plain write_bytes+fsync": write_synced,
    }


def big_netcdf(root: Path, megabytes: int) -> dict[str, Callable[[], object]]:
    """Variants writing one netCDF file of about ``megabytes`` MB."""
    n = megabytes * 1_000_000 // 4
    rows = 1000
    ds = xr.Dataset({"z": (("y", "x"), np.random.default_rng(0).random((rows, n // rows), dtype=np.float32))})
    enc = {"z": {"zlib": False}}
    plain = root / "plain.nc"

    def write_plain() -> None:
        ds.to_netcdf(plain, engine="netcdf4", encoding=enc)

    def write_synced() -> None:
        write_plain()
        fd = os.open(plain, os.O_RDONLY)
        os.fsync(fd)
        os.close(fd)

    def write_ours() -> None:
        with OutputFolder.open(root / "ours", "evaluate") as folder:
            folder.write_netcdf(ds, "big.nc", enc)

    return {
        "ensml write_netcdf": write_ours,
        "plain to_netcdf": write_plain,
        "plain to_netcdf+fsync": write_synced,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer files, a smaller file, 2 repeats")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--dir", default=tempfile.gettempdir(), help="where to write")
    args = parser.parse_args()
    repeats = 2 if args.quick else args.repeats
    n, mb = (50, 20) if args.quick else (200, 100)
    root = Path(tempfile.mkdtemp(prefix="ensml-bench-outputs-", dir=args.dir))
    try:
        (root / "small").mkdir()
        t = timings(small_files(root / "small", n), repeats)
        what = f"commit {n} x {SMALL // 1024} KiB files"
        for ours in ("ensml whole", "ensml each", "ensml each reserved"):
            for ref in ("plain write_bytes", "plain write_bytes+fsync"):
                print(line(what, ours, ref, t), flush=True)
        (root / "big").mkdir()
        t = timings(big_netcdf(root / "big", mb), repeats)
        for ref in ("plain to_netcdf", "plain to_netcdf+fsync"):
            print(line(f"one {mb} MB netCDF", "ensml write_netcdf", ref, t), flush=True)
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
