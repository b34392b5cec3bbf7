"""The ledger: round trips, and replacing or deleting only the same command's unchanged outputs."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from ensml.data.outputs import Ledger, OutputFolder
from ensml.data.outputs.ledger import LOG, Entry
from ensml.errors import EnsmlError
from tests.data.outputs_sandbox import make_sandbox, snapshot

pytestmark = pytest.mark.timeout(60)


@pytest.fixture
def out(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """An output folder (not yet made) beside a user's sandbox; the test runs in the sandbox."""
    home = make_sandbox(tmp_path / "home", tmp_path / "elsewhere")
    monkeypatch.chdir(home)
    return home / "out"


def _refusal(call, *args, **kwargs) -> str:
    with pytest.raises(EnsmlError) as info:
        call(*args, **kwargs)
    return str(info.value)


def test_round_trip_and_log_replay(out: Path) -> None:
    with OutputFolder.open("out", "postprocess") as folder:
        folder.write_bytes("a.nc", b"first")
        folder.write_bytes("sub/b.nc", b"second")
        # while the run is open the changes are in the log, and a reader replays them
        assert (out / ".ensml" / LOG).exists()
        live = Ledger.load(out / ".ensml")
        assert live.entries == folder.ledger.entries
        run = folder.run_id
    assert not (out / ".ensml" / LOG).exists()  # compacted on close
    ledger = Ledger.load(out / ".ensml")
    assert sorted(ledger.entries) == ["a.nc", "sub", "sub/b.nc"]
    a = ledger.entries["a.nc"]
    st = (out / "a.nc").stat()
    assert (a.kind, a.command, a.state, a.run, a.size, a.mtime_ns) == (
        "file",
        "postprocess",
        "done",
        run,
        5,
        st.st_mtime_ns,
    )
    assert ledger.entries["sub"].kind == "parent"
    assert Entry.from_json(a.to_json()) == a


def test_a_log_line_cut_short_is_ignored_and_replay_is_idempotent(out: Path) -> None:
    with OutputFolder.open("out", "postprocess") as folder:
        folder.write_bytes("a.nc", b"first")
    state = out / ".ensml"
    expected = Ledger.load(state).entries
    # a kill while appending, then a compaction killed before it emptied the log
    entry = json.dumps({"name": "a.nc", "entry": expected["a.nc"].to_json()})
    (state / LOG).write_text(entry + "\n" + entry[:25])
    assert Ledger.load(state).entries == expected
    with OutputFolder.open("out", "postprocess") as folder:
        folder.write_bytes("b.nc", b"second")  # appended on a line of its own
        assert sorted(Ledger.load(state).entries) == ["a.nc", "b.nc"]


def test_same_command_replaces_its_own_unchanged_output(out: Path) -> None:
    with OutputFolder.open("out", "evaluate") as folder:
        folder.write_text("scores.md", "first")
    with OutputFolder.open("out", "evaluate") as folder:
        folder.write_text("scores.md", "second")
    assert (out / "scores.md").read_text() == "second"
    assert Ledger.load(out / ".ensml").entries["scores.md"].size == 6


def test_another_commands_output_is_refused(out: Path) -> None:
    with OutputFolder.open("out", "evaluate") as folder:
        folder.write_text("scores.md", "evaluate's")
    with OutputFolder.open("out", "report") as folder:
        message = _refusal(lambda: folder.write_text("scores.md", "report's"))
        assert message == "report: out_dir out: scores.md was written by ensml evaluate; name another folder"
        folder.write_text("report.md", "fine")  # a new name beside it is fine
    assert (out / "scores.md").read_text() == "evaluate's"
    assert _refusal(OutputFolder.check, "out", "report", names=["scores.md"]).endswith(
        "scores.md was written by ensml evaluate; name another folder"
    )


def test_a_changed_output_is_refused_and_kept(out: Path) -> None:
    with OutputFolder.open("out", "evaluate") as folder:
        folder.write_text("scores.md", "ensml's")
    with open(out / "scores.md", "a") as f:
        f.write(" and my notes")
    before = snapshot(out.parent, skip=(out / ".ensml",))
    message = "evaluate: out_dir out: scores.md was changed after ensml wrote it; move it away"
    assert _refusal(OutputFolder.check, "out", "evaluate", names=["scores.md"]) == message
    assert _refusal(OutputFolder.open, "out", "evaluate", names=["scores.md"]) == message
    with OutputFolder.open("out", "evaluate") as folder:
        assert _refusal(folder.write_text, "scores.md", "new") == message
        assert _refusal(folder.remove, "scores.md") == message
        assert not folder.owns("scores.md")
    assert snapshot(out.parent, skip=(out / ".ensml",)) == before


def test_same_size_and_a_new_mtime_is_a_change(out: Path) -> None:
    with OutputFolder.open("out", "evaluate") as folder:
        folder.write_text("scores.md", "aaaa")
    (out / "scores.md").write_text("bbbb")
    os.utime(out / "scores.md", ns=(1, 1))
    assert _refusal(OutputFolder.check, "out", "evaluate", names=["scores.md"]).endswith(
        "was changed after ensml wrote it; move it away"
    )


def test_a_users_file_in_an_ensml_folder_is_refused(out: Path) -> None:
    with OutputFolder.open("out", "benchmark") as folder:
        folder.write_text("benchmark.csv", "table")
    (out / "benchmark.md").write_text("# my notes")
    before = snapshot(out.parent)
    message = "benchmark: out_dir out: benchmark.md exists and ensml did not write it; move it away"
    assert _refusal(OutputFolder.open, "out", "benchmark", names=["benchmark.md"]) == message
    with OutputFolder.open("out", "benchmark", whole=True) as folder:
        assert _refusal(folder.write_text, "benchmark.md", "# results") == message
        assert (
            _refusal(folder.remove, "benchmark.md")
            == "benchmark: out_dir out: benchmark.md is not an output ensml wrote"
        )
        folder.write_text("benchmark.csv", "table 2")
    after = snapshot(out.parent)
    changed = {k for k in set(before) | set(after) if before.get(k) != after.get(k)}
    assert {Path(k).name for k in changed} <= {"benchmark.csv", "ledger.json", "lock", "staging"}
    assert (out / "benchmark.md").read_text() == "# my notes"


def test_remove(out: Path) -> None:
    with OutputFolder.open("out", "evaluate") as folder:
        folder.write_text("sub/scores.md", "x")
        folder.remove("sub/scores.md")
        assert not (out / "sub").exists()  # the folder ensml made for it goes too
        assert sorted(folder.ledger.entries) == []
    with OutputFolder.open("out", "evaluate") as folder:
        folder.write_text("a.md", "x")
    with OutputFolder.open("out", "report") as folder:
        assert (
            _refusal(folder.remove, "a.md")
            == "report: out_dir out: a.md was written by ensml evaluate; name another folder"
        )
    assert (out / "a.md").exists()


def test_stale_outputs_removed_changed_ones_disowned(out: Path) -> None:
    with OutputFolder.open("out", "evaluate", whole=True) as folder:
        for name in ("scores.md", "spread.md", "old.md", "cases/case_a.png"):
            folder.write_text(name, "run 1")
    with OutputFolder.open("out", "report", whole=True) as folder:
        folder.write_text("report.md", "report")
    (out / "old.md").write_text("edited by the user")
    (out / "cases" / "mine.txt").write_text("the user's file in ensml's folder")
    with OutputFolder.open("out", "evaluate", whole=True) as folder:
        folder.write_text("scores.md", "run 2")
    assert folder.disowned == ["old.md"]
    names = sorted(p.name for p in out.iterdir())
    assert names == [".ensml", "cases", "old.md", "report.md", "scores.md"]
    assert sorted(p.name for p in (out / "cases").iterdir()) == ["mine.txt"]  # kept, so is its folder
    entries = Ledger.load(out / ".ensml").entries
    assert sorted(entries) == ["cases", "report.md", "scores.md"]
    # disowned: the user's now, so a later run may not replace it
    assert _refusal(OutputFolder.check, "out", "evaluate", names=["old.md"]).endswith(
        "old.md exists and ensml did not write it; move it away"
    )


def test_entries_of_files_that_are_gone_are_dropped(out: Path) -> None:
    with OutputFolder.open("out", "evaluate") as folder:
        folder.write_text("a.md", "x")
        folder.write_text("b.md", "x")
    (out / "a.md").unlink()
    with OutputFolder.open("out", "evaluate") as folder:
        assert sorted(folder.ledger.entries) == ["b.md"]
    (out / "a.md").write_text("the user's now")
    assert _refusal(OutputFolder.check, "out", "evaluate", names=["a.md"]).endswith(
        "a.md exists and ensml did not write it; move it away"
    )


def test_a_folder_output_owns_what_is_inside(out: Path) -> None:
    with OutputFolder.open("out", "fit") as folder:
        with folder.write("checkpoints") as tmp:
            tmp.mkdir()
            (tmp / "best.ckpt").write_bytes(b"w1")
        folder.write_bytes("checkpoints/last.ckpt", b"w2")  # inside a folder of ours
        entries = folder.ledger.entries
        assert sorted(entries) == ["checkpoints"] and entries["checkpoints"].files == 2
        assert entries["checkpoints"].state == "done"
    (out / "checkpoints" / "mine.ckpt").write_bytes(b"the user's")
    message = "fit: out_dir out: checkpoints was changed after ensml wrote it; move it away"
    assert _refusal(OutputFolder.check, "out", "fit", names=["checkpoints/last.ckpt"]) == message
    assert _refusal(OutputFolder.check, "out", "evaluate", names=["checkpoints/x"]).endswith(
        "checkpoints was written by ensml fit; name another folder"
    )
