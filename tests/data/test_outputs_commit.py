"""Commits: all at the end or each file at once; failures, interrupts and kills leave whole results."""

from __future__ import annotations

import errno
import os
import signal
from pathlib import Path

import numpy as np
import pytest
import xarray as xr

from ensml.data.outputs import Ledger, OutputFolder
from ensml.data.outputs import commit as commit_module
from ensml.data.outputs.commit import signals_held
from ensml.errors import EnsmlError
from tests.data.outputs_sandbox import run_python, snapshot

pytestmark = pytest.mark.timeout(120)

RESULTS = ("scores.csv", "scores.md", "spread.md")


def evaluate(out: Path, tag: str, names=RESULTS, fail_after: int | None = None, error=RuntimeError) -> None:
    """An evaluate-like run writing ``names`` whole; raise ``error`` after ``fail_after`` files."""
    with OutputFolder.open(out, "evaluate", whole=True) as folder:
        for i, name in enumerate(names):
            if i == fail_after:
                raise error("stopped midway")
            folder.write_text(name, f"{name} of {tag}")
        with folder.write("per_point.zarr") as tmp:
            xr.Dataset({"crps": ("x", np.full(4, len(tag), "f4"))}).to_zarr(tmp, consolidated=False)


def state(out: Path) -> dict[str, str]:
    """The folder's outputs and ledger entries (not the lock, which names its last holder)."""
    snap = snapshot(out, skip=(out / ".ensml",))
    return {**snap, "ledger": str(sorted(Ledger.load(out / ".ensml").entries.items()))}


@pytest.mark.parametrize("error", [RuntimeError, KeyboardInterrupt])
def test_a_failed_run_leaves_the_previous_results_whole(tmp_path: Path, error) -> None:
    out = tmp_path / "out"
    evaluate(out, "run 1")
    before = state(out)
    with pytest.raises(error, match="stopped midway"):
        evaluate(out, "run 2", fail_after=2, error=error)
    assert state(out) == before
    assert list((out / ".ensml" / "staging").iterdir()) == []


def test_a_run_replaces_the_previous_results_whole(tmp_path: Path) -> None:
    out = tmp_path / "out"
    evaluate(out, "run 1")
    evaluate(out, "run two", names=RESULTS[:2])
    assert sorted(p.name for p in out.iterdir()) == [".ensml", "per_point.zarr", "scores.csv", "scores.md"]
    assert (out / "scores.md").read_text() == "scores.md of run two"
    assert xr.open_zarr(out / "per_point.zarr", consolidated=False)["crps"].values.tolist() == [7.0] * 4
    assert list((out / ".ensml" / "staging").iterdir()) == []


def test_nothing_appears_before_the_commit(tmp_path: Path) -> None:
    out = tmp_path / "out"
    with OutputFolder.open(out, "report", whole=True) as folder:
        folder.write_text("report.md", "x")
        assert not (out / "report.md").exists()
    assert (out / "report.md").read_text() == "x"


def test_a_rename_failing_midway_is_undone(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    out = tmp_path / "out"
    evaluate(out, "run 1")
    before = state(out)
    real_swap, calls = commit_module.swap, []

    def full_on_second(new: Path, final: Path, box: Path):
        calls.append(final.name)
        if len(calls) == 2:
            raise OSError(errno.ENOSPC, "No space left on device")
        return real_swap(new, final, box)

    monkeypatch.setattr(commit_module, "swap", full_on_second)
    with pytest.raises(EnsmlError) as info:
        evaluate(out, "run 2")
    assert str(info.value) == f"evaluate: cannot write {out}/{calls[1]}: no space left on device"
    assert state(out) == before
    assert list((out / ".ensml" / "staging").iterdir()) == []


@pytest.mark.slow
def test_a_commit_cut_by_sigkill_is_finished_by_the_next_run(tmp_path: Path) -> None:
    out = tmp_path / "out"
    evaluate(out, "run 1")
    result = run_python(
        f"""
        import os, signal
        from ensml.data.outputs import commit, OutputFolder
        real, n = commit.swap, []
        def swap(new, final, box):
            n.append(1)
            if len(n) == 2:  # after the first rename
                os.kill(os.getpid(), signal.SIGKILL)
            return real(new, final, box)
        commit.swap = swap
        with OutputFolder.open({str(out)!r}, "evaluate", whole=True) as folder:
            for name in {list(RESULTS[:2])!r}:
                folder.write_text(name, name + " of run 2")
        """
    )
    assert result.returncode == -signal.SIGKILL, result.stderr
    # killed in the middle: one output is new, the other old, the stale ones still there
    assert [(out / n).read_text() for n in RESULTS] == [
        "scores.csv of run 2",
        "scores.md of run 1",
        "spread.md of run 1",
    ]
    with OutputFolder.open(out, "evaluate") as folder:
        entries = folder.ledger.entries
    assert sorted(p.name for p in out.iterdir()) == [".ensml", "scores.csv", "scores.md"]
    assert [(out / n).read_text() for n in RESULTS[:2]] == [f"{n} of run 2" for n in RESULTS[:2]]
    assert sorted(entries) == list(RESULTS[:2]) and all(e.state == "done" for e in entries.values())
    assert list((out / ".ensml" / "staging").iterdir()) == []


def test_each_file_is_committed_as_it_is_written(tmp_path: Path) -> None:
    out = tmp_path / "out"
    with OutputFolder.open(out, "postprocess") as folder:
        folder.write_bytes("a.nc", b"a")
        assert (out / "a.nc").read_bytes() == b"a"
        assert folder.ledger.entries["a.nc"].state == "done"
        with pytest.raises(KeyboardInterrupt):
            with folder.write("b.nc") as tmp:
                tmp.write_bytes(b"half")
                raise KeyboardInterrupt
        assert not (out / "b.nc").exists() and "b.nc" not in folder.ledger.entries
        assert [p.name for p in folder.run_dir.iterdir()] == ["lock"]


def test_a_folder_output_replaces_the_previous_one(tmp_path: Path) -> None:
    out = tmp_path / "out"
    with OutputFolder.open(out, "postprocess") as folder:
        for value in (1.0, 2.0):
            with folder.write("products.zarr") as tmp:
                xr.Dataset({"v": ("x", np.full(3, value))}).to_zarr(tmp, consolidated=False)
        assert xr.open_zarr(out / "products.zarr", consolidated=False)["v"].values.tolist() == [2.0] * 3
        assert [p.name for p in folder.run_dir.iterdir()] == ["lock"]
        # a folder may replace a file of ours and the other way round
        folder.write_bytes("x", b"file")
        with folder.write("x") as tmp:
            tmp.mkdir()
        assert (out / "x").is_dir()


def test_signals_are_held_during_a_commit() -> None:
    # Python's own Ctrl-C handler, whatever an earlier test in this worker process left behind
    # (the full suite once ran this after a test that had SIGINT ignored: no KeyboardInterrupt)
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    seen = []
    try:
        with pytest.raises(KeyboardInterrupt):
            with signals_held():
                os.kill(os.getpid(), signal.SIGINT)
                seen.append("after the signal, still inside")
    finally:
        signal.signal(signal.SIGINT, previous)
    assert seen == ["after the signal, still inside"]


def test_the_journal_is_only_written_when_needed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    journals = []
    real = commit_module.write_journal
    monkeypatch.setattr(
        "ensml.data.outputs.folder.write_journal", lambda *a: journals.append(len(a[2])) or real(*a)
    )
    with OutputFolder.open(tmp_path / "out", "postprocess") as folder:
        folder.write_bytes("a.nc", b"1")  # a new file: one atomic rename
        folder.write_bytes("a.nc", b"2")  # a file replacing one: still one atomic rename
        with folder.write("s.zarr") as tmp:
            tmp.mkdir()
        with folder.write("s.zarr") as tmp:  # a folder replacing one: two renames
            tmp.mkdir()
    assert journals == [1]


def test_a_users_file_that_appears_during_the_run_is_not_replaced(tmp_path: Path) -> None:
    out = tmp_path / "out"
    evaluate(out, "run 1")
    before = state(out)
    with pytest.raises(EnsmlError) as info:
        with OutputFolder.open(out, "evaluate", whole=True) as folder:
            folder.write_text("scores.csv", "run 2")
            folder.write_text("new.md", "run 2")
            (out / "new.md").write_text("the user's, made while evaluate ran")
    assert (
        str(info.value) == f"evaluate: out_dir {out}: new.md exists and ensml did not write it; move it away"
    )
    assert state(out) == {**before, str(out / "new.md"): state(out)[str(out / "new.md")]}
    assert (out / "new.md").read_text() == "the user's, made while evaluate ran"


def test_a_closed_folder_writes_nothing(tmp_path: Path) -> None:
    with OutputFolder.open(tmp_path / "out", "evaluate") as folder:
        pass
    with pytest.raises(EnsmlError) as info:
        folder.write_text("a.md", "late")
    assert str(info.value) == f"evaluate: out_dir {tmp_path}/out is closed; open it again to write"
    with pytest.raises(ValueError, match="kind must be 'file' or 'dir'"):
        folder.reserve(["a"], kind="link")
