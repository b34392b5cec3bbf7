"""``ensml`` runs as subprocesses (signals need a process of their own) and what they print."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest


def start(args: list[str], cwd: Path, env: dict[str, str] | None = None) -> subprocess.Popen:
    """``python -m ensml.cli.main *args`` in its own session (its process group: a terminal's)."""
    return subprocess.Popen(
        [sys.executable, "-m", "ensml.cli.main", *args],
        cwd=cwd,
        env=env,
        start_new_session=True,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def finish(proc: subprocess.Popen, timeout: float = 120) -> tuple[int, str, str]:
    """Exit status, stdout and stderr; a run still going after ``timeout`` s hung: killed, failed."""
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, err = proc.communicate()
        pytest.fail(f"ensml hung ({timeout} s): {err[-2000:]}")
    return proc.returncode, out, err


def last_line(out: str, err: str) -> str:
    """The one line that ends a stopped run; no traceback, nothing else but progress lines."""
    assert "Traceback" not in out + err, err
    lines = err.strip().splitlines()
    assert lines and lines[-1].startswith("ensml: "), err
    assert all(line.startswith("postprocess: ") for line in lines[:-1]), err
    return lines[-1]


def wait_for_records(manifest: Path, n: int, proc: subprocess.Popen, timeout: float = 120.0) -> None:
    """Until ``manifest`` holds ``n`` records (the run is under way and can be stopped)."""
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if manifest.is_file() and len(manifest.read_text().splitlines()) >= n:
            return
        if proc.poll() is not None:
            pytest.fail(f"the run ended before it could be stopped: {proc.communicate()}")
        time.sleep(0.02)
    pytest.fail(f"no {n} units done in {timeout} s")


def wait_session_gone(pgid: int, timeout: float = 60.0) -> None:
    """Workers orphaned by a stopped client end on their own (they watch their parent)."""
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if not [p for p in psutil.process_iter(["pid"]) if _pgid(p.pid) == pgid]:
            return
        time.sleep(0.2)
    os.killpg(pgid, signal.SIGKILL)
    pytest.fail("workers outlived their client by a minute")


def _pgid(pid: int) -> int | None:
    try:
        return os.getpgid(pid)
    except OSError:
        return None


def archive_year(tiny_data: dict[str, Path], tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Every init of the tiny year, a file each (122): a run long enough to stop half-way."""
    from ensml.data.archive import archive

    out = tmp_path_factory.mktemp("year")
    archive(str(tiny_data["forecast"]), str(out))
    return out
