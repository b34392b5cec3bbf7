"""The ledger's change log stays bounded in a long run, and ``Ledger.written`` answers for a file."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from ensml.data.outputs import Ledger, OutputFolder
from ensml.data.outputs import ledger as ledger_module
from ensml.data.outputs.ledger import LEDGER, LOG, Entry, utc_now

pytestmark = pytest.mark.timeout(60)


def _entry(i: int) -> Entry:
    return Entry("file", "postprocess", "done", "run", utc_now(), size=i, mtime_ns=i)


def test_the_log_is_folded_into_the_snapshot_past_twice_the_live_entries(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(ledger_module, "LOG_MARGIN", 10)
    state = tmp_path / ".ensml"
    state.mkdir()
    ledger = Ledger.load(state)
    lines = []
    for i in range(200):  # five names rewritten over and over: the live entries stay five
        ledger.change([(f"out/{i % 5}.nc", _entry(i))], durable=i % 2 == 0)
        log = state / LOG
        lines.append(len(log.read_bytes().splitlines()) if log.exists() else 0)
    assert max(lines) <= 2 * 5 + 10 + 1 and (state / LEDGER).exists()
    assert Ledger.load(state).entries == ledger.entries
    assert sorted(os.listdir(state)) in ([LEDGER], [LEDGER, LOG])  # no temporary left


def test_a_compaction_that_fails_keeps_every_change_in_the_log(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(ledger_module, "LOG_MARGIN", 0)

    def full(*args: object, **kwargs: object) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(ledger_module, "write_atomic", full)
    state = tmp_path / ".ensml"
    state.mkdir()
    ledger = Ledger.load(state)
    entries = [_entry(i) for i in range(6)]
    for entry in entries:
        ledger.change([("a.nc", entry)])
    assert not (state / LEDGER).exists()
    assert Ledger.load(state).entries == {"a.nc": entries[-1]} == ledger.entries


def test_written_is_the_commands_unchanged_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    with OutputFolder.open("out", "postprocess") as folder:
        folder.write_bytes("a.nc", b"first")
        folder.write_bytes("sub/b.nc", b"second")
        folder.reserve(["c.nc"])
        ledger = folder.ledger
        assert ledger.written("a.nc", "postprocess") and ledger.written("./sub/b.nc", "postprocess")
        assert not ledger.written("a.nc", "evaluate")  # another command's
        assert not ledger.written("c.nc", "postprocess")  # reserved, not written
        assert not ledger.written("sub", "postprocess")  # a parent folder, not a file
        assert not ledger.written("d.nc", "postprocess")  # not in the ledger
    read = Ledger.load(tmp_path / "out" / ".ensml")
    assert read.written("a.nc", "postprocess")
    (tmp_path / "out" / "a.nc").write_bytes(b"changed by the user")
    (tmp_path / "out" / "sub" / "b.nc").unlink()
    assert not read.written("a.nc", "postprocess") and not read.written("sub/b.nc", "postprocess")
