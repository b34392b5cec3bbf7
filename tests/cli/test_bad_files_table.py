"""Bad input files across every verb (needs a trained checkpoint): one ``ensml:`` line, exit 1, nothing written.

Each row runs ``ensml ARGS`` in a fresh working folder (where every output goes) and checks the
message names what is wrong, the exit status, and that no file or folder appeared or changed.
The Reliability guide (``docs/guide/reliability.md``) lists these cases.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pytest
import xarray as xr

from ensml.cli.main import main
from tests.conftest import SMOKE, tiny_data_args

Inputs = dict[str, Path]


@dataclass(frozen=True)
class Case:
    """A bad command line: its arguments (built from the inputs), and what the line must say."""

    args: Callable[[Inputs], list[str]]
    says: tuple[str, ...]
    setup: Callable[[Path, pytest.MonkeyPatch], None] | None = field(default=None)


def _variant(src: Path, dst: Path, change: Callable[[xr.Dataset], xr.Dataset]) -> Path:
    with xr.open_dataset(src) as ds:
        change(ds.load()).to_netcdf(dst)
    return dst


def _poison(var: str, value: float) -> Callable[[xr.Dataset], xr.Dataset]:
    """Put ``value`` at one grid point of ``var``, at every time (so a used date is hit)."""

    def change(ds: xr.Dataset) -> xr.Dataset:
        ds[var].values[(slice(None),) + (0,) * (ds[var].ndim - 1)] = value
        return ds

    return change


def _no_init_times(ds: xr.Dataset) -> xr.Dataset:
    """The file with its init_time dimension empty (the source's chunk sizes dropped: none fits 0)."""
    empty = ds.isel(init_time=slice(0, 0))
    for var in empty.variables.values():
        var.encoding = {}
    return empty


def _on_cells(ds: xr.Dataset) -> xr.Dataset:
    """The grid's points as cells of an unstructured grid (1-D latitude, longitude on ``cell``)."""
    return ds.stack(cell=("latitude", "longitude")).reset_index("cell").transpose(..., "cell")


def _nan_latitude(ds: xr.Dataset) -> xr.Dataset:
    lat = ds.latitude.values.copy()
    lat[3] = np.nan
    return ds.assign_coords(latitude=lat)


def _zarr(src: Path, store: Path, damage: Callable[[Path], None]) -> Path:
    """``src`` written as a zarr store (one chunk per init time), then damaged by ``damage``."""
    with xr.open_dataset(src) as ds:
        whole = ds.load()  # every init: fit needs its splits
    for var in whole.variables.values():
        var.encoding = {}
    whole.chunk({"init_time": 1}).to_zarr(store, zarr_format=2, consolidated=True)
    damage(store)
    return store


def _garble_chunks(store: Path) -> None:
    """Overwrite every chunk of the data variables with bytes no codec decodes."""
    for var in ("z", "t"):
        for chunk in (store / var).iterdir():
            if not chunk.name.startswith("."):
                chunk.write_bytes(b"not a chunk " * 40)


def _lose_metadata(store: Path) -> None:
    (store / "t" / ".zarray").unlink()


@pytest.fixture(scope="module")
def inputs(tiny_data: Inputs, fitted: Path, tmp_path_factory: pytest.TempPathFactory) -> Inputs:
    """The tiny dataset, a trained checkpoint and its predictions, and broken variants of them."""
    d = tmp_path_factory.mktemp("bad-inputs")
    fc, an = tiny_data["forecast"], tiny_data["analysis"]
    raw = fc.read_bytes()
    (d / "empty.nc").write_bytes(b"")
    (d / "garbage.nc").write_bytes(b"not a netCDF file\n" * 200)
    (d / "truncated.nc").write_bytes(raw[: len(raw) // 3])
    ckpt = fitted / "runs/smoke/checkpoints/best.ckpt"
    (d / "truncated.ckpt").write_bytes(ckpt.read_bytes()[:5000])
    (d / "a-file").write_text("not a folder\n")
    (d / "bad.yaml").write_text("data: [\n  forecast: x\n")
    os.mkfifo(d / "fifo.nc")
    os.mkfifo(d / "pipe[1].nc")
    (d / "loop-a.nc").symlink_to("loop-b.nc")
    (d / "loop-b.nc").symlink_to("loop-a.nc")
    (d / "an[1].nc").write_bytes(an.read_bytes())  # an existing name that is also a glob
    shift = np.timedelta64(3650, "D")
    preds = fitted / "runs/smoke/predictions.nc"
    return {
        **tiny_data,
        "dir": d,
        "ckpt": ckpt,
        "predictions": preds,
        "no-member": _variant(fc, d / "no-member.nc", lambda ds: ds.isel(member=0, drop=True)),
        "extra-dim": _variant(fc, d / "extra-dim.nc", lambda ds: ds.expand_dims(run=[1])),
        "coarse-analysis": _variant(an, d / "coarse.nc", lambda ds: ds.isel(longitude=slice(0, None, 2))),
        "later-analysis": _variant(an, d / "later.nc", lambda ds: ds.assign_coords(time=ds.time + shift)),
        "nan-forecast": _variant(fc, d / "nan.nc", _poison("z", np.nan)),
        "inf-analysis": _variant(an, d / "inf.nc", _poison("t", np.inf)),
        "repeated-init": _variant(fc, d / "repeated.nc", lambda ds: ds.isel(init_time=[0, 1, 1, 2, 3])),
        "unsorted-init": _variant(fc, d / "unsorted.nc", lambda ds: ds.isel(init_time=[0, 2, 1, 3])),
        "no-init": _variant(fc, d / "no-init.nc", _no_init_times),
        "lead-0": _variant(fc, d / "lead-0.nc", lambda ds: ds.isel(lead_time=[0])),
        "cells": _variant(fc, d / "cells.nc", _on_cells),
        "cells-analysis": _variant(an, d / "cells-analysis.nc", _on_cells),
        "nan-predictions": _variant(preds, d / "nan-preds.nc", _poison("z_mean", np.nan)),
        "renamed-predictions": _variant(preds, d / "renamed-preds.nc", lambda ds: ds.rename(z_mean="zz")),
        "nan-latitude": _variant(an, d / "nan-lat.nc", _nan_latitude),
        "corrupt-zarr": _zarr(fc, d / "corrupt.zarr", _garble_chunks),
        "lost-zarr": _zarr(fc, d / "lost.zarr", _lose_metadata),
    }


def fit(i: Inputs, *extra: str, **overrides: object) -> list[str]:
    return ["fit", "--config", SMOKE, *tiny_data_args(i, **overrides), *extra]


def lightning(verb: str, i: Inputs, *extra: str, **overrides: object) -> list[str]:
    return [verb, "--config", SMOKE, *tiny_data_args(i, **overrides), *extra]


def evaluate(i: Inputs, *extra: str) -> list[str]:
    return ["evaluate", f"--forecast={i['forecast']}", f"--analysis={i['analysis']}", *extra]


def report(i: Inputs, *extra: str) -> list[str]:
    return ["report", f"--forecast={i['forecast']}", f"--analysis={i['analysis']}", *extra]


def _read_only(folder: str) -> Callable[[Path, pytest.MonkeyPatch], None]:
    """Make ``folder`` (in the working folder) read-only, also for root (os.access patched)."""

    def setup(work: Path, mp: pytest.MonkeyPatch) -> None:
        target = work / folder
        target.mkdir()
        target.chmod(0o555)
        access = os.access
        mp.setattr(os, "access", lambda p, mode: Path(p).resolve() != target.resolve() and access(p, mode))

    return setup


def _foreign_folder(work: Path, mp: pytest.MonkeyPatch) -> None:
    (work / "mine").mkdir()
    (work / "mine" / "thesis.tex").write_text("\\documentclass{article}\n")


CASES: dict[str, Case] = {
    # -- files that are missing, empty or corrupt -------------------------------------------------
    "fit: forecast missing": Case(
        lambda i: fit(i, **{"data.forecast": i["dir"] / "nope.nc"}), ("nope.nc", "does not exist")
    ),
    "fit: forecast empty": Case(
        lambda i: fit(i, **{"data.forecast": i["dir"] / "empty.nc"}), ("empty.nc", "is empty")
    ),
    "fit: forecast garbage": Case(
        lambda i: fit(i, **{"data.forecast": i["dir"] / "garbage.nc"}),
        ("garbage.nc", "is not a netCDF, HDF5, GRIB or zarr file"),
    ),
    "fit: forecast truncated": Case(
        lambda i: fit(i, **{"data.forecast": i["dir"] / "truncated.nc"}), ("truncated.nc", "cannot be read")
    ),
    "fit: forecast on cells of an unstructured grid": Case(
        lambda i: fit(i, **{"data.forecast": i["cells"], "data.analysis": i["cells-analysis"]}),
        ("cells.nc is on 512 cells", "regular latitude x longitude"),
    ),
    "fit: resume from a truncated checkpoint": Case(
        lambda i: fit(i, f"--ckpt_path={i['dir'] / 'truncated.ckpt'}"), ("truncated.ckpt", "cannot be read")
    ),
    "predict: checkpoint missing": Case(
        lambda i: lightning("predict", i, f"--ckpt_path={i['dir'] / 'no.ckpt'}"),
        ("no.ckpt", "does not exist"),
    ),
    "evaluate: predictions missing": Case(
        lambda i: evaluate(i, f"--predictions={i['dir'] / 'no.nc'}", "--out_dir=out"),
        ("no.nc", "does not exist"),
    ),
    "data archive: forecast missing": Case(
        lambda i: ["data", "archive", f"--forecast={i['dir'] / 'no.nc'}", "--out_dir=arch"],
        ("no.nc", "does not exist"),
    ),
    "data archive: forecast with no init times": Case(
        lambda i: ["data", "archive", f"--forecast={i['no-init']}", "--out_dir=arch"],
        ("no-init.nc", "holds no init_time"),
    ),
    "evaluate: forecast of lead 0 h alone, no --leads": Case(
        lambda i: ["evaluate", f"--forecast={i['lead-0']}", f"--analysis={i['analysis']}", "--out_dir=out"],
        ("no lead time but 0 h", "--leads 0h"),
    ),
    "evaluate: forecast with no init times": Case(
        lambda i: ["evaluate", f"--forecast={i['no-init']}", f"--analysis={i['analysis']}", "--out_dir=out"],
        ("no-init.nc", "holds no init_time"),
    ),
    "postprocess: checkpoint missing": Case(
        lambda i: [
            "postprocess",
            f"--checkpoints=[{i['dir'] / 'no.ckpt'}]",
            f"--forecasts={i['forecast']}",
            f"--analysis={i['analysis']}",
            "--out_dir=pp",
            "--cluster=none",
        ],
        ("no.ckpt",),
    ),
    "postprocess: no forecast files": Case(
        lambda i: [
            "postprocess",
            f"--checkpoints=[{i['ckpt']}]",
            f"--forecasts={i['dir'] / 'none-*.nc'}",
            f"--analysis={i['analysis']}",
            "--out_dir=pp",
            "--cluster=none",
        ],
        ("none-*.nc",),
    ),
    # -- paths that are not files, names that look like globs --------------------------------------------
    "evaluate: forecast is a FIFO": Case(
        lambda i: [
            "evaluate",
            f"--forecast={i['dir'] / 'fifo.nc'}",
            f"--analysis={i['analysis']}",
            "--out_dir=out",
        ],
        ("fifo.nc", "is a FIFO"),
    ),
    "evaluate: analysis is a symbolic-link loop": Case(
        lambda i: [
            "evaluate",
            f"--forecast={i['forecast']}",
            f"--analysis={i['dir'] / 'loop-a.nc'}",
            "--out_dir=out",
        ],
        ("loop-a.nc", "symbolic-link loop"),
    ),
    "evaluate: forecast is a device": Case(
        lambda i: ["evaluate", "--forecast=/dev/zero", f"--analysis={i['analysis']}", "--out_dir=out"],
        ("/dev/zero", "is a device"),
    ),
    "report: forecast is a FIFO": Case(
        lambda i: [
            "report",
            f"--forecast={i['dir'] / 'fifo.nc'}",
            f"--analysis={i['analysis']}",
            "--out_dir=rep",
        ],
        ("fifo.nc", "is a FIFO"),
    ),
    "data archive: forecast is a symbolic-link loop": Case(
        lambda i: ["data", "archive", f"--forecast={i['dir'] / 'loop-a.nc'}", "--out_dir=arch"],
        ("loop-a.nc", "symbolic-link loop"),
    ),
    "data archive: forecast is a device": Case(
        lambda i: ["data", "archive", "--forecast=/dev/zero", "--out_dir=arch"], ("/dev/zero", "is a device")
    ),
    "fit: forecast is a FIFO": Case(
        lambda i: fit(i, **{"data.forecast": i["dir"] / "fifo.nc"}), ("fifo.nc", "is a FIFO")
    ),
    "fit: analysis is a device": Case(
        lambda i: fit(i, **{"data.analysis": "/dev/zero"}), ("/dev/zero", "is a device")
    ),
    "postprocess: forecast is a FIFO": Case(
        lambda i: [
            "postprocess",
            f"--checkpoints=[{i['ckpt']}]",
            f"--forecasts={i['dir'] / 'fifo.nc'}",
            f"--analysis={i['analysis']}",
            "--out_dir=pp",
            "--cluster=none",
        ],
        ("fifo.nc", "is a FIFO"),
    ),
    "postprocess: forecast is a symbolic-link loop": Case(
        lambda i: [
            "postprocess",
            f"--checkpoints=[{i['ckpt']}]",
            f"--forecasts={i['dir'] / 'loop-a.nc'}",
            f"--analysis={i['analysis']}",
            "--out_dir=pp",
            "--cluster=none",
        ],
        ("loop-a.nc", "symbolic-link loop"),
    ),
    "evaluate: a file named an[1].nc is that file, not a glob": Case(
        lambda i: [
            "evaluate",
            f"--forecast={i['dir'] / 'an[1].nc'}",
            f"--analysis={i['analysis']}",
            "--out_dir=out",
        ],
        ("an[1].nc", "is an analysis"),
    ),
    "postprocess: a FIFO named pipe[1].nc is that FIFO, not a glob": Case(
        lambda i: [
            "postprocess",
            f"--checkpoints=[{i['ckpt']}]",
            f"--forecasts={i['dir'] / 'pipe[1].nc'}",
            f"--analysis={i['analysis']}",
            "--out_dir=pp",
            "--cluster=none",
        ],
        ("pipe[1].nc", "is a FIFO"),
    ),
    # -- a file of the wrong kind -------------------------------------------------------------------------
    "evaluate: analysis given as the forecast": Case(
        lambda i: ["evaluate", f"--forecast={i['analysis']}", f"--analysis={i['analysis']}", "--out_dir=out"],
        ("analysis.nc", "is an analysis", "lead_time"),
    ),
    "evaluate: forecast given as the analysis": Case(
        lambda i: ["evaluate", f"--forecast={i['forecast']}", f"--analysis={i['forecast']}", "--out_dir=out"],
        ("forecast.nc", "is a forecast"),
    ),
    "report: analysis given as the forecast": Case(
        lambda i: ["report", f"--forecast={i['analysis']}", f"--analysis={i['analysis']}", "--out_dir=rep"],
        ("analysis.nc", "is an analysis"),
    ),
    "data archive: analysis given as the forecast": Case(
        lambda i: ["data", "archive", f"--forecast={i['analysis']}", "--out_dir=arch"],
        ("analysis.nc", "is an analysis"),
    ),
    "fit: analysis given as the forecast": Case(
        lambda i: fit(i, **{"data.forecast": i["analysis"]}), ("analysis.nc", "is an analysis")
    ),
    "fit: forecast given as the analysis": Case(
        lambda i: fit(i, **{"data.analysis": i["forecast"]}), ("forecast.nc", "is a forecast")
    ),
    # -- zarr stores damaged behind readable metadata -----------------------------------------------------
    "evaluate: zarr chunks corrupt": Case(
        lambda i: [
            "evaluate",
            f"--forecast={i['corrupt-zarr']}",
            f"--analysis={i['analysis']}",
            "--out_dir=out",
        ],
        ("corrupt.zarr", "cannot be read", "variable"),
    ),
    "report: zarr chunks corrupt": Case(
        lambda i: [
            "report",
            f"--forecast={i['corrupt-zarr']}",
            f"--analysis={i['analysis']}",
            "--out_dir=rep",
        ],
        ("corrupt.zarr", "cannot be read", "variable"),
    ),
    "data archive: zarr chunks corrupt": Case(
        lambda i: ["data", "archive", f"--forecast={i['corrupt-zarr']}", "--out_dir=arch"],
        ("corrupt.zarr", "cannot be read", "variable"),
    ),
    "fit: zarr chunks corrupt": Case(
        lambda i: fit(i, **{"data.forecast": i["corrupt-zarr"]}),
        ("corrupt.zarr", "cannot be read", "variable"),
    ),
    "evaluate: zarr variable lost its metadata": Case(
        lambda i: [
            "evaluate",
            f"--forecast={i['lost-zarr']}",
            f"--analysis={i['analysis']}",
            "--out_dir=out",
        ],
        ("lost.zarr", "'t'", "lost its metadata"),
    ),
    "report: zarr variable lost its metadata": Case(
        lambda i: ["report", f"--forecast={i['lost-zarr']}", f"--analysis={i['analysis']}", "--out_dir=rep"],
        ("lost.zarr", "'t'", "lost its metadata"),
    ),
    "data archive: zarr variable lost its metadata": Case(
        lambda i: ["data", "archive", f"--forecast={i['lost-zarr']}", "--out_dir=arch"],
        ("lost.zarr", "'t'", "lost its metadata"),
    ),
    "fit: zarr variable lost its metadata": Case(
        lambda i: fit(i, **{"data.forecast": i["lost-zarr"]}), ("lost.zarr", "'t'", "lost its metadata")
    ),
    # -- wrong names and dims -----------------------------------------------------------------------
    "fit: variable missing": Case(lambda i: fit(i, **{"data.variables": "[z, q]"}), ("has no variable 'q'",)),
    "fit: member dimension missing": Case(
        lambda i: fit(i, **{"data.forecast": i["no-member"]}), ("no-member.nc", "has 1 members")
    ),  # one run: an ensemble of one
    "fit: extra dimension": Case(
        lambda i: fit(i, **{"data.forecast": i["extra-dim"]}), ("extra-dim.nc", "unexpected run")
    ),
    "fit: level missing": Case(lambda i: fit(i, **{"data.levels": "[500, 700]"}), ("700",)),
    "evaluate: predictions lack a variable": Case(
        lambda i: evaluate(i, f"--predictions={i['renamed-predictions']}", "--out_dir=out"),
        ("renamed-preds.nc", "z_mean"),
    ),
    # -- grids and dates that do not match ----------------------------------------------------------
    "fit: analysis on another grid": Case(
        lambda i: fit(i, **{"data.analysis": i["coarse-analysis"]}), ("different grids",)
    ),
    "fit: analysis with no common dates": Case(
        lambda i: fit(i, **{"data.analysis": i["later-analysis"]}), ("no dates in common",)
    ),
    "evaluate: NaN latitude in the analysis": Case(
        lambda i: [
            "evaluate",
            f"--forecast={i['forecast']}",
            f"--analysis={i['nan-latitude']}",
            "--out_dir=out",
        ],
        ("nan-lat.nc", "latitude", "NaN"),
    ),
    "fit: NaN latitude in the analysis": Case(
        lambda i: fit(i, **{"data.analysis": i["nan-latitude"]}), ("nan-lat.nc", "latitude", "NaN")
    ),
    "report: NaN latitude in the analysis": Case(
        lambda i: [
            "report",
            f"--forecast={i['forecast']}",
            f"--analysis={i['nan-latitude']}",
            "--out_dir=rep",
        ],
        ("nan-lat.nc", "latitude", "NaN"),
    ),
    "report: analysis with no common dates": Case(
        lambda i: [
            "report",
            f"--forecast={i['forecast']}",
            f"--analysis={i['later-analysis']}",
            "--out_dir=rep",
        ],
        ("later.nc",),
    ),
    "fit: periods overlap": Case(
        lambda i: fit(i, **{"data.val_period": "[2017-08-01, 2017-10-31]"}), ("overlaps",)
    ),
    # -- NaN / Inf ----------------------------------------------------------------------------------------
    "fit: NaN in the forecast": Case(
        lambda i: fit(i, **{"data.forecast": i["nan-forecast"]}), ("nan.nc", "NaN or infinite", "'z'")
    ),
    "fit: Inf in the analysis": Case(
        lambda i: fit(i, **{"data.analysis": i["inf-analysis"]}), ("inf.nc", "NaN or infinite", "'t'")
    ),
    "evaluate: NaN in the predictions": Case(
        lambda i: evaluate(i, f"--predictions={i['nan-predictions']}", "--out_dir=out"),
        ("nan-preds.nc", "NaN"),
    ),
    # -- times repeated or out of order ---------------------------------------------------------------
    "fit: repeated init time": Case(
        lambda i: fit(i, **{"data.forecast": i["repeated-init"]}), ("repeated.nc", "repeated init_time")
    ),
    "fit: init times out of order": Case(
        lambda i: fit(i, **{"data.forecast": i["unsorted-init"]}), ("unsorted.nc", "not in increasing order")
    ),
    "evaluate: init times out of order": Case(
        lambda i: [
            "evaluate",
            f"--forecast={i['unsorted-init']}",
            f"--analysis={i['analysis']}",
            "--out_dir=out",
        ],
        ("unsorted.nc", "not in increasing order"),
    ),
    # -- impossible K and options ---------------------------------------------------------------------
    "fit: k larger than the ensemble": Case(lambda i: fit(i, **{"data.k": 20}), ("k=20",)),
    "evaluate: k larger than the ensemble": Case(lambda i: evaluate(i, "--k=20", "--out_dir=out"), ("k=20",)),
    "fit: target lead not an input": Case(
        lambda i: fit(i, **{"data.target_leads": 72}), ("target_leads=72",)
    ),
    "fit: option of the wrong type": Case(
        lambda i: fit(i, **{"data.k": "five"}), ("option --data.k", "expected an integer", "'five'")
    ),
    "fit: unknown option": Case(lambda i: fit(i, "--data.kk=5"), ("unknown option --data.kk=5",)),
    "validate: value not among the choices": Case(
        lambda i: lightning("validate", i, **{"data.member_sampling": "all"}),
        ("--data.member_sampling", "'first', 'random'", "'all'"),
    ),
    "test: model class that does not exist": Case(
        lambda i: lightning("test", i, "--model=ensml.train.tasks.Nope"),
        ("--model", "ensml.train.tasks.Nope"),
    ),
    "fit: model argument that does not exist": Case(
        lambda i: fit(i, "--model.init_args.widht=8"), ("--model.init_args.widht", "MixedTask")
    ),
    "fit: config file missing": Case(
        lambda i: ["fit", "--config", str(i["dir"] / "nope.yaml")],
        ("config file", "nope.yaml", "does not exist"),
    ),
    "evaluate: config file not YAML": Case(
        lambda i: ["evaluate", "--config", str(i["dir"] / "bad.yaml")], ("bad.yaml", "not valid YAML", "line")
    ),
    "evaluate: required option missing": Case(
        lambda i: ["evaluate", f"--forecast={i['forecast']}"], ("--analysis",)
    ),
    "data synth: impossible grid": Case(
        lambda i: ["data", "synth", "--out_dir=syn", "--n_lat=0"], ("n_lat",)
    ),
    "data: no sub-command": Case(lambda i: ["data"], ("synth or physics or archive",)),
    "unknown command": Case(lambda i: ["forecast"], ("unknown command 'forecast'", "fit")),
    "plan-parallel: no devices": Case(
        lambda i: ["plan-parallel", "--devices=0", "--n_lat=16", "--n_lon=32", "--n_level=2"],
        ("--devices: 0 is out of range",),
    ),
    # -- outputs that cannot or must not be written ------------------------------------------------------
    "data synth: out_dir is a file": Case(
        lambda i: ["data", "synth", f"--out_dir={i['dir'] / 'a-file'}"], ("a-file",)
    ),
    "evaluate: out_dir is a file": Case(
        lambda i: evaluate(i, f"--out_dir={i['dir'] / 'a-file'}"), ("a-file",)
    ),
    "report: out_dir holds other files": Case(
        lambda i: report(i, "--out_dir=mine"), ("mine", "did not write"), _foreign_folder
    ),
    "report: out_dir is the working folder": Case(
        lambda i: report(i, "--out_dir=."), ("out_dir",), _foreign_folder
    ),
    "evaluate: out_dir read-only": Case(lambda i: evaluate(i, "--out_dir=ro/out"), ("ro",), _read_only("ro")),
    "fit: log folder read-only": Case(
        lambda i: fit(i, "--trainer.logger.init_args.save_dir=ro"), ("ro",), _read_only("ro")
    ),
}


def _tree(root: Path) -> dict[str, float]:
    return {str(p.relative_to(root)): p.lstat().st_mtime for p in root.rglob("*")}


@pytest.mark.parametrize("name", CASES)
def test_bad_input_is_one_line_and_leaves_nothing(
    name: str, inputs: Inputs, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture
) -> None:
    case = CASES[name]
    monkeypatch.chdir(tmp_path)
    if case.setup is not None:
        case.setup(tmp_path, monkeypatch)
    args = [str(a) for a in case.args(inputs)]
    before, inputs_before = _tree(tmp_path), _tree(inputs["dir"])
    status = main(args)
    err = capsys.readouterr().err.strip().splitlines()
    assert status == 1, f"exit status {status}: {err[-3:]}"
    line = err[-1] if err else ""
    assert line.startswith("ensml: ") and "\n" not in line, err
    assert "Traceback" not in "\n".join(err) and "usage:" not in "\n".join(err), err
    for text in case.says:
        assert text in line, line
    assert _tree(tmp_path) == before, "output left in the working folder"
    assert _tree(inputs["dir"]) == inputs_before, "output left beside the inputs"


def test_the_table_covers_every_verb_and_at_least_30_inputs() -> None:
    verbs = {" ".join(name.split(":")[0].split()) for name in CASES if ":" in name}
    assert len(CASES) >= 30
    expected = {"fit", "validate", "test", "predict", "evaluate", "report", "postprocess", "plan-parallel"}
    assert expected | {"data synth", "data archive"} <= verbs
