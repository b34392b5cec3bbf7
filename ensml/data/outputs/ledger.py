"""The ledger: what ensml wrote in an output folder, so that it touches nothing else.

``<out_dir>/.ensml/ledger.json`` is a snapshot; ``ledger.jsonl`` beside it holds the changes
since, one JSON line each, appended and fsync'ed. A change costs one short append however many
entries the folder holds (10,000 post-processed files would otherwise rewrite a 2 MB file
10,000 times). The snapshot is rewritten (atomically) when a run opens and closes the folder,
and when the log outgrows about twice the live entries (plus :data:`LOG_MARGIN` lines), so a
long run's log stays bounded and each change still costs O(1) on average.
Each change carries a whole entry or its removal, so replaying the log twice gives the same
ledger, and a line cut short by a kill is ignored.

An entry::

    "scores.csv": {"kind": "file", "command": "evaluate", "state": "done",
                   "run": "20261125T073000Z-3f2a9c1b", "time": "2026-11-25T07:30:02Z",
                   "size": 1234, "mtime_ns": 1764055802123456789, "sha256": "…"}

``kind`` is ``file``; ``dir`` (owns everything inside, e.g. a zarr store or ``checkpoints``,
with ``size`` the bytes of its files, ``files`` their number and ``mtime_ns`` the latest);
or ``parent`` (a folder ensml created to hold entries; owns nothing inside). ``state`` is
``reserved`` from before a write starts until it is recorded ``done`` with its signature.
"""

from __future__ import annotations

import dataclasses
import json
import os
import uuid
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from ensml.data.outputs.names import normalise
from ensml.errors import EnsmlError
from ensml.predictions import file_sha256

LEDGER = "ledger.json"
LOG = "ledger.jsonl"
FORMAT = "ensml-ledger"
VERSION = 1
KINDS = ("file", "dir", "parent")
STATES = ("reserved", "done")
#: Files below this size (bytes) get a SHA-256 in the ledger (for audits; ownership uses size+mtime).
SHA256_BELOW = 4 << 20
#: Log lines allowed beyond twice the live entries before a change compacts the ledger.
LOG_MARGIN = 1000


def utc_now() -> str:
    """The time now, UTC, to the second: ``2026-11-25T07:30:02Z``."""
    return datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


@dataclass(frozen=True)
class Entry:
    """One thing ensml wrote (or is about to write) in the folder."""

    kind: str
    command: str
    state: str
    run: str
    time: str
    size: int | None = None  # bytes (of every file, for a dir)
    mtime_ns: int | None = None  # latest modification, ns since the epoch
    files: int | None = None  # dir: number of files inside
    sha256: str | None = None  # file below SHA256_BELOW bytes

    def to_json(self) -> dict[str, Any]:
        return {k: v for k, v in dataclasses.asdict(self).items() if v is not None}

    @classmethod
    def from_json(cls, data: Any) -> Entry:
        """Raise ValueError unless ``data`` is a well-formed entry."""
        if not isinstance(data, dict):
            raise ValueError("an entry is not an object")
        fields = {f.name: f.type for f in dataclasses.fields(cls)}
        unknown = set(data) - set(fields)
        if unknown:
            raise ValueError(f"unknown entry fields {sorted(unknown)}")
        try:
            entry = cls(**data)
        except TypeError:
            missing = [f for f in ("kind", "command", "state", "run", "time") if f not in data]
            raise ValueError(f"an entry lacks {', '.join(missing)}") from None
        strings = (entry.kind, entry.command, entry.state, entry.run, entry.time)
        if not all(isinstance(s, str) for s in strings):
            raise ValueError("kind, command, state, run and time must be text")
        numbers = (entry.size, entry.mtime_ns, entry.files)
        if not all(n is None or (isinstance(n, int) and not isinstance(n, bool)) for n in numbers):
            raise ValueError("size, mtime_ns and files must be integers")
        if entry.kind not in KINDS or entry.state not in STATES:
            raise ValueError(f"kind {entry.kind!r} or state {entry.state!r} is unknown")
        return entry


def signature(path: Path) -> dict[str, Any]:
    """What ownership checks compare: kind, size and mtime (and count, SHA-256 where noted).

    A folder's signature covers its whole tree (symbolic links are not followed), so a file
    added, removed or changed anywhere inside it shows.
    """
    st = path.lstat()
    if not path.is_dir() or path.is_symlink():
        sig: dict[str, Any] = {"kind": "file", "size": st.st_size, "mtime_ns": st.st_mtime_ns}
        if st.st_size < SHA256_BELOW and path.is_file():
            sig["sha256"] = file_sha256(path)
        return sig
    size, files, latest = 0, 0, st.st_mtime_ns
    for dirpath, dirnames, filenames in os.walk(path):
        for name in dirnames + filenames:
            s = os.lstat(os.path.join(dirpath, name))
            latest = max(latest, s.st_mtime_ns)
            if name in filenames:
                size, files = size + s.st_size, files + 1
    return {"kind": "dir", "size": size, "mtime_ns": latest, "files": files}


def unchanged(entry: Entry, path: Path) -> bool:
    """Whether ``path`` is still as ensml recorded it in ``entry`` (same size and mtime; for a
    folder, the same bytes, number of files and latest mtime). A path that is gone is unchanged:
    nothing of the user's is there to harm. A ``parent`` entry owns only the folder itself."""
    if entry.kind == "parent":
        return True
    try:
        st = path.lstat()
    except FileNotFoundError:
        return True  # gone: nothing of the user's can be harmed
    if (entry.kind == "dir") != (path.is_dir() and not path.is_symlink()):
        return False
    if entry.kind == "file":
        return (st.st_size, st.st_mtime_ns) == (entry.size, entry.mtime_ns)
    sig = signature(path)
    return (sig["size"], sig["mtime_ns"], sig["files"]) == (entry.size, entry.mtime_ns, entry.files)


def fsync_dir(path: Path) -> None:
    """Make a rename or a new name in the folder ``path`` durable."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_atomic(path: Path, data: bytes, scratch: Path) -> None:
    """Write ``data`` to ``path`` whole or not at all: a temporary in ``scratch`` (same file
    system), fsync'ed, renamed into place, and the folder fsync'ed."""
    tmp = scratch / f"{path.name}.{uuid.uuid4().hex[:12]}"
    try:
        with open(tmp, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)
    fsync_dir(path.parent)


class Ledger:
    """The entries of one output folder, read from and written to its ``.ensml`` folder."""

    def __init__(self, state_dir: Path, entries: dict[str, Entry] | None = None) -> None:
        self.state_dir = state_dir
        self.entries: dict[str, Entry] = dict(entries or {})
        #: Where a compaction writes its temporary (same file system; default ``state_dir``).
        #: An open folder points it at its run's staging folder, which the next run sweeps.
        self.scratch: Path | None = None
        self._dirty = False  # entries changed in memory only (drop_missing)
        self._logged = 0  # changes in the log on disk
        self._named = False  # the log's name in state_dir fsync'ed by this process

    @classmethod
    def load(cls, state_dir: Path) -> Ledger:
        """Read the snapshot and replay the log (an empty ledger when neither exists).

        Raises
        ------
        EnsmlError
            ``ledger <path> cannot be read (<why>)``: not JSON, another format, an entry that is
            malformed or whose name is not a relative name inside the folder.
        """
        path = state_dir / LEDGER
        ledger = cls(state_dir)
        try:
            if path.exists():
                data = json.loads(path.read_bytes())
                if not isinstance(data, dict) or data.get("format") != FORMAT:
                    raise ValueError(f"not an {FORMAT} file")
                if data.get("version") != VERSION:
                    raise ValueError(f"version {data.get('version')!r}, this ensml reads {VERSION}")
                if not isinstance(data.get("entries"), dict):
                    raise ValueError("no entries")
                for name, raw in data["entries"].items():
                    ledger.entries[ledger._name(name)] = Entry.from_json(raw)
            for name, entry in ledger._log():
                ledger._set(name, entry)
                ledger._logged += 1
        except (ValueError, EnsmlError) as exc:
            raise EnsmlError(f"ledger {path} cannot be read ({exc})") from None
        except OSError as exc:
            raise EnsmlError(f"ledger {path} cannot be read ({exc.strerror or exc})") from None
        return ledger

    @staticmethod
    def _name(name: Any) -> str:
        try:
            ok = isinstance(name, str) and normalise(name) == name
        except EnsmlError:
            ok = False
        if not ok:
            raise ValueError(f"entry name {name!r} is not a relative name inside the folder")
        return name

    def _log(self) -> Iterator[tuple[str, Entry | None]]:
        """The logged changes; a line cut short by a kill (not JSON) is skipped."""
        path = self.state_dir / LOG
        if not path.exists():
            return
        for line in path.read_bytes().splitlines():
            try:
                change = json.loads(line)
            except ValueError:
                continue
            if not isinstance(change, dict) or "name" not in change:
                raise ValueError("a change in the log has no name")
            raw = change.get("entry")
            yield self._name(change["name"]), None if raw is None else Entry.from_json(raw)

    def _set(self, name: str, entry: Entry | None) -> None:
        if entry is None:
            self.entries.pop(name, None)
        else:
            self.entries[name] = entry

    def get(self, name: str) -> Entry | None:
        """The entry of ``name`` itself, or None."""
        return self.entries.get(name)

    def owner(self, name: str) -> tuple[str, Entry] | None:
        """The entry that owns ``name``: its own, or a ``dir`` entry of a folder above it."""
        if name in self.entries:
            return name, self.entries[name]
        parts = name.split("/")
        for i in range(len(parts) - 1, 0, -1):
            above = "/".join(parts[:i])
            entry = self.entries.get(above)
            if entry is not None and entry.kind == "dir":
                return above, entry
        return None

    def written(self, name: str, command: str) -> bool:
        """Whether output ``name`` is recorded as written (``done``) by ``command``, in its own
        ``file`` entry, and is still there and unchanged since (:func:`unchanged`)."""
        name = normalise(name)
        entry = self.entries.get(name)
        if entry is None or (entry.command, entry.state, entry.kind) != (command, "done", "file"):
            return False
        path = self.state_dir.parent / name
        return os.path.lexists(path) and unchanged(entry, path)

    def change(self, changes: Iterable[tuple[str, Entry | None]], durable: bool = True) -> None:
        """Apply ``changes`` (an entry, or None to drop the name) in one append, fsync'ed if
        ``durable``. A reservation must be durable before its write starts; a record after a
        write need not be (lost, its entry stays ``reserved``: still ensml's), which saves an
        fsync per output. When the log has grown past twice the live entries plus
        :data:`LOG_MARGIN` lines it is folded into the snapshot (:meth:`compact`): O(entries)
        once per O(entries) changes, so O(1) per change on average."""
        changes = list(changes)
        if not changes:
            return
        lines = b"".join(
            json.dumps({"name": n, "entry": None if e is None else e.to_json()}, sort_keys=True).encode()
            + b"\n"
            for n, e in changes
        )
        path = self.state_dir / LOG
        with open(path, "ab") as f:
            if f.tell() and not _ends_with_newline(path):
                lines = b"\n" + lines  # after a line cut short by a kill, start afresh
            f.write(lines)
            f.flush()
            if durable:
                os.fsync(f.fileno())
        if durable and not self._named:
            fsync_dir(self.state_dir)  # the log's name, too, must outlive a power cut
            self._named = True
        for name, entry in changes:
            self._set(name, entry)
        self._logged += len(changes)
        if self._logged > 2 * len(self.entries) + LOG_MARGIN:
            try:
                self.compact()
            except OSError:
                pass  # the log still holds every change; the next compaction tries again

    def drop_missing(self) -> list[str]:
        """Forget the entries whose files are gone (nothing left to own); return their names.
        Saved by the next :meth:`compact`."""
        root = self.state_dir.parent
        gone = [n for n in self.entries if not os.path.lexists(root / n)]
        for name in gone:
            del self.entries[name]
        self._dirty = self._dirty or bool(gone)
        return gone

    def compact(self, scratch: Path | None = None) -> None:
        """Write the snapshot (atomically, temporary in ``scratch``, else :attr:`scratch`, else
        ``state_dir``) and empty the log.

        Nothing is written when the snapshot is already current, so that opening a folder on a
        full disk to read or replace costs no space.
        """
        current = (self.state_dir / LEDGER).exists() and not (self.state_dir / LOG).exists()
        if current and not self._dirty:
            return
        data = {
            "format": FORMAT,
            "version": VERSION,
            "entries": {n: self.entries[n].to_json() for n in sorted(self.entries)},
        }
        where = scratch or self.scratch or self.state_dir
        write_atomic(self.state_dir / LEDGER, json.dumps(data, indent=1).encode() + b"\n", where)
        # The snapshot holds every change: a kill before this unlink replays them, harmlessly.
        (self.state_dir / LOG).unlink(missing_ok=True)
        self._dirty, self._logged, self._named = False, 0, False


def _ends_with_newline(path: Path) -> bool:
    with open(path, "rb") as f:
        f.seek(-1, os.SEEK_END)
        return f.read(1) == b"\n"


__all__ = ["LEDGER", "LOG", "Entry", "Ledger", "file_sha256", "signature", "unchanged", "utc_now"]
