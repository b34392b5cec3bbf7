"""The output folder of one run: checked, locked, written through staging, recorded in the ledger."""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path
from types import TracebackType

from ensml.data.outputs.check import check_names, check_out_dir, ownership_problem, read_ledger
from ensml.data.outputs.commit import JOURNAL, Item, Removal, apply, recover, signals_held, write_journal
from ensml.data.outputs.errors import write_error
from ensml.data.outputs.ledger import Entry, Ledger, signature, unchanged, utc_now
from ensml.data.outputs.lock import dead_runs, lock_folder, lock_staging, new_run_id
from ensml.data.outputs.names import STATE_DIR, distinct, normalise, resolve
from ensml.data.outputs.staging import (
    STAGING,
    Staging,
    Writes,
    delete_path,
    discard,
    make_folders,
    put_in_place,
    ready_path,
    run_dir,
    staged,
    undo_folders,
)
from ensml.errors import EnsmlError


class OutputFolder(Writes):
    """An output folder opened by one run of one command: the only way ensml writes outputs.

    Open it with :meth:`open` (which checks, creates and locks it), write with :meth:`write`
    (or :meth:`write_bytes`, :meth:`write_text`, :meth:`write_netcdf`, :meth:`write_zarr`),
    and close it (a ``with`` block). Not thread-safe: one thread of the run uses it; other
    processes write through :meth:`staging`.

    Attributes
    ----------
    root
        The folder's real path.
    command
        The command of this run (``evaluate``, ``postprocess``, …).
    run_id
        This run's id (also its staging folder's name).
    whole
        Whether outputs are committed together at the end (see :meth:`open`).
    disowned
        Names of this command's earlier outputs that were changed by someone else and so kept
        (and dropped from the ledger) rather than removed as stale.
    """

    def __init__(
        self, root: Path, display: str, command: str, run_id: str, ledger: Ledger, whole: bool, fds: list[int]
    ) -> None:
        self.root, self.display, self.command, self.run_id = root, display, command, run_id
        self.ledger, self.whole = ledger, whole
        self.disowned: list[str] = []
        self._fds = fds  # the folder lock, then the mark on this run's staging folder
        self._pending: dict[str, Path] = {}  # whole: staged temporaries by name
        ledger.scratch = run_dir(root, run_id)  # a compaction's temporary: swept if killed
        self._closed = False
        self.created: list[Path] = []  # the folders open() created: a failed run removes them

    @staticmethod
    def check(
        path: str | os.PathLike[str], command: str, *, names: Iterable[str] = (), shared: bool = False
    ) -> Path:
        """Check, without any side effect, that ``command`` may write ``path`` and ``names``.

        See :func:`ensml.data.outputs.check.check_out_dir` for what is refused. Returns the
        folder's real path. Call it before any work, so that a bad out_dir fails in seconds.
        """
        return check_out_dir(path, command, names=names, shared=shared)

    @classmethod
    def open(
        cls,
        path: str | os.PathLike[str],
        command: str,
        *,
        names: Iterable[str] = (),
        shared: bool = False,
        whole: bool = False,
    ) -> OutputFolder:
        """Check, create and lock the output folder ``path`` for a run of ``command``.

        In order: :meth:`check` (``names`` too); create the folder and ``.ensml``; take the
        folder's lock for the run; finish the commit a killed run left half done; remove the
        staging folders of runs that are over (and nothing else); drop ledger entries whose
        files are gone.

        Parameters
        ----------
        path, command, names, shared
            As for :meth:`check`.
        whole
            ``True``: the folder holds one run's results whole. Outputs are staged as they are
            written and renamed into place together when the ``with`` block ends without an
            error, and this command's earlier outputs that this run did not write are removed
            (:meth:`remove_stale`); after an error nothing changes. ``False``: each output is
            renamed into place as soon as it is written (post-processing, checkpoints).

        Raises
        ------
        EnsmlError
            One line: as for :meth:`check`; another run holds the folder (naming its command,
            pid, host and start); or the folder cannot be created.
        """
        display = os.fspath(path)
        real = check_out_dir(path, command, names=names, shared=shared)
        created = make_folders(real, command, display)
        run_id = new_run_id()
        fds: list[int] = []
        try:
            fds.append(lock_folder(real / STATE_DIR, command, run_id, display))
            ledger = read_ledger(real, command, display, shared)  # again, now that no run can change it
            here = run_dir(real, run_id)
            here.mkdir()
            fds.append(lock_staging(here))
            folder = cls(real, display, command, run_id, ledger, whole, fds)
            folder.created = created
            folder._start(names)
        except BaseException as exc:
            shutil.rmtree(run_dir(real, run_id), ignore_errors=True)
            for fd in reversed(fds):
                os.close(fd)
            undo_folders(created)
            if isinstance(exc, OSError):
                raise write_error(command, Path(display) / STATE_DIR, exc) from None
            raise
        return folder

    def _start(self, names: Iterable[str]) -> None:
        """Recover and sweep dead runs, tidy and compact the ledger, check ``names`` again."""
        for dead in dead_runs(self.root / STATE_DIR / STAGING):
            if dead.name != self.run_id:
                with signals_held():
                    command, written, removed = recover(self.root, self.display, self.ledger, dead)
                    done = [c for k in written for c in self._done(k, command, dead.name)]
                    self._log(done + [(k, None) for k in removed], durable=False)
                shutil.rmtree(dead, ignore_errors=True)
        self.ledger.drop_missing()
        self.ledger.compact(self.run_dir)
        check_names(self.ledger, self.root, self.command, self.display, names)

    @property
    def run_dir(self) -> Path:
        """This run's staging folder: every temporary of the run lies inside it."""
        return run_dir(self.root, self.run_id)

    def __enter__(self) -> OutputFolder:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        try:
            if kind is None and self.whole and not self._closed:
                self.commit(remove_stale=True)
        finally:
            self.close(failed=kind is not None)

    def close(self, failed: bool = False) -> None:
        """Discard what is staged and not committed, save the ledger, release the locks.

        A staging folder whose commit could not be undone keeps its journal, for the next run.
        ``failed``: the run stopped with an error (a refusal found after the folder was opened,
        Ctrl-C): if :meth:`open` created the folder and it holds nothing but ``.ensml``, the
        folders it created are removed, so a failed first run leaves no trace.
        """
        if self._closed:
            return
        self._closed = True
        try:
            for tmp in self._pending.values():
                discard(tmp, self.run_dir)
            self._pending.clear()
            try:
                self.ledger.compact(self.run_dir)
            except OSError:
                pass  # the log still holds every change
            if not (self.run_dir / JOURNAL).exists():
                shutil.rmtree(self.run_dir, ignore_errors=True)
            if failed and self.created and os.listdir(self.root) == [STATE_DIR]:
                undo_folders(self.created)  # still locked: no other run is inside
        finally:
            for fd in reversed(self._fds):
                os.close(fd)

    # names and ownership -----------------------------------------------------------------

    def final(self, name: str) -> Path:
        """The real path of output ``name`` (checked: relative, inside the folder, no links).

        Use it to read an output, or to write inside one reserved with :meth:`reserve`.
        """
        return self._resolve(name)[1]

    def _resolve(self, name: str) -> tuple[str, Path]:
        try:
            return resolve(self.root, name)
        except EnsmlError as exc:
            raise EnsmlError(f"{self.command}: {exc}") from None

    def _shown(self, key: str) -> Path:
        return Path(self.display) / key

    def _claim(self, name: str) -> tuple[str, Path]:
        """The ledger name and path of ``name``, if this run may write it (else raise)."""
        self._check_open()
        return check_names(self.ledger, self.root, self.command, self.display, [name])[0]

    def _check_open(self) -> None:
        if self._closed:
            raise EnsmlError(f"{self.command}: out_dir {self.display} is closed; open it again to write")

    def owns(self, name: str) -> bool:
        """Whether this command may replace output ``name`` now (a new name counts too)."""
        key, path = self._resolve(name)
        return ownership_problem(self.ledger, self.command, key, path) is None

    def _entry(
        self, key: str, state: str, command: str | None = None, run: str | None = None, kind: str = "file"
    ) -> Entry:
        """A ledger entry for ``key``: ``done`` with the signature of what is on disk."""
        sig = signature(self.root / key) if state == "done" else {"kind": kind}
        return Entry(
            command=command or self.command, state=state, run=run or self.run_id, time=utc_now(), **sig
        )

    def _log(self, changes: list[tuple[str, Entry | None]], durable: bool = True) -> None:
        try:
            self.ledger.change(changes, durable)
        except OSError as err:
            raise write_error(self.command, self._shown(f"{STATE_DIR}/ledger.jsonl"), err) from None

    def _reserve(self, keys: dict[str, str]) -> None:
        """Record ``keys`` (name → kind) as reserved, creating their missing parent folders.

        The ledger learns of a folder before it is made: a kill in between leaves an entry
        without a folder (dropped by the next run), never a folder the ledger does not know.
        """
        changes: list[tuple[str, Entry | None]] = []
        parents: list[str] = []
        for key, kind in keys.items():
            parts = key.split("/")
            for above in ("/".join(parts[:i]) for i in range(1, len(parts))):
                if above not in parents and not os.path.lexists(self.root / above):
                    parents.append(above)
                    changes.append((above, Entry("parent", self.command, "done", self.run_id, utc_now())))
            owner = self.ledger.owner(key)
            if owner is not None and owner[0] != key:
                continue  # inside a folder of ours: that entry owns it
            if owner is None or (owner[1].state, owner[1].kind) != ("reserved", kind):
                changes.append((key, self._entry(key, "reserved", kind=kind)))
        self._log(changes)
        for above in parents:
            try:
                (self.root / above).mkdir(exist_ok=True)
            except OSError as err:
                raise write_error(self.command, self._shown(above), err) from None

    def _done(self, key: str, command: str | None = None, run: str | None = None) -> list[tuple[str, Entry]]:
        """The ledger change that records ``key`` as written (its own entry, or the folder entry
        that owns it; none while that folder is still reserved by its writer)."""
        owner = self.ledger.owner(key)
        if owner is not None and owner[0] != key:
            if owner[1].state != "done":
                return []
            key, command, run = owner[0], owner[1].command, owner[1].run
        return [(key, self._entry(key, "done", command, run))]

    # writers that are not the run: workers, other hosts, libraries ---------------------------
    #
    # Post-processing workers write products while the run holds the folder's lock; Lightning
    # writes ``checkpoints/``, ``metrics.csv``, ``hparams.yaml`` and ``config.yaml`` into fit's run
    # folder itself. The run reserves the names first, so that a kill at any moment leaves only
    # files the ledger knows, and records (or adopts) them when they are written.

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

    # writing -----------------------------------------------------------------------------

    @contextmanager
    def write(self, name: str) -> Iterator[Path]:
        """Yield a temporary path for output ``name`` in this run's staging folder.

        Write a file or a folder (a zarr store) at the path. When the block ends without an
        error the output is fsync'ed and either renamed into place at once, replacing this
        command's previous one (the folder's ``whole`` is False), or staged until the commit
        (``whole``). After an error, ``KeyboardInterrupt`` included, the temporary is removed
        and the folder is as it was.

        Raises
        ------
        EnsmlError
            Before the block: the name is not a relative name inside the folder, or it is a
            user's file, another command's output or changed since ensml wrote it. After it: a
            write or rename failed, in one line naming the final path (``no space left on
            device``, ``disk quota exceeded``, ``read-only file system``, ``file too large``,
            ``permission denied``, …).
        """
        key, _ = self._claim(name)
        with staged(self.run_dir, self._shown(key), self.command) as tmp:
            yield tmp
        if self.whole:
            earlier = self._pending.pop(key, None)
            if earlier is not None:
                discard(earlier, self.run_dir)
            self._pending[key] = tmp
            return
        try:
            self._commit({key: tmp}, [])
        finally:
            discard(tmp, self.run_dir)

    def commit(self, *, remove_stale: bool = False) -> list[str]:
        """Rename every staged output into place together (``whole`` folders; the ``with``
        block's end does this). With ``remove_stale``, also remove :meth:`remove_stale`'s
        outputs in the same commit. Returns the names kept because they were changed (see
        :attr:`disowned`). After an error nothing has changed and the staged outputs are gone.
        """
        pending, self._pending = self._pending, {}
        try:
            removals, kept = self._stale(set(pending)) if remove_stale else ([], [])
            self._commit(pending, removals)
        finally:
            for tmp in pending.values():
                discard(tmp, self.run_dir)
        self._tidy_parents()
        return kept

    def _commit(self, pending: dict[str, Path], removals: list[str]) -> None:
        """Rename ``pending`` into place and remove ``removals``: all or none, ledger first."""
        items = []
        for key, new in pending.items():
            key, final = self._claim(key)  # again: a user may have put a file there meanwhile
            items.append(Item(key, new, final, self._shown(key)))
        gone = [Removal(k, self.root / k, self._shown(k)) for k in removals]
        # One rename of one file is atomic by itself; anything more gets a journal for a rerun.
        journal = len(items) + len(gone) > 1 or any(i.new.is_dir() and i.final.exists() for i in items)
        earlier = [(i.name, self.ledger.get(i.name)) for i in items]
        with signals_held():
            # Reserved before the journal: a run that finishes a killed commit may replace them.
            self._reserve({i.name: "dir" if i.new.is_dir() else "file" for i in items})
            if journal:
                write_journal(self.run_dir, self.command, items, gone)
            try:
                olds = apply(self.command, items, gone, self.run_dir)
            except BaseException:
                (self.run_dir / JOURNAL).unlink(missing_ok=True)  # undone: nothing to finish
                self._log(earlier, durable=False)
                self._tidy_parents()
                raise
            self._log([c for i in items for c in self._done(i.name)] + [(r.name, None) for r in gone], False)
            (self.run_dir / JOURNAL).unlink(missing_ok=True)
        for old in olds:
            delete_path(old)

    def remove(self, name: str) -> None:
        """Delete output ``name`` of this command (unchanged since written) and its entry.

        Raises
        ------
        EnsmlError
            The name is not this command's output, or it was changed after ensml wrote it.
        """
        key = normalise(name)
        entry = self.ledger.get(key)
        if entry is None or entry.kind == "parent":
            raise EnsmlError(f"{self.command}: out_dir {self.display}: {key} is not an output ensml wrote")
        self._claim(key)
        self._commit({}, [key] if os.path.lexists(self.root / key) else [])
        self._log([(key, None)], durable=False)
        self._tidy_parents()

    def remove_stale(self) -> list[str]:
        """Remove this command's outputs that this run did not write (an earlier evaluate's
        ``spread.md``), unless changed since: those are kept and dropped from the ledger (they
        are the user's now). Returns the names kept; nothing of another command or of the
        user's is ever touched.
        """
        removals, kept = self._stale(set(self._pending))
        self._commit({}, removals)
        self._tidy_parents()
        return kept

    def _stale(self, keep: set[str]) -> tuple[list[str], list[str]]:
        """This command's earlier outputs: those to remove, and those kept because changed."""
        removals, kept = [], []
        for key, entry in sorted(self.ledger.entries.items()):
            if entry.command != self.command or entry.run == self.run_id or key in keep:
                continue
            if entry.kind == "parent" or not os.path.lexists(self.root / key):
                continue
            if entry.state == "done" and not unchanged(entry, self.root / key):
                kept.append(key)
            else:
                removals.append(key)
        self._log([(k, None) for k in kept], durable=False)
        self.disowned += kept
        return removals, kept

    def _tidy_parents(self) -> None:
        """Remove this command's parent folders left empty, deepest first."""
        parents = [
            k for k, e in self.ledger.entries.items() if e.kind == "parent" and e.command == self.command
        ]
        drops: list[tuple[str, Entry | None]] = []
        for key in sorted(parents, key=lambda k: -k.count("/")):
            if any(n.startswith(f"{key}/") for n in self.ledger.entries):
                continue
            try:
                (self.root / key).rmdir()
            except FileNotFoundError:
                pass
            except OSError:
                continue  # holds something: the user's, or another command's
            drops.append((key, None))
        self._log(drops, durable=False)
