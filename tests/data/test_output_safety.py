"""No command destroys a user's folder or leaves debris, seen from the command line (the output
module's own tests are tests/data/test_outputs*.py)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
import xarray as xr

from ensml.cli.main import main
from ensml.data.outputs import STATE_DIR
from tests.cli.test_bad_input import run_failing

ROOT = os.geteuid() == 0 if hasattr(os, "geteuid") else False


@pytest.fixture
def work(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.chdir(tmp_path)
    return tmp_path


def _report(data: dict[str, Path], out: str) -> list[str]:
    return ["report", f"--forecast={data['forecast']}", f"--analysis={data['analysis']}", f"--out_dir={out}"]


def _evaluate(data: dict[str, Path], out: str, *extra: str) -> list[str]:
    return [
        "evaluate",
        f"--forecast={data['forecast']}",
        f"--analysis={data['analysis']}",
        f"--out_dir={out}",
        *extra,
    ]


def _ledger(folder: Path) -> dict[str, dict]:
    return json.loads((folder / STATE_DIR / "ledger.json").read_text())["entries"]


def _tree(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def test_report_refuses_a_folder_it_did_not_write(tiny_data, work, capsys) -> None:
    runs = work / "runs"
    (runs / "mixed" / "checkpoints").mkdir(parents=True)
    (runs / "mixed" / "checkpoints" / "best.ckpt").write_bytes(b"weights")
    before = _tree(runs)
    line = run_failing(_report(tiny_data, "runs"), capsys, "holds 1 entry ensml did not write (e.g. mixed)")
    assert "runs" in line and _tree(runs) == before


@pytest.mark.parametrize("command", ["report", "evaluate"])
def test_out_dir_is_a_file(tiny_data, work, capsys, command) -> None:
    (work / "out").write_text("my notes")
    args = _report(tiny_data, "out") if command == "report" else _evaluate(tiny_data, "out")
    run_failing(args, capsys, f"{command}: out_dir out is a file, not a folder")
    assert (work / "out").read_text() == "my notes"


@pytest.mark.parametrize("out", [".", ".."])
def test_out_dir_is_the_working_folder_or_above(tiny_data, work, capsys, out) -> None:
    (work / "keep.txt").write_text("mine")
    run_failing(_report(tiny_data, out), capsys, "is the current folder or above it")
    assert (work / "keep.txt").read_text() == "mine"


def test_out_dir_under_a_file(tiny_data, work, capsys) -> None:
    (work / "f").write_text("x")
    run_failing(_evaluate(tiny_data, "f/out"), capsys, "f is a file, not a folder")


@pytest.mark.parametrize("command", ["report", "evaluate", "synth"])
def test_read_only_out_dir(tiny_data, work, capsys, monkeypatch, command) -> None:
    ro = work / "ro"
    ro.mkdir()
    ro.chmod(0o555)
    if ROOT:  # root may write anywhere: make the read-only folder look read-only to the checks
        access = os.access
        monkeypatch.setattr(os, "access", lambda p, mode: Path(p).resolve() != ro and access(p, mode))
    try:
        args = {
            "report": _report(tiny_data, "ro/out"),
            "evaluate": _evaluate(tiny_data, "ro/out"),
            "synth": ["data", "synth", "--out_dir=ro/out", "--n_lat=4", "--n_lon=8"],
        }[command]
        run_failing(args, capsys, "is not writable")
        assert not any(ro.iterdir())
    finally:
        ro.chmod(0o755)


@pytest.mark.slow
def test_evaluate_folder_holds_one_run(tiny_data, fitted, work) -> None:
    """A later run without spread predictions leaves no spread table of the earlier run."""
    spread = fitted / "runs" / "smoke" / "predictions.nc"
    with xr.open_dataset(spread) as ds:  # a spread model's file: the mixed predictions' sigma alone
        sd = ds[[v for v in ds.data_vars if str(v).endswith("_std")]].load()
    sd.attrs = {k: v.replace("mixed", "spread") if isinstance(v, str) else v for k, v in ds.attrs.items()}
    sd.attrs["ensml_task"] = "SpreadTask"
    sd.to_netcdf(work / "spread.nc")
    first = main(_evaluate(tiny_data, "ev", f"--spread_predictions={work / 'spread.nc'}"))
    assert first == 0 and (work / "ev" / "spread.csv").is_file()
    assert {e["command"] for e in _ledger(work / "ev").values()} == {"evaluate"}
    assert main(_evaluate(tiny_data, "ev")) == 0
    names = sorted(p.name for p in (work / "ev").iterdir())
    assert names == [
        STATE_DIR,
        "decomposition.csv",
        "decomposition.md",
        "scores.csv",
        "scores.md",
        "scores.nc",
    ]
    assert [p.name for p in work.iterdir() if p.name.startswith(".")] == []


def test_a_folder_without_ledger_is_refused_whatever_it_holds(tiny_data, work, capsys) -> None:
    """Files named like evaluate's own, but not in a ledger, are a user's: refused, left as they were."""
    old = work / "ev"
    old.mkdir()
    for name in ("scores.csv", "spread.csv", "spread.md"):
        (old / name).write_text("mine")
    before = _tree(old)
    run_failing(_evaluate(tiny_data, "ev"), capsys, "ev")
    assert _tree(old) == before and not (old / STATE_DIR).exists()


def test_synth_out_dir_under_a_file(work, capsys) -> None:
    (work / "f").write_text("x")
    run_failing(["data", "synth", "--out_dir=f/out", "--n_lat=4", "--n_lon=8"], capsys, "is a file")
