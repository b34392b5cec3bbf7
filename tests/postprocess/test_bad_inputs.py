"""Bad inputs: a bad file fails alone with a one-line reason; a bad option stops before any output."""

from __future__ import annotations

import shutil
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch
import xarray as xr

from ensml.cli.main import main
from ensml.postprocess.manifest import MANIFEST
from tests.postprocess.conftest import pp_args


def _edit(fn: Callable[[xr.Dataset], xr.Dataset]) -> Callable[[Path, Path], None]:
    def make(src: Path, dst: Path) -> None:
        with xr.open_dataset(src) as ds:
            fn(ds.load()).to_netcdf(dst)

    return make


def _nan(ds: xr.Dataset) -> xr.Dataset:
    ds["t"][0, 1, 3, 0, 4, 7] = np.nan
    return ds


def _duplicate_init(ds: xr.Dataset) -> xr.Dataset:
    return xr.concat([ds, ds], "init_time")


BAD_FILES = {
    "unreadable": (lambda src, dst: dst.write_bytes(b"CDF\x01 not really netCDF" * 50), "cannot be read"),
    "other grid": (_edit(lambda ds: ds.isel(latitude=slice(0, 8))), "another grid than the checkpoints"),
    "other variables": (_edit(lambda ds: ds.drop_vars("t")), "has no variable 't'"),
    "other levels": (_edit(lambda ds: ds.sel(level=[500.0])), "has no level(s) [850.0]"),
    "no 48 h lead": (_edit(lambda ds: ds.sel(lead_time=ds.lead_time[:2])), "has no lead time(s) 48 h"),
    "too few members": (_edit(lambda ds: ds.isel(member=slice(0, 3))), "k=5 members"),
    "NaN": (_edit(_nan), "NaN or infinite values in t"),
    "no analysis at init": (
        _edit(lambda ds: ds.assign_coords(init_time=ds.init_time + np.timedelta64(700, "D"))),
        "has no field at init 2019-",
    ),
    "duplicated init": (_edit(_duplicate_init), "repeated init_time"),
}


@pytest.mark.parametrize("case", list(BAD_FILES))
def test_a_bad_file_fails_alone(
    case, checkpoints, archive_dir: Path, tiny_data, tmp_path: Path, capsys
) -> None:
    folder = tmp_path / "in"
    folder.mkdir()
    good = sorted(archive_dir.glob("*.nc"))[:2]
    for p in good:
        shutil.copy2(p, folder / p.name)
    make, reason = BAD_FILES[case]
    bad = folder / "bad.nc"
    make(good[0], bad)
    out = tmp_path / "out"
    # exit status 2: the work ran and part of it failed (ensml.errors.EXIT_CODES)
    assert main(pp_args([checkpoints["mixed48"]], folder / "*.nc", out, analysis=tiny_data["analysis"])) == 2
    captured = capsys.readouterr()
    err = captured.err.strip().splitlines()
    assert err[-1] == f"ensml: 1 of 3 units failed (reasons above and in {out / MANIFEST})"
    assert [line.split(";")[0] for line in err[:-1]] == ["postprocess: 3/3 units (1 failed)"]  # progress
    assert reason in " ".join(captured.out.split())  # the summary table names the reason
    assert sorted(p.name for p in out.glob("*.nc")) == [p.name for p in good]
    assert not list(out.rglob("*.tmp"))
    records = pd.read_json(out / MANIFEST, lines=True).set_index("output")
    record = records.loc[str(out / "bad.nc")]
    assert record["status"] == "failed" and reason in record["reason"] and "\n" not in record["reason"]
    for p in good:
        xr.open_dataset(out / p.name).load()


def _corrupt(tmp: Path) -> str:
    path = tmp / "broken.ckpt"
    path.write_bytes(b"PK\x03\x04 not a checkpoint")
    return str(path)


def _not_a_task(tmp: Path) -> str:
    path = tmp / "other.ckpt"
    torch.save({"hyper_parameters": {"_class_path": "torch.nn.Linear"}, "state_dict": {}}, path)
    return str(path)


BAD_OPTIONS: dict[str, tuple[Callable[[dict, Path], list[str]], str]] = {
    "quantile out of range": (lambda c, t: ["--products.quantiles=[0.1, 1.5]"], "probabilities in (0, 1)"),
    "repeated quantile": (lambda c, t: ["--products.quantiles=[0.5, 0.5]"], "repeated levels"),
    "unknown threshold key": (lambda c, t: ["--products.thresholds={q700: [1.0]}"], "key 'q700' is neither"),
    "empty thresholds": (lambda c, t: ["--products.thresholds={t: []}"], "has no values"),
    "negative members": (lambda c, t: ["--products.members=-2"], "products.members must be"),
    "ecc members of a mixed run": (
        lambda c, t: ["--products.ecc_members=true"],
        "products.ecc_members orders a generative run's members",
    ),
    "ecc members of no members": (
        lambda c, t: [f"--checkpoints=[{c['generative48']}]", "--products={members: 0, ecc_members: true}"],
        "products.ecc_members needs members to order",
    ),
    "two checkpoints, one lead": (
        lambda c, t: [f"--checkpoints=[{c['mixed48']}, {c['mixed48']}]"],
        "both predict lead 48 h",
    ),
    "mixed and spread": (
        lambda c, t: [f"--checkpoints=[{c['mixed48']}, {c['spread48']}]"],
        "different tasks",
    ),
    "corrupt checkpoint": (lambda c, t: [f"--checkpoints=[{_corrupt(t)}]"], "cannot be read"),
    "missing checkpoint": (lambda c, t: [f"--checkpoints=[{t / 'nope.ckpt'}]"], "does not exist"),
    "not a task": (
        lambda c, t: [f"--checkpoints=[{_not_a_task(t)}]"],
        "not a checkpoint of an ensml task",
    ),
    "no forecast matches": (lambda c, t: [f"--forecasts={t}/none/*.nc"], "no forecast files match"),
    "analysis needed": (
        lambda c, t: ["--analysis=null"],
        "uses the analysis at initialisation: set analysis",
    ),
    "workers 0": (lambda c, t: ["--workers=0"], "option --workers: 0 is out of range (must be > 0)"),
    "threads 0": (lambda c, t: ["--threads_per_worker=0"], "--threads_per_worker: 0 is out of range"),
    "two schedulers": (lambda c, t: ["--scheduler_address=tcp://x:1", "--scheduler_file=s.json"], "not both"),
    "slurm and a scheduler": (
        lambda c, t: ["--cluster=slurm", "--scheduler_address=tcp://x:1"],
        "would start another",
    ),
    "cores < processes": (
        lambda c, t: ["--cluster=slurm", "--jobqueue.cores=2", "--jobqueue.processes=4"],
        "cores (2)",
    ),
}


@pytest.mark.parametrize("case", list(BAD_OPTIONS))
def test_a_bad_option_stops_before_any_output(
    case, checkpoints, archive_dir, tiny_data, tmp_path, capsys
) -> None:
    make, message = BAD_OPTIONS[case]
    out = tmp_path / "out"
    args = pp_args([checkpoints["mixed48"]], archive_dir / "*.nc", out, analysis=tiny_data["analysis"])
    assert main([*args, *make(checkpoints, tmp_path)]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("ensml: ") and message in err[0], err
    assert not out.exists()


def test_an_output_folder_that_is_a_file(checkpoints, archive_dir, tiny_data, tmp_path, capsys) -> None:
    out = tmp_path / "out"
    out.write_text("a file")
    assert (
        main(pp_args([checkpoints["mixed48"]], archive_dir / "*.nc", out, analysis=tiny_data["analysis"]))
        == 1
    )
    assert capsys.readouterr().err.strip() == f"ensml: postprocess: out_dir {out} is a file, not a folder"
    assert out.read_text() == "a file"
