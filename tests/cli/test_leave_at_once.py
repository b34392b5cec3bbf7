"""The console script after a signal: the process ends with the signal's status as soon as the
verb has cleaned up and said its line, whatever a library left running; other statuses go
through the interpreter's usual shutdown."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tests.cli.process import cli_env

pytestmark = pytest.mark.timeout(120)

# A stand-in for a verb stopped by a signal (or ending with STATUS): it leaves a thread that
# never ends and a child process that never ends, says its line (buffered: stdout is a pipe),
# and returns STATUS to the console script.
SCRIPT = """
import atexit, multiprocessing, os, sys, threading, time
from pathlib import Path
import ensml.cli.main as cli

def sleep_forever():
    while True:
        time.sleep(1)

def stopped_verb():
    threading.Thread(target=threading.Event().wait).start()
    child = multiprocessing.get_context("spawn").Process(target=sleep_forever)
    child.start()
    Path("child").write_text(str(child.pid))
    atexit.register(lambda: Path("atexit").write_text("ran"))
    if STATUS < 128:
        threading.Timer(0.5, child.terminate).start()
    print("ensml: the verb's last line")
    return STATUS

if __name__ == "__main__":
    cli.main = stopped_verb
    cli.console()
"""


def _run(tmp_path: Path, status: int, thread: str = "threading.Event().wait") -> subprocess.CompletedProcess:
    """Run the stand-in with ``status``; its thread runs ``thread`` (by default, forever)."""
    script = tmp_path / "stopped.py"
    text = textwrap.dedent(SCRIPT).replace("STATUS", str(status)).replace("threading.Event().wait", thread)
    script.write_text(text)
    cmd = [sys.executable, str(script)]
    return subprocess.run(cmd, cwd=tmp_path, env=cli_env(), capture_output=True, text=True, timeout=60)


def _alive(pid: int) -> bool:
    """Whether ``pid`` runs (a zombie, dead but not yet reaped by init, counts as ended)."""
    stat = Path(f"/proc/{pid}/stat")
    try:
        return stat.read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except (FileNotFoundError, ProcessLookupError, IndexError):
        return False


@pytest.mark.parametrize("status", [130, 143])
def test_after_a_signal_the_process_ends_at_once_with_its_line(tmp_path: Path, status: int) -> None:
    done = _run(tmp_path, status)
    assert done.returncode == status, done.stderr[-2000:]
    assert done.stdout.strip().splitlines()[-1] == "ensml: the verb's last line"
    assert not _alive(int((tmp_path / "child").read_text())), "the child process was left running"
    assert not (tmp_path / "atexit").exists(), "the interpreter's shutdown ran"


def test_other_statuses_end_through_the_usual_shutdown(tmp_path: Path) -> None:
    """It waits for the threads (here one that ends after 0.5 s; the child is stopped then too)
    and runs the atexit hooks."""
    done = _run(tmp_path, 1, thread="lambda: time.sleep(0.5)")
    assert done.returncode == 1, done.stderr[-2000:]
    assert done.stdout.strip().splitlines()[-1] == "ensml: the verb's last line"
    assert (tmp_path / "atexit").read_text() == "ran"
