"""One run per folder (a real second process), released by SIGKILL; only dead runs' staging swept."""

from __future__ import annotations

import fcntl
import os
import signal
import socket
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from ensml.data.outputs import OutputFolder
from ensml.errors import EnsmlError
from tests.data.outputs_sandbox import REPO, make_sandbox, snapshot

pytestmark = pytest.mark.timeout(120)


def hold(out: Path, command: str, then: str = "") -> subprocess.Popen:
    """A process that opens ``out`` for ``command``, runs ``then``, says ``ready`` and waits."""
    code = f"""
        import sys, time
        from ensml.data.outputs import OutputFolder
        folder = OutputFolder.open({str(out)!r}, {command!r})
        {then}
        print("ready", folder.run_id, flush=True)
        time.sleep(600)
    """
    proc = subprocess.Popen(
        [sys.executable, "-c", textwrap.dedent(code)],
        env={**os.environ, "PYTHONPATH": str(REPO)},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    line = proc.stdout.readline()
    assert line.startswith("ready"), proc.stderr.read()
    proc.run_id = line.split()[1]
    return proc


def kill(proc: subprocess.Popen) -> None:
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=30)


@pytest.mark.slow
def test_a_second_run_is_refused_until_the_first_is_killed(tmp_path: Path) -> None:
    out = tmp_path / "out"
    first = hold(out, "postprocess", then="folder.write_bytes('a.nc', b'product')")
    try:
        with pytest.raises(EnsmlError) as info:
            OutputFolder.open(out, "evaluate")
        message = str(info.value)
        started = message.split("started ")[1].split(")")[0]
        assert message == (
            f"evaluate: out_dir {out} is in use by ensml postprocess (pid {first.pid} on "
            f"{socket.gethostname()}, started {started}); wait for it to finish or name another folder"
        )
    finally:
        kill(first)
    # the kernel dropped the lock with the process: no stale lock
    with OutputFolder.open(out, "postprocess") as folder:
        assert (out / "a.nc").read_bytes() == b"product"
        assert sorted(p.name for p in (out / ".ensml" / "staging").iterdir()) == [folder.run_id]


def test_staging_of_dead_runs_is_swept_and_nothing_else(tmp_path: Path) -> None:
    home = make_sandbox(tmp_path / "home", tmp_path / "elsewhere")
    out = home / "out"
    with OutputFolder.open(out, "evaluate") as folder:
        folder.write_text("scores.md", "x")
    # the user's files inside the output folder, named like the temporaries of old
    make_sandbox(out / "mine", tmp_path / "elsewhere2")
    (out / ".scores.md.0123456789ab.tmp").mkdir()
    (out / ".scores.md.0123456789ab.tmp" / "x").write_text("the user's hidden folder")
    staging = out / ".ensml" / "staging"
    dead = staging / "20260101T000000Z-0badc0de"
    (dead / "w-123").mkdir(parents=True)
    (dead / "w-123" / "scores.md").write_text("half written")
    (dead / "lock").touch()
    no_lock = staging / "20260101T000000Z-00000001"  # killed between mkdir and lock
    no_lock.mkdir()
    odd = staging / "not-a-run-id"
    odd.mkdir()
    live = staging / "20260101T000000Z-11111111"
    live.mkdir()
    (live / "lock").touch()
    # a live run elsewhere (a process that marks its staging folder)
    marker = subprocess.Popen(
        [
            sys.executable,
            "-c",
            textwrap.dedent(f"""
            import fcntl, os, sys, time
            fd = os.open({str(live / "lock")!r}, os.O_RDWR)
            fcntl.flock(fd, fcntl.LOCK_EX)
            print("ready", flush=True)
            time.sleep(600)
        """),
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert marker.stdout.readline().strip() == "ready"
        before = snapshot(tmp_path, skip=(out / ".ensml",))
        with OutputFolder.open(out, "evaluate") as folder:
            left = sorted(p.name for p in staging.iterdir())
            assert left == sorted([folder.run_id, live.name, odd.name])
        assert snapshot(tmp_path, skip=(out / ".ensml",)) == before
    finally:
        kill(marker)


def test_the_staging_mark_is_held_while_open(tmp_path: Path) -> None:
    with OutputFolder.open(tmp_path / "out", "evaluate") as folder:
        fd = os.open(folder.run_dir / "lock", os.O_RDONLY)
        try:
            with pytest.raises(BlockingIOError):
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        finally:
            os.close(fd)
    assert not folder.run_dir.exists()


@pytest.mark.slow
def test_a_killed_runs_temporaries_go_with_the_next_run(tmp_path: Path) -> None:
    out = tmp_path / "out"
    proc = hold(
        out, "evaluate", then="w = folder.write('big.nc'); tmp = w.__enter__(); tmp.write_bytes(b'partial')"
    )
    kill(proc)
    staged = list((out / ".ensml" / "staging").rglob("*big.nc"))
    assert [p.read_bytes() for p in staged] == [b"partial"]
    assert not (out / "big.nc").exists()
    with OutputFolder.open(out, "evaluate") as folder:
        assert not list((out / ".ensml" / "staging").rglob("*big.nc"))
        assert folder.ledger.entries == {}
