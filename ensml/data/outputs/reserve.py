"""Outputs written by someone other than the run: workers, other hosts, libraries.

Post-processing workers write products while the run (the client) holds the folder's lock;
Lightning writes ``checkpoints/``, ``metrics.csv``, ``hparams.yaml`` and ``config.yaml`` into
fit's run folder itself. The run :meth:`~Reservations.reserve` s the names first, so that a
kill at any moment leaves only files the ledger knows, and :meth:`~Reservations.record` s (or
:meth:`~Reservations.adopt` s) them when they are written.
"""

from __future__ import annotations

import os
from abc import abstractmethod
from collections.abc import Iterable
from pathlib import Path

from ensml.data.outputs.check import check_names
from ensml.data.outputs.ledger import Entry, Ledger
from ensml.data.outputs.names import distinct
from ensml.data.outputs.staging import Staging, Writes, put_in_place, ready_path, run_dir
from ensml.errors import EnsmlError


class Reservations(Writes):
    """The part of :class:`ensml.data.outputs.OutputFolder` for writers that are not the run."""

    root: Path
    display: str
    command: str
    run_id: str
    ledger: Ledger

    @abstractmethod
    def _resolve(self, name: str) -> tuple[str, Path]:
        """The ledger name and path of ``name`` (an error names the command)."""

    @abstractmethod
    def _check_open(self) -> None:
        """Raise unless the folder is open."""

    @abstractmethod
    def _reserve(self, keys: dict[str, str]) -> None:
        """Record ``keys`` (name → kind) as reserved by this run; create their parent folders."""

    @abstractmethod
    def _entry(
        self, key: str, state: str, command: str | None = None, run: str | None = None, kind: str = "file"
    ) -> Entry:
        """A ledger entry for ``key`` in ``state`` (``done``: with its signature from disk)."""

    @abstractmethod
    def _log(self, changes: list[tuple[str, Entry | None]], durable: bool = True) -> None:
        """Apply ``changes`` to the ledger (fsync'ed if ``durable``)."""

    def staging(self, names: Iterable[str]) -> Staging:
        """What a worker process needs to write ``names`` for this run (picklable, no lock).

        Every name must be reserved by this run first (:meth:`reserve`); the worker can write
        those and no other, so a mistake in the work's plan cannot reach a user's file. Record
        the names when the results come back (:meth:`record`). The staging folder lives as
        long as this run has the folder open.

        Raises
        ------
        EnsmlError
            A name is not reserved by this command (nor inside a folder it reserved).
        """
        self._check_open()
        keys = [self._reserved(name, "workers write them")[0] for name in names]
        return Staging(str(self.root), self.run_id, self.command, self.display, frozenset(keys))

    def reserve(self, names: Iterable[str], kind: str = "file") -> list[Path]:
        """Record ``names`` as this run's before another process or a library writes them.

        A kill after a worker's rename then leaves a file the ledger knows. Missing parent
        folders are created. ``kind`` is ``file``, or ``dir`` for a folder the writer fills (a
        zarr store, Lightning's ``checkpoints``): it owns everything inside. Reserving an
        output this command wrote before (unchanged) lets a writer change it in place, as
        post-processing does with a zarr store's regions. Returns the paths.

        Raises
        ------
        EnsmlError
            The first name that may not be written: not a relative name inside the folder, a
            user's file, another command's output, or changed since ensml wrote it.
        """
        if kind not in ("file", "dir"):
            raise ValueError(f"kind must be 'file' or 'dir', got {kind!r}")
        self._check_open()
        claimed = check_names(self.ledger, self.root, self.command, self.display, names)
        self._reserve({key: kind for key, _ in claimed})
        return [path for _, path in claimed]

    def record(self, names: Iterable[str]) -> None:
        """Record reserved ``names``, now written by another process, as done (size, mtime
        and, below 4 MiB, SHA-256, from the file).

        Raises
        ------
        EnsmlError
            A name was not reserved by this command, or was not written.
        """
        self._record(names, missing_ok=False)

    def adopt(self, names: Iterable[str]) -> None:
        """Record what a library wrote itself into reserved names (Lightning's ``config.yaml``,
        ``metrics.csv``, ``checkpoints``) as done; a reserved name it did not write is dropped.
        Call it once the library is done with them: a ``done`` output that changes is no
        longer ensml's to replace.

        Raises
        ------
        EnsmlError
            A name was not reserved by this command (nor lies in a folder it reserved).
        """
        self._record(names, missing_ok=True)

    def place(self, names: Iterable[str]) -> None:
        """Move outputs that workers held (:meth:`Staging.hold`) into place and record them.

        Each is renamed from the run's staging folder onto its name (replacing this command's
        previous output) and recorded as done, in this process, which holds the folder's lock:
        an output is in place only once it is recorded.

        Raises
        ------
        EnsmlError
            A name was not reserved by this command, or no worker held it; a rename that fails
            (one line naming the path).
        """
        self._check_open()
        names = list(names)
        where = run_dir(self.root, self.run_id)
        for name in names:
            key, path, _ = self._reserved(name, "writing them")
            ready = ready_path(where, key)
            if not os.path.lexists(ready):
                raise EnsmlError(
                    f"{self.command}: out_dir {self.display}: {key} was reserved but not written"
                )
            put_in_place(ready, path, where, self.command, Path(self.display) / key)
        self._record(names, missing_ok=False)

    def _reserved(self, name: str, before: str) -> tuple[str, Path, str]:
        """The ledger name, path and owning entry's name of ``name``, which this run must have
        reserved (itself or a folder above it), else raise."""
        key, path = self._resolve(name)
        owner = self.ledger.owner(key)
        if owner is None or owner[1].command != self.command or owner[1].state != "reserved":
            raise EnsmlError(
                f"{self.command}: out_dir {self.display}: {key} was not reserved by this run; "
                f"reserve names before {before}"
            )
        return key, path, owner[0]

    def _record(self, names: Iterable[str], missing_ok: bool) -> None:
        self._check_open()
        changes: list[tuple[str, Entry | None]] = []
        try:
            keys = distinct(names)
        except EnsmlError as exc:
            raise EnsmlError(f"{self.command}: {exc}") from None
        for name in keys:
            key, path, owner = self._reserved(name, "writing them")
            if not os.path.lexists(path):
                if missing_ok and owner == key:
                    changes.append((key, None))
                    continue
                raise EnsmlError(
                    f"{self.command}: out_dir {self.display}: {key} was reserved but not written"
                )
            changes.append((owner, self._entry(owner, "done")))
        self._log(changes, durable=False)


__all__ = ["Reservations"]
