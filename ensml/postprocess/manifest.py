"""The output folder's manifest and lock: what was produced from what, so that each output exists once.

``manifest.jsonl`` holds one JSON record per line; the last record of a key wins. A record says
what an output was made from (the input's path, size and mtime, the checkpoints' SHA-256, a
hash of the options) and what it is (path, size, mtime, SHA-256), or why its input failed.
Records are appended and fsync'ed as units finish, so a run killed at any moment keeps every
record of the outputs it completed; a line cut short by the kill is ignored. At the end of a
run the file is rewritten (atomically) with one line per key.

Two runs on one folder: ``.postprocess.lock`` is held with ``flock`` for the whole run; a second
run stops at once with a one-line error naming the first. The kernel releases the lock when the
holder dies, even by SIGKILL, so a killed run never leaves a stale lock behind.
"""

from __future__ import annotations

import fcntl
import json
import os
import socket
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from ensml.data.writers import atomic_path
from ensml.errors import EnsmlError
from ensml.predictions import file_sha256

MANIFEST = "manifest.jsonl"
LOCK = ".postprocess.lock"
# What must be unchanged for an output to count as current.
IDENTITY_KEYS = ("input", "input_size", "input_mtime_ns", "checkpoints", "options")


def input_identity(path: str | Path) -> dict[str, Any]:
    """Path, size and modification time of an input file."""
    stat = Path(path).stat()
    return {
        "input": str(Path(path).resolve()),
        "input_size": stat.st_size,
        "input_mtime_ns": stat.st_mtime_ns,
    }


@contextmanager
def output_lock(out_dir: Path) -> Iterator[None]:
    """Hold the folder's lock for the duration, or raise naming the run that holds it."""
    path = out_dir / LOCK
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    except OSError as err:
        raise EnsmlError(f"cannot write to output folder {out_dir}: {err.strerror}") from None
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(fd, 512, 0).decode(errors="replace").strip() or "another process"
            raise EnsmlError(
                f"output folder {out_dir} is being written by another ensml postprocess ({holder}); "
                "wait for it to finish or use another out_dir"
            ) from None
        stamp = datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"pid {os.getpid()} on {socket.gethostname()}, started {stamp}\n".encode(), 0)
        yield
    finally:
        os.close(fd)  # releases the lock


class Manifest:
    """Records of an output folder, keyed by work unit."""

    def __init__(self, out_dir: Path) -> None:
        self.path = out_dir / MANIFEST
        self.records: dict[str, dict[str, Any]] = {}
        self.skipped_lines = 0
        if self.path.is_file():
            for line in self.path.read_text(errors="replace").splitlines():
                try:
                    record = json.loads(line)
                    self.records[str(record["key"])] = record
                except (ValueError, KeyError, TypeError):
                    self.skipped_lines += 1  # cut short by a kill mid-write

    def append(self, record: Mapping[str, Any]) -> None:
        """Add ``record`` durably (one line, flushed and fsync'ed)."""
        self.records[str(record["key"])] = dict(record)
        line = json.dumps(record, sort_keys=True, default=str)
        with open(self.path, "a+b") as f:
            f.seek(0, os.SEEK_END)
            if f.tell() and not self._ends_with_newline(f):
                f.write(b"\n")  # after a line cut short, start afresh
            f.write(line.encode() + b"\n")
            f.flush()
            os.fsync(f.fileno())

    @staticmethod
    def _ends_with_newline(f: Any) -> bool:
        f.seek(-1, os.SEEK_END)
        last = f.read(1)
        f.seek(0, os.SEEK_END)
        return last == b"\n"

    def compact(self) -> None:
        """Rewrite the file with the last record of each key, atomically."""
        with atomic_path(self.path) as tmp:
            text = "".join(
                json.dumps(self.records[k], sort_keys=True, default=str) + "\n" for k in sorted(self.records)
            )
            tmp.write_text(text)

    def is_current(self, key: str, identity: Mapping[str, Any], verify: bool = False) -> bool:
        """Whether ``key``'s output is complete and was made from exactly ``identity``.

        A netCDF output must also still have the recorded size and mtime (and, with ``verify``,
        SHA-256); a zarr region is checked against its store by the caller.
        """
        rec = self.records.get(key)
        if rec is None or rec.get("status") != "done":
            return False
        if any(rec.get(k) != identity.get(k) for k in IDENTITY_KEYS):
            return False
        if "output_size" not in rec:  # a zarr region
            return True
        out = Path(rec["output"])
        try:
            stat = out.stat()
        except OSError:
            return False
        if (stat.st_size, stat.st_mtime_ns) != (rec["output_size"], rec["output_mtime_ns"]):
            return False
        return not verify or file_sha256(out) == rec.get("output_sha256")
