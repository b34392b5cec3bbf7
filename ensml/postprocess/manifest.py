"""The output folder's manifest: what was produced from what, so that each output exists once.

``manifest.jsonl`` holds one JSON record per work unit and line; the last record of a key wins.
A record says what an output was made from (the input's path, size and mtime, the checkpoints'
SHA-256, a hash of the options), its path and the SHA-256 that ``--verify`` compares (a zarr
region's data checksum), or why its input failed. Whether a file is still as written (its size
and mtime) is the output folder's ledger's to say, not recorded here a second time.
Records are appended and fsync'ed as units finish, so a run killed at any moment keeps every
record of the outputs it completed; a line cut short by the kill is ignored, and an append that
fails (a full disk) leaves the file as it was. At the end of a run the file is rewritten with one
line per key.

The manifest is post-processing's own record, written through its output folder
(:mod:`ensml.data.outputs`): the run reserves it in the folder's ledger before appending, and the
rewrite is staged and renamed like every output. The folder's lock keeps two runs apart. The
checks of what is current live here too: a zarr store's id and a region's checksum.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import xarray as xr

from ensml.data.outputs import STATE_DIR, Ledger, OutputFolder, write_error
from ensml.errors import EnsmlError
from ensml.names import INIT_TIME
from ensml.predictions import file_sha256

MANIFEST = "manifest.jsonl"
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


class Manifest:
    """Records of an output folder, keyed by work unit.

    Parameters
    ----------
    out_dir
        The output folder as the user named it (for messages and :attr:`path`).
    folder
        The run's open output folder: the manifest is reserved in it, to append and rewrite.
        None to read only (a dry run).
    """

    def __init__(self, out_dir: Path, folder: OutputFolder | None = None) -> None:
        self.path = Path(out_dir) / MANIFEST
        self.folder = folder
        self._file = folder.reserve([MANIFEST])[0] if folder is not None else self.path
        self.records: dict[str, dict[str, Any]] = {}
        self.skipped_lines = 0
        self._read_ledger: Ledger | None = None
        if self._file.is_file():
            for line in self._file.read_text(errors="replace").splitlines():
                try:
                    record = json.loads(line)
                    self.records[str(record["key"])] = record
                except (ValueError, KeyError, TypeError):
                    self.skipped_lines += 1  # cut short by a kill mid-write

    def append(self, record: Mapping[str, Any]) -> None:
        """Add ``record`` durably (one line, flushed and fsync'ed), or leave the file as it was.

        Raises
        ------
        EnsmlError
            ``postprocess: cannot write <out_dir>/manifest.jsonl: no space left on device`` (or
            another reason) when the line cannot be written whole.
        """
        if self.folder is None:
            raise EnsmlError(f"postprocess: cannot write {self.path}: the manifest was opened to read")
        line = json.dumps(record, sort_keys=True, default=str).encode() + b"\n"
        try:
            _append_whole(self._file, line)
        except OSError as err:
            raise write_error("postprocess", self.path, err) from None
        self.records[str(record["key"])] = dict(record)

    def compact(self) -> None:
        """Rewrite the file with the last record of each key, through the folder (staged,
        renamed into place)."""
        if self.folder is None or not (self.records or self._file.exists()):
            return
        text = "".join(
            json.dumps(self.records[k], sort_keys=True, default=str) + "\n" for k in sorted(self.records)
        )
        self.folder.write_text(MANIFEST, text)

    def is_current(
        self, key: str, identity: Mapping[str, Any], output: str | None = None, verify: bool = False
    ) -> bool:
        """Whether ``key``'s output is complete and was made from exactly ``identity``.

        A netCDF output (``output``: its name in the folder) must also be recorded by the
        folder's ledger as postprocess's and unchanged since (and, with ``verify``, have the
        recorded SHA-256); a zarr region (``output`` None) is checked against its store by the
        caller.
        """
        rec = self.records.get(key)
        if rec is None or rec.get("status") != "done":
            return False
        if any(rec.get(k) != identity.get(k) for k in IDENTITY_KEYS):
            return False
        if output is None:  # a zarr region
            return True
        if not self._ledger().written(output, "postprocess"):
            return False
        return not verify or file_sha256(self.path.parent / output) == rec.get("output_sha256")

    def _ledger(self) -> Ledger:
        """The output folder's ledger: the run's, or read once (a dry run)."""
        if self.folder is not None:
            return self.folder.ledger
        if self._read_ledger is None:
            self._read_ledger = Ledger.load(self.path.parent / STATE_DIR)
        return self._read_ledger


def _append_whole(path: Path, line: bytes) -> None:
    """Append ``line`` to ``path`` and fsync, all of it or nothing (a file this call created and
    could not fill is removed): a failed append never leaves a partial line or a 0-byte file."""
    created = not os.path.lexists(path)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    try:
        size = os.fstat(fd).st_size
        try:
            data = memoryview(line if size == 0 or _ends_with_newline(path) else b"\n" + line)
            while data:
                data = data[os.write(fd, data) :]
            os.fsync(fd)
        except BaseException:
            os.ftruncate(fd, size)
            if created:  # safe: the manifest (postprocess's own record) did not exist before this call
                os.unlink(path)
            raise
    finally:
        os.close(fd)


def _ends_with_newline(path: Path) -> bool:
    """Whether the non-empty file ``path`` ends with a newline (else a kill cut its last line)."""
    with open(path, "rb") as f:
        f.seek(-1, os.SEEK_END)
        return f.read(1) == b"\n"


def zarr_store_id(store: Path, inits: np.ndarray, names: Sequence[str]) -> str | None:
    """The id of ``store`` if it exists with exactly these inits and data variables, else None."""
    if not store.is_dir():
        return None
    try:
        with xr.open_zarr(store) as ds:
            same = np.array_equal(ds[INIT_TIME].values, np.asarray(inits, dtype="datetime64[ns]"))
            if same and sorted(map(str, ds.data_vars)) == sorted(names):
                return ds.attrs.get("ensml_store_id")
    except Exception:  # unreadable or half-created: rebuild it
        return None
    return None


def data_sha256(ds: xr.Dataset) -> str:
    """Hex SHA-256 of the data variables' float32 bytes (name order): a zarr region's checksum."""
    digest = hashlib.sha256()
    for name in sorted(map(str, ds.data_vars)):
        digest.update(name.encode())
        digest.update(np.ascontiguousarray(ds[name].values, dtype=np.float32).tobytes())
    return digest.hexdigest()
