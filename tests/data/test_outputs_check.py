"""The out_dir checks: refused in one line before any side effect, a user's files untouched."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from ensml.data.outputs import OutputFolder, check_out_dir
from ensml.errors import EnsmlError
from tests.data.outputs_sandbox import make_sandbox, run_python, skip_unless_mounts, snapshot

pytestmark = pytest.mark.timeout(60)


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A user's folder with their files, the working folder of the test."""
    home = make_sandbox(tmp_path / "home", tmp_path / "elsewhere")
    monkeypatch.chdir(home)
    return home


def refused(home: Path, path: str, message: str | None, **kwargs) -> None:
    """``check`` and ``open`` both refuse with exactly ``message`` (None: any), and nothing changes."""
    before = snapshot(home.parent)
    for call in (check_out_dir, OutputFolder.open):
        with pytest.raises(EnsmlError) as info:
            call(path, "evaluate", **kwargs)
        assert message is None or str(info.value) == message
        assert "\n" not in str(info.value)
        assert snapshot(home.parent) == before


def test_empty_path(home: Path) -> None:
    refused(home, "", "evaluate: out_dir is empty; name a folder")


def test_a_file(home: Path) -> None:
    refused(home, "scores.csv", "evaluate: out_dir scores.csv is a file, not a folder")


def test_under_a_file(home: Path) -> None:
    message = f"evaluate: out_dir scores.csv/new/out: {home}/scores.csv is a file, not a folder"
    refused(home, "scores.csv/new/out", message)


def test_the_root_folder(home: Path) -> None:
    refused(home, "/", "evaluate: out_dir / is the root folder; name a new folder")
    refused(home, "/../..", "evaluate: out_dir /../.. is the root folder; name a new folder")


@pytest.mark.parametrize("path", [".", "..", "../..", "./", "sibling/.."])
def test_the_current_folder_or_above(home: Path, path: str) -> None:
    refused(home, path, f"evaluate: out_dir {path} is the current folder or above it; name a new folder")


def test_the_current_folder_by_absolute_path_and_link(home: Path, tmp_path: Path) -> None:
    os.symlink(home, tmp_path / "link_home")
    for path in (str(home), str(tmp_path / "link_home")):
        refused(home, path, f"evaluate: out_dir {path} is the current folder or above it; name a new folder")


@pytest.mark.parametrize(
    ("files", "held"),
    [  # a user's run folder; only hidden temporaries (once swept by pattern); product-like names
        (
            {"checkpoints/best.ckpt": "w", "metrics.csv": "epoch", ".cache": "x"},
            "3 entries ensml did not write (e.g. .cache)",
        ),
        (
            {".scores.csv.0123456789ab.tmp/x": "mine"},
            "1 entry ensml did not write (e.g. .scores.csv.0123456789ab.tmp)",
        ),
        (
            {n: "by hand" for n in ("scores.csv", "scores.md", "spread.md")},
            "3 entries ensml did not write (e.g. scores.csv)",
        ),
    ],
)
def test_a_folder_ensml_did_not_write(home: Path, files: dict[str, str], held: str) -> None:
    for name, text in files.items():
        (home / "sibling" / "runs" / name).parent.mkdir(parents=True, exist_ok=True)
        (home / "sibling" / "runs" / name).write_text(text)
    refused(home, "sibling/runs", f"evaluate: out_dir sibling/runs holds {held}; name a new or empty folder")


def test_dot_ensml_that_is_not_a_folder(home: Path) -> None:
    (home / "sibling" / "x").mkdir()
    (home / "sibling" / "x" / ".ensml").write_text("mine")
    refused(home, "sibling/x", "evaluate: out_dir sibling/x holds .ensml, which is not ensml's folder")


@pytest.mark.parametrize(
    ("ledger", "why"),
    [
        ("{not json", "Expecting property name enclosed in double quotes: line 1 column 2 (char 1)"),
        ('{"format": "other"}', "not an ensml-ledger file"),
        ('{"format": "ensml-ledger", "version": 9, "entries": {}}', "version 9, this ensml reads 1"),
        (
            '{"format": "ensml-ledger", "version": 1, "entries": {"../../x": {"kind": "file", "command": '
            '"evaluate", "state": "done", "run": "r", "time": "t"}}}',
            "entry name '../../x' is not a relative name inside the folder",
        ),
        (
            '{"format": "ensml-ledger", "version": 1, "entries": {"x": {"kind": "file"}}}',
            "an entry lacks command, state, run, time",
        ),
    ],
)
def test_a_ledger_that_cannot_be_read(home: Path, ledger: str, why: str) -> None:
    state = home / "sibling" / "out" / ".ensml"
    state.mkdir(parents=True)
    (state / "ledger.json").write_text(ledger)
    refused(
        home,
        "sibling/out",
        f"evaluate: out_dir sibling/out: ledger {state}/ledger.json cannot be read ({why}); "
        "move the folder away or name another",
    )


def test_inside_dot_ensml(home: Path) -> None:
    with OutputFolder.open("sibling/out", "evaluate"):
        pass
    message = "evaluate: out_dir sibling/out/.ensml/staging is inside a .ensml folder, ensml's own"
    refused(home, "sibling/out/.ensml/staging", message)


def test_a_broken_link(home: Path) -> None:
    os.symlink(home / "nowhere", home / "sibling" / "dangling")
    message = f"evaluate: out_dir sibling/dangling is a broken symbolic link (to {home}/nowhere)"
    refused(home, "sibling/dangling", message)


def test_not_writable(home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # root passes every permission check, so the kernel's answer is replaced here; a real
    # read-only mount is tested below.
    monkeypatch.setattr(os, "access", lambda path, mode: False)
    message = f"evaluate: out_dir sibling/new/out: folder {home}/sibling is not writable (permission denied)"
    refused(home, "sibling/new/out", message)


@pytest.mark.slow
def test_a_read_only_mount(tmp_path: Path) -> None:
    skip_unless_mounts()
    folder = tmp_path / "ro"
    make_sandbox(folder, tmp_path / "elsewhere")
    before = snapshot(tmp_path)
    result = run_python(
        f"""
        import subprocess, sys
        from ensml.data.outputs import OutputFolder
        from ensml.errors import EnsmlError
        d = {str(folder)!r}
        for args in (["--bind", d, d], ["-o", "remount,ro,bind", d]):
            if subprocess.run(["mount", *args]).returncode:
                sys.exit(77)
        for path in (d + "/new/out", d + "/cases"):
            try:
                OutputFolder.open(path, "report", shared=path.endswith("cases"))
            except EnsmlError as exc:
                print(exc)
        """,
        namespace=True,
    )
    if result.returncode == 77:
        pytest.skip("no read-only bind mount here")
    assert result.stdout.splitlines() == [
        f"report: out_dir {folder}/new/out: folder {folder} is on a read-only file system",
        f"report: out_dir {folder}/cases: folder {folder}/cases is on a read-only file system",
    ], result.stderr
    assert snapshot(tmp_path) == before


def test_names_that_are_a_users_files(home: Path) -> None:
    # shared: one output in a folder the user keeps other things in (predict's file)
    refused(
        home,
        ".",
        "evaluate: out_dir .: benchmark.md exists and ensml did not write it; move it away",
        names=["new.nc", "benchmark.md"],
        shared=True,
    )
    refused(
        home,
        ".",
        "evaluate: output name 'outside/precious.nc': outside is a symbolic link (to "
        f"{home.parent}/elsewhere); ensml writes only real files inside out_dir",
        names=["outside/precious.nc"],
        shared=True,
    )


def test_accepted_without_side_effects(home: Path) -> None:
    before = snapshot(home.parent)
    assert check_out_dir("sibling/new/deeper", "evaluate") == home / "sibling" / "new" / "deeper"
    (home / "sibling" / "empty").mkdir()
    (home / "sibling" / "only_state" / ".ensml").mkdir(parents=True)  # a run killed at its start
    after = snapshot(home.parent)
    assert check_out_dir("sibling/empty", "evaluate", names=["scores.csv"]) == home / "sibling" / "empty"
    assert check_out_dir("sibling/only_state", "evaluate") == home / "sibling" / "only_state"
    assert check_out_dir(".", "predict", names=["predictions.nc"], shared=True) == home
    assert snapshot(home.parent) == after
    made = ("empty", "only_state", "only_state/.ensml")
    assert set(after) - set(before) == {str(home / "sibling" / p) for p in made}


def test_an_ensml_folder_with_a_users_extra_files(home: Path) -> None:
    with OutputFolder.open("sibling/out", "evaluate") as folder:
        folder.write_text("scores.md", "table")
    (home / "sibling" / "out" / "my_notes.txt").write_text("mine")
    assert check_out_dir("sibling/out", "evaluate", names=["scores.md"]) == home / "sibling" / "out"
    with pytest.raises(EnsmlError) as info:
        check_out_dir("sibling/out", "evaluate", names=["my_notes.txt"])
    assert str(info.value) == (
        "evaluate: out_dir sibling/out: my_notes.txt exists and ensml did not write it; move it away"
    )


def test_a_failed_open_leaves_no_folder(home: Path) -> None:
    before = snapshot(home.parent)
    with pytest.raises(EnsmlError, match=r"output name '\.\./x' leaves out_dir"):
        OutputFolder.open("sibling/new/out", "evaluate", names=["../x"])
    assert snapshot(home.parent) == before


def test_ledger_format_on_disk(home: Path) -> None:
    with OutputFolder.open("sibling/out", "evaluate") as folder:
        folder.write_text("scores.md", "table")
    data = json.loads((home / "sibling" / "out" / ".ensml" / "ledger.json").read_text())
    assert data["format"] == "ensml-ledger" and data["version"] == 1
    entry = data["entries"]["scores.md"]
    assert {k: entry[k] for k in ("kind", "command", "state", "size")} == {
        "kind": "file",
        "command": "evaluate",
        "state": "done",
        "size": 5,
    }
    assert entry["run"] == folder.run_id and len(entry["sha256"]) == 64


class _Refused(Exception):
    """A refusal found after the folder was opened (a bad checkpoint, Ctrl-C)."""


@pytest.mark.parametrize("whole", [True, False])
def test_a_run_that_fails_before_writing_leaves_no_folder(home: Path, whole: bool) -> None:
    before = snapshot(home.parent)
    with pytest.raises(_Refused), OutputFolder.open("new/out", "evaluate", whole=whole):
        assert (home / "new/out/.ensml").is_dir()
        raise _Refused
    assert snapshot(home.parent) == before  # new/ and new/out/ gone too: this run made them


def test_a_failed_run_keeps_an_existing_folder_and_what_was_written(home: Path) -> None:
    (home / "mine").mkdir()
    with pytest.raises(_Refused), OutputFolder.open("mine", "archive") as folder:
        raise _Refused
    assert sorted(os.listdir(home / "mine")) == []  # the user's empty folder stays, without .ensml
    with pytest.raises(_Refused), OutputFolder.open("fresh", "archive") as folder:
        folder.write_text("a.txt", "complete\n")  # renamed into place and recorded at once
        raise _Refused
    assert (home / "fresh/a.txt").read_text() == "complete\n" and (home / "fresh/.ensml").is_dir()
    with OutputFolder.open("done", "evaluate", whole=True) as folder:
        folder.write_text("scores.csv", "a\n")
    with pytest.raises(_Refused), OutputFolder.open("done", "evaluate", whole=True):
        raise _Refused  # an earlier run's folder: nothing of it is removed
    assert sorted(os.listdir(home / "done")) == [".ensml", "scores.csv"]


def test_a_name_longer_than_the_file_system_allows(home: Path) -> None:
    name = "a" * 300
    message = (
        f"evaluate: out_dir new/{name[:36]}…{name[-16:]}: the name {name[:40]}…{name[-16:]} is 300 bytes, "
        "longer than the file system allows (NAME_MAX: 255 bytes)"
    )
    refused(home, f"new/{name}", message)
    assert not (home / "new").exists()


def test_a_path_longer_than_the_file_system_allows(home: Path) -> None:
    path = "/".join(["b" * 200] * 21)  # every name fits, the path does not
    refused(home, path, None)
    with pytest.raises(EnsmlError, match=r"the path is \d+ bytes, .* \(PATH_MAX: 4096 bytes, less 64\)"):
        check_out_dir(path, "evaluate")
    assert not (home / ("b" * 200)).exists()


def test_an_output_path_longer_than_the_file_system_allows(home: Path) -> None:
    names = ["/".join(["c" * 200] * 20) + "/scores.csv"]  # each name fits, the whole does not
    with pytest.raises(EnsmlError, match=r"output c+…c+/scores.csv would have a path of \d+ bytes"):
        check_out_dir("new", "evaluate", names=names)
    assert not (home / "new").exists()
