"""``ensml data synth`` and ``ensml data archive`` write only through their output folder.

A folder ensml does not own is refused whatever it holds, and left byte for byte as it was; a
user's file with an output's name is refused; an archive name cannot leave its folder; a full
disk is one line naming the file, leaving no partial or empty file; a killed run leaves nothing
a rerun of the same command does not tidy.
"""

from __future__ import annotations

import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import xarray as xr

from ensml.cli.main import main
from ensml.data.outputs import OutputFolder
from tests.cli.process import cli_env, kill_group
from tests.data.outputs_sandbox import make_sandbox, run_cli_on_small_disk, skip_unless_mounts, snapshot

pytestmark = pytest.mark.timeout(600)

SYNTH = [
    "data",
    "synth",
    "--n_lat=4",
    "--n_lon=8",
    "--start=2017-01-01",
    "--end=2017-01-10",
    "--every_days=3",
]


def archive(data: dict[str, Path], out: Path | str, *extra: str) -> list[str]:
    return [
        "data",
        "archive",
        f"--forecast={data['forecast']}",
        f"--out_dir={out}",
        "--period=[2017-03-01, 2017-03-31]",
        "--name=fc_{init:%Y%m%d}.nc",
        *extra,
    ]


def one_line(args: list[str], capsys: pytest.CaptureFixture) -> str:
    """Run ``ensml ARGS``: exit status 1 and one line on stderr, which is returned."""
    assert main(args) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("ensml: "), err
    return err[0]


def ledger(folder: Path) -> dict[str, dict]:
    with OutputFolder.open(folder, "inspect", shared=True) as opened:  # a current snapshot
        return {k: e.to_json() for k, e in opened.ledger.entries.items()}


def mine(folder: Path) -> list[str]:
    """Every file in ``folder`` but ensml's own ``.ensml``, relative to it."""
    return sorted(
        str(p.relative_to(folder)) for p in folder.rglob("*") if p.is_file() and ".ensml" not in p.parts
    )


def top(folder: Path) -> list[str]:
    """The names in ``folder`` but ``.ensml``."""
    return sorted(p.name for p in folder.iterdir() if p.name != ".ensml")


def wait_for(found, proc: subprocess.Popen, what: str, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while not found():
        assert proc.poll() is None, f"the run ended before {what}"
        assert time.monotonic() < deadline, f"no {what} within {timeout} s"
        time.sleep(0.02)


# -- refusals before any side effect ------------------------------------------------------------
@pytest.mark.parametrize("verb", ["synth", "archive"])
def test_a_folder_ensml_does_not_own_is_refused_and_left_as_it_was(tiny_data, tmp_path, capsys, verb) -> None:
    home = make_sandbox(tmp_path / "home", tmp_path / "elsewhere")
    before = snapshot(tmp_path)
    args = [*SYNTH, f"--out_dir={home}"] if verb == "synth" else archive(tiny_data, home)
    assert one_line(args, capsys) == (
        f"ensml: {verb}: out_dir {home} holds 7 entries ensml did not write (e.g. .name.deadbeefcafe.tmp); "
        "name a new or empty folder"
    )
    assert snapshot(tmp_path) == before


@pytest.mark.parametrize("verb", ["synth", "archive"])
def test_the_root_and_the_working_folder_are_refused(tiny_data, tmp_path, monkeypatch, capsys, verb) -> None:
    monkeypatch.chdir(tmp_path)
    for out, reason in (
        ("/", "is the root folder; name a new folder"),
        (".", "is the current folder or above it; name a new folder"),
    ):
        args = [*SYNTH, f"--out_dir={out}"] if verb == "synth" else archive(tiny_data, out)
        assert one_line(args, capsys) == f"ensml: {verb}: out_dir {out} {reason}"
    assert list(tmp_path.iterdir()) == []


@pytest.mark.slow
def test_synth_replaces_only_its_own_outputs(tmp_path, capsys) -> None:
    out = tmp_path / "synth"
    assert main([*SYNTH, f"--out_dir={out}"]) == 0
    capsys.readouterr()
    (out / "notes.txt").write_text("my notes")  # the user's, in ensml's folder
    first = snapshot(out)
    assert one_line([*SYNTH, f"--out_dir={out}", "--seed=2"], capsys) == (
        f"ensml: synth: out_dir {out} already holds analysis.nc, forecast.nc, oracle.nc of an earlier "
        "synth; pass overwrite=True to replace them"
    )
    assert snapshot(out) == first
    # the folder holds one synth's files: the netCDF files of the first go, the user's stay
    assert main([*SYNTH, f"--out_dir={out}", "--seed=2", "--overwrite=true", "--format=zarr"]) == 0
    assert top(out) == ["analysis.zarr", "forecast.zarr", "notes.txt", "oracle.zarr"]
    assert (out / "notes.txt").read_text() == "my notes"
    assert sorted(ledger(out)) == ["analysis.zarr", "forecast.zarr", "oracle.zarr"]


def test_synth_refuses_a_users_file_with_an_outputs_name(tmp_path, capsys) -> None:
    out = tmp_path / "synth"
    assert main([*SYNTH, f"--out_dir={out}"]) == 0
    capsys.readouterr()
    (out / "forecast.nc").write_bytes(b"my own forecast")  # replaced by the user: now theirs
    before = snapshot(tmp_path)
    assert one_line([*SYNTH, f"--out_dir={out}", "--overwrite=true"], capsys) == (
        f"ensml: synth: out_dir {out}: forecast.nc was changed after ensml wrote it; move it away"
    )
    with OutputFolder.open(tmp_path / "arch", "archive") as folder:  # a folder of ensml's ...
        folder.write_text("fc.nc", "archived")
    (tmp_path / "arch" / "oracle.nc").write_bytes(b"the user's")  # ... holding a user's file
    before = snapshot(tmp_path)
    assert one_line([*SYNTH, f"--out_dir={tmp_path / 'arch'}"], capsys) == (
        f"ensml: synth: out_dir {tmp_path / 'arch'}: oracle.nc exists and ensml did not write it; "
        "move it away"
    )
    assert snapshot(tmp_path) == before


def test_archive_names_are_checked_before_the_first_write(tiny_data, tmp_path, capsys) -> None:
    home = make_sandbox(tmp_path / "home", tmp_path / "elsewhere")
    out = home / "archive"
    before = snapshot(tmp_path)
    line = one_line(archive(tiny_data, out, "--name=../escape_{init:%Y%m%d}.nc"), capsys)
    assert line == (
        "ensml: archive: name template '../escape_{init:%Y%m%d}.nc' gives '../escape_20170302.nc', "
        "which leaves out_dir ('..')"
    )
    line = one_line(archive(tiny_data, out, "--name=/tmp/abs_{init:%Y%m%d}.nc"), capsys)
    assert line.endswith("which is absolute; names are relative to out_dir")
    line = one_line(archive(tiny_data, out, "--name=fc_{init:%Y}.nc"), capsys)
    assert line == (
        "ensml: archive: name template 'fc_{init:%Y}.nc' gives 'fc_2017.nc' to init times 2017-03-02 00:00 "
        "and 2017-03-05 00:00; use a field that varies, such as {init:%Y%m%d%H}"
    )
    assert snapshot(tmp_path) == before


def test_archive_refuses_a_users_file_with_an_outputs_name(tiny_data, tmp_path, capsys) -> None:
    out = tmp_path / "archive"
    assert main(archive(tiny_data, out)) == 0
    capsys.readouterr()
    (out / "b_20170323.nc").write_bytes(b"the user's")  # in ensml's folder, never ensml's
    before = snapshot(tmp_path)
    line = one_line(archive(tiny_data, out, "--name=b_{init:%Y%m%d}.nc"), capsys)
    assert (
        line
        == f"ensml: archive: out_dir {out}: b_20170323.nc exists and ensml did not write it; move it away"
    )
    assert snapshot(tmp_path) == before  # not one file written: the names are checked first


def test_archive_records_every_file_in_the_ledger(tiny_data, tmp_path) -> None:
    out = tmp_path / "archive"
    assert main(archive(tiny_data, out, "--name={init:%Y}/{init:%m}/fc_{init:%d}.nc")) == 0
    names = [n for n in mine(out) if n.endswith(".nc")]
    assert len(names) == 10 and names[0] == "2017/03/fc_02.nc"
    entries = ledger(out)
    assert sorted(k for k, e in entries.items() if e["kind"] == "file") == names
    assert {entries[k]["kind"] for k in ("2017", "2017/03")} == {"parent"}
    assert all(entries[n]["command"] == "archive" and entries[n]["state"] == "done" for n in names)
    with xr.open_dataset(out / names[0]) as one:
        assert one.sizes["init_time"] == 1 and one.attrs["Conventions"] == "CF-1.8"


# -- a full disk --------------------------------------------------------------------------------
def _no_partial_files(files: dict[str, int], out: str) -> None:
    ours = {p: size for p, size in files.items() if p.startswith(f"{out}/") and "/.ensml/" not in p}
    assert all(size > 0 for size in ours.values()), ours
    assert not [p for p in files if "/.ensml/staging/" in p and not p.endswith("/lock")], files


@pytest.mark.slow
def test_synth_on_a_full_disk(tmp_path) -> None:
    skip_unless_mounts()
    args = ["data", "synth", "--out_dir=out", "--n_lat=16", "--n_lon=32", "--end=2017-03-31"]
    report = run_cli_on_small_disk(tmp_path / "disk", args, "512k")
    if report is None:
        pytest.skip("cannot mount a size-limited tmpfs here")
    status, err, files = report
    assert status == 1 and err[-1] == "ensml: synth: cannot write out/forecast.nc: no space left on device"
    assert not any("Traceback" in line for line in err)
    assert not [p for p in files if p.startswith("out/") and "/.ensml/" not in p], files  # nothing at all
    _no_partial_files(files, "out")


@pytest.mark.slow
def test_archive_on_a_full_disk_keeps_the_complete_files(tiny_data, tmp_path) -> None:
    skip_unless_mounts()
    report = run_cli_on_small_disk(tmp_path / "disk", archive(tiny_data, "arch"), "600k")
    if report is None:
        pytest.skip("cannot mount a size-limited tmpfs here")
    status, err, files = report
    assert status == 2 and not any("Traceback" in line for line in err)  # 2: part of the work done
    failed = re.fullmatch(
        r"ensml: archive: cannot write (arch/fc_201703\d\d\.nc): no space left on device; (\d+) of 10 "
        r"files written and recorded; run the same command again for the other (\d+)",
        err[-1],
    )
    assert failed, err[-1]
    written = sorted(p for p in files if p.startswith("arch/fc_"))
    assert 0 < len(written) < 10 and failed.group(1) not in written  # the complete files, only
    assert int(failed.group(2)) == len(written) and int(failed.group(3)) == 10 - len(written)
    _no_partial_files(files, "arch")


# -- a killed run, then the same command again --------------------------------------------------
KILL_AFTER = """
import os, signal, sys
from ensml.data.outputs import folder as outputs_folder
from ensml.cli.main import main

seen = {"n": 0}
commit = outputs_folder.OutputFolder._commit

def commit_then_die(self, pending, removals):  # SIGKILL after the first file is in place
    commit(self, pending, removals)
    seen["n"] += 1
    if seen["n"] == int(sys.argv[1]):
        os.kill(os.getpid(), signal.SIGKILL)

outputs_folder.OutputFolder._commit = commit_then_die
main(sys.argv[2:])
"""


@pytest.mark.slow
def test_archive_killed_then_rerun(tiny_data, tmp_path) -> None:
    out = tmp_path / "arch"
    args = archive(tiny_data, out)
    killed = subprocess.run([sys.executable, "-c", KILL_AFTER, "3", *args], env=cli_env(), timeout=300)
    assert killed.returncode == -signal.SIGKILL
    assert len([n for n in mine(out) if n.endswith(".nc")]) == 3  # three complete files ...
    assert len(list((out / ".ensml" / "staging").iterdir())) == 1  # ... and the dead run's staging
    (out / "notes.txt").write_text("mine")
    assert main(args) == 0
    assert mine(out) == sorted(
        [*(f"fc_201703{d:02d}.nc" for d in (2, 5, 8, 11, 14, 17, 20, 23, 26, 29)), "notes.txt"]
    )
    assert list((out / ".ensml" / "staging").iterdir()) == []
    assert sorted(ledger(out)) == [n for n in mine(out) if n.endswith(".nc")]  # not the user's notes


@pytest.mark.slow  # killed and rerun
def test_synth_killed_mid_write_then_rerun(tmp_path) -> None:
    out = tmp_path / "synth"
    args = ["data", "synth", f"--out_dir={out}", "--n_lat=16", "--n_lon=32"]
    proc = subprocess.Popen(
        [sys.executable, "-m", "ensml.cli.main", *args],
        env=cli_env(),
        start_new_session=True,
        stderr=subprocess.DEVNULL,
    )
    staging = out / ".ensml" / "staging"
    wait_for(lambda: staging.is_dir() and any(staging.rglob("*.analysis.nc")), proc, "the second file")
    kill_group(proc)
    proc.wait()
    assert top(out) == []  # the forecast is staged, not in place: all three files or none
    assert main([*SYNTH, f"--out_dir={out}"]) == 0
    assert top(out) == ["analysis.nc", "forecast.nc", "oracle.nc"]
    assert list(staging.iterdir()) == []
    assert sorted(ledger(out)) == ["analysis.nc", "forecast.nc", "oracle.nc"]
