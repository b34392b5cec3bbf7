"""Locks: one run per output folder, and a mark on each live run's staging folder.

Both are ``flock`` locks on files inside ``.ensml``. The kernel drops them when the process
dies, SIGKILL included, so a killed run never leaves a stale lock; on NFS, Linux maps
``flock`` to byte-range locks that other hosts see. File descriptors are not inherited across
``exec`` (Python opens them close-on-exec).
"""

from __future__ import annotations

import fcntl
import json
import os
import re
import socket
import uuid
from datetime import datetime, timezone
from pathlib import Path

from ensml.data.outputs.errors import reason
from ensml.data.outputs.ledger import utc_now
from ensml.errors import EnsmlError

LOCK = "lock"
#: A staging folder's name: the run id, ``<UTC start>-<8 hex>``; nothing else is ever swept.
RUN_ID = re.compile(r"^[0-9]{8}T[0-9]{6}Z-[0-9a-f]{8}$")


def new_run_id() -> str:
    """A run id: its UTC start time and 32 random bits, e.g. ``20261125T073000Z-3f2a9c1b``."""
    return f"{datetime.now(timezone.utc):%Y%m%dT%H%M%SZ}-{uuid.uuid4().hex[:8]}"


def lock_folder(state_dir: Path, command: str, run_id: str, display: str) -> int:
    """Take the folder's lock for this run; return its file descriptor (close it to release).

    Raises
    ------
    EnsmlError
        ``<command>: out_dir <display> is in use by ensml <command> (pid …, host …, started …)``
        when another run holds it; or why the lock file cannot be opened or locked.
    """
    path = state_dir / LOCK
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    except OSError as err:
        raise EnsmlError(f"{command}: out_dir {display}: cannot open lock {path}: {reason(err)}") from None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        holder = _holder(fd)
        os.close(fd)
        raise EnsmlError(
            f"{command}: out_dir {display} is in use by {holder}; "
            "wait for it to finish or name another folder"
        ) from None
    except OSError as err:  # e.g. ENOLCK on a file system without locks
        os.close(fd)
        raise EnsmlError(f"{command}: out_dir {display}: cannot lock {path}: {reason(err)}") from None
    me = {
        "pid": os.getpid(),
        "host": socket.gethostname(),
        "command": command,
        "started": utc_now(),
        "run": run_id,
    }
    try:
        os.ftruncate(fd, 0)
        os.pwrite(fd, json.dumps(me).encode() + b"\n", 0)
    except OSError:
        pass  # only the description of the holder is lost, not the lock
    return fd


def _holder(fd: int) -> str:
    """Who holds the lock, from what it wrote into the lock file."""
    try:
        info = json.loads(os.pread(fd, 4096, 0))
        return f"ensml {info['command']} (pid {info['pid']} on {info['host']}, started {info['started']})"
    except (OSError, ValueError, KeyError, TypeError):
        return "another ensml run"  # it has the lock but has not yet written who it is


def lock_staging(run_dir: Path) -> int:
    """Mark ``run_dir`` (just created by this run) live; return the descriptor holding the mark."""
    fd = os.open(run_dir / LOCK, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        os.close(fd)
        raise
    return fd


def is_dead(run_dir: Path) -> bool:
    """Whether no live process marks ``run_dir``: its lock file is missing or can be locked."""
    try:
        fd = os.open(run_dir / LOCK, os.O_RDONLY)
    except FileNotFoundError:
        return True  # killed between creating the folder and locking it
    except OSError:
        return False  # cannot tell: leave it
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        return False
    finally:
        os.close(fd)  # also drops the lock just taken
    return True


def dead_runs(staging: Path) -> list[Path]:
    """The staging folders under ``staging`` of runs that are over: named like a run id, real
    folders (not links), and not marked live. Anything else is left alone."""
    if not staging.is_dir():
        return []
    found = [
        p
        for p in staging.iterdir()
        if RUN_ID.match(p.name) and p.is_dir() and not p.is_symlink() and is_dead(p)
    ]
    return sorted(found)


__all__ = ["LOCK", "RUN_ID", "dead_runs", "is_dead", "lock_folder", "lock_staging", "new_run_id"]
