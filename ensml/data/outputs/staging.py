"""Temporaries in the run's staging folder, and renaming them into place.

Every temporary of a run lives in ``<out_dir>/.ensml/staging/<run-id>/w-<random>/<name>``: on
the output folder's file system (so a rename is atomic) and never beside a user's file. A write
that fails, by an exception or ``KeyboardInterrupt``, removes its temporary at once; what a
killed process left is removed by the next run that opens the folder.

:class:`Staging` is the lock-free, ledger-free half for processes that are not the run itself
(post-processing workers, on other hosts too): given the folder's path and the run id, it
stages and renames one output. The run reserves the names before and records them after.
"""

from __future__ import annotations

import errno
import os
import shutil
import uuid
from abc import ABC, abstractmethod
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ensml.data.outputs.errors import diagnose, reason, write_error
from ensml.data.outputs.ledger import fsync_dir
from ensml.data.outputs.names import STATE_DIR, resolve
from ensml.errors import EnsmlError

if TYPE_CHECKING:
    import xarray as xr

STAGING = "staging"


def run_dir(root: Path, run_id: str) -> Path:
    """The staging folder of run ``run_id`` in the output folder ``root``."""
    return root / STATE_DIR / STAGING / run_id


def make_folders(real: Path, command: str, display: str) -> list[Path]:
    """Create the out_dir (and folders above it) and ``.ensml/staging``; return those created."""
    created = []
    missing = [p for p in [real, *real.parents] if not os.path.lexists(p)]
    for folder in [*reversed(missing), real / STATE_DIR, real / STATE_DIR / STAGING]:
        try:
            folder.mkdir()
            created.append(folder)
        except FileExistsError:
            pass
        except OSError as err:
            undo_folders(created)
            raise EnsmlError(f"{command}: cannot create out_dir {display}: {reason(err)}") from None
    return created


def undo_folders(created: list[Path]) -> None:
    """Remove the folders :func:`make_folders` created, deepest first, if still empty of
    anything but what ensml put there (a failed start leaves no folder behind)."""
    for folder in reversed(created):
        if folder.name == STATE_DIR:
            shutil.rmtree(folder, ignore_errors=True)
        else:
            try:
                folder.rmdir()
            except OSError:
                pass


def fsync_tree(path: Path) -> None:
    """fsync a file, or every file and folder of a tree (deepest first), before it is renamed
    into place: a rename that reaches the disk before the data would leave an empty file."""
    if not path.is_dir() or path.is_symlink():
        fd = os.open(path, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
        return
    for dirpath, _, filenames in os.walk(path, topdown=False):
        for name in filenames:
            if not os.path.islink(os.path.join(dirpath, name)):
                fsync_tree(Path(dirpath, name))
        fsync_dir(Path(dirpath))


def _mapped(exc: BaseException, command: str, final: Path, where: Path, tmp: Path) -> EnsmlError | None:
    """The one-line error for a failed write of ``final``, or None to let ``exc`` through.

    An OSError is named by its errno, except "permission denied" in a folder this process may
    write: HDF5 reports a file it could not create on a full disk so, and :func:`diagnose` finds
    the cause. Another exception from a library (netCDF4 reports a full disk as
    ``RuntimeError('NetCDF: HDF error')``) becomes one line when :func:`diagnose` finds a cause
    on the file system; ensml's own errors, bugs without such a cause, and ``KeyboardInterrupt``
    pass unchanged.
    """
    if isinstance(exc, OSError):
        if exc.errno in (errno.EACCES, errno.EPERM) and os.access(where, os.W_OK):
            code = diagnose(where, tmp if os.path.lexists(tmp) else None)
            exc = exc if code is None else OSError(code, os.strerror(code))
        return write_error(command, final, exc)
    if isinstance(exc, EnsmlError) or not isinstance(exc, Exception):
        return None
    code = diagnose(where, tmp if os.path.lexists(tmp) else None)
    return None if code is None else write_error(command, final, OSError(code, os.strerror(code)))


def temporary(where: Path, name: str) -> Path:
    """A new temporary path in ``where`` for an output whose file name is ``name``.

    ``<random>.<name>`` when that fits in a file name, else ``<random>/<name>``: the name is
    kept whole because some writers infer the format from it (matplotlib's ``savefig``). One
    flat file, not a folder per write: every folder made and removed costs a journal block.
    """
    token = uuid.uuid4().hex[:12]
    if len(os.fsencode(name)) + len(token) + 1 <= 255:
        return where / f"{token}.{name}"
    (where / token).mkdir()
    return where / token / name


def discard(tmp: Path, where: Path) -> None:
    """Remove the temporary ``tmp`` (a file or a tree) made by :func:`temporary` in ``where``."""
    delete_path(tmp)
    if tmp.parent != where:
        shutil.rmtree(tmp.parent, ignore_errors=True)


def delete_path(path: Path) -> None:
    """Delete a file or a tree in the staging folder (links are removed, not followed).

    Best effort, as every clean-up: what cannot go now (a read-only file system) goes with
    the staging folder, or with the next run's sweep.
    """
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path, ignore_errors=True)
        return
    try:
        path.unlink(missing_ok=True)
    except OSError:
        pass


@contextmanager
def staged(where: Path, final: Path, command: str) -> Iterator[Path]:
    """Yield a temporary path for ``final`` in the staging folder ``where``; fsync it on success.

    The caller renames it into place (or discards it). On failure the temporary is removed
    and the error re-raised, as one line naming ``final`` where it is an OSError or a library
    error with a cause on the file system (:func:`_mapped`).
    """
    try:
        tmp = temporary(where, final.name)
    except OSError as err:
        raise write_error(command, final, err) from None
    try:
        yield tmp
        if not os.path.lexists(tmp):
            raise EnsmlError(f"{command}: nothing was written for {final}")
        fsync_tree(tmp)
    except BaseException as exc:
        mapped = _mapped(exc, command, final, where, tmp)
        discard(tmp, where)
        if mapped is None:
            raise
        raise mapped from exc


def swap(new: Path, final: Path, box: Path) -> Path | None:
    """Rename ``new`` onto ``final``; return where the previous ``final`` is kept, in ``box``.

    A file replaces a file in one atomic rename (readers see the old or the new one, whole);
    the old one is first hard-linked into ``box`` so that it can be put back. A folder (a zarr
    store) cannot be renamed over a non-empty folder, so the old one is moved into ``box``
    first: two renames. Returns None when there was no previous ``final``.
    """
    if not os.path.lexists(final):
        os.replace(new, final)
        return None
    old = box / f"old-{uuid.uuid4().hex[:12]}"
    folders = new.is_dir() or (final.is_dir() and not final.is_symlink())
    if folders:
        os.replace(final, old)
    else:
        try:
            os.link(final, old, follow_symlinks=False)
        except OSError:  # a file system without hard links
            os.replace(final, old)
    try:
        os.replace(new, final)
    except BaseException:
        if not os.path.lexists(final):
            os.replace(old, final)
        raise
    return old


def unswap(new: Path, final: Path, old: Path | None) -> None:
    """Undo :func:`swap`: ``final`` back to ``new``, and the previous one back to ``final``."""
    os.replace(final, new)
    if old is not None:
        os.replace(old, final)


class Writes(ABC):
    """Conveniences over ``self.write(name)`` (a context manager yielding a temporary path)."""

    @abstractmethod
    def write(self, name: str) -> AbstractContextManager[Path]:
        """Yield a temporary path for output ``name``, put in place when the block succeeds."""

    @abstractmethod
    def final(self, name: str) -> Path:
        """The path output ``name`` has once written."""

    def write_bytes(self, name: str, data: bytes) -> Path:
        """Write ``data`` as the file ``name``; return its final path."""
        with self.write(name) as tmp:
            tmp.write_bytes(data)
        return self.final(name)

    def write_text(self, name: str, text: str, encoding: str = "utf-8") -> Path:
        """Write ``text`` as the file ``name``; return its final path."""
        return self.write_bytes(name, text.encode(encoding))

    def write_netcdf(self, ds: xr.Dataset, name: str, *args: Any, **kwargs: Any) -> Path:
        """Write ``ds`` as CF netCDF4 to output ``name``: :func:`ensml.data.outputs.netcdf.write_netcdf`
        with this folder as the target (same arguments after ``name``)."""
        from ensml.data.outputs.netcdf import write_netcdf

        return write_netcdf(self, ds, name, *args, **kwargs)

    def write_zarr(self, ds: xr.Dataset, name: str, *args: Any, **kwargs: Any) -> Path:
        """Write ``ds`` as a zarr store to output ``name``: :func:`ensml.data.outputs.netcdf.write_zarr`
        with this folder as the target (same arguments after ``name``)."""
        from ensml.data.outputs.netcdf import write_zarr

        return write_zarr(self, ds, name, *args, **kwargs)


@dataclass(frozen=True)
class Staging(Writes):
    """Write outputs of a run from another process: no lock, no ledger (picklable).

    Get one from :meth:`ensml.data.outputs.OutputFolder.staging` in the run, send it to the
    workers, and :meth:`~ensml.data.outputs.OutputFolder.reserve` the names before and
    :meth:`~ensml.data.outputs.OutputFolder.record` them when the results come back.

    Attributes
    ----------
    root
        The output folder's real path.
    run_id
        The run whose staging folder holds the temporaries.
    command
        The command, for error messages.
    shown
        The folder as the user named it, for error messages (default: ``root``).
    names
        The outputs this worker may write (ledger names), reserved by the run.
    """

    root: str
    run_id: str
    command: str
    shown: str = ""
    names: frozenset[str] = frozenset()

    def final(self, name: str) -> Path:
        """The path ``name`` is written to (checked as :func:`ensml.data.outputs.names.resolve`)."""
        try:
            return resolve(Path(self.root), name)[1]
        except EnsmlError as exc:
            raise EnsmlError(f"{self.command}: {exc}") from None

    def _target(self, name: str) -> tuple[Path, str, Path, Path]:
        """The final path, ledger name, shown path and staging folder of output ``name``."""
        final = self.final(name)
        key = str(final.relative_to(self.root))
        shown = Path(self.shown or self.root) / key
        if not any(key == n or key.startswith(f"{n}/") for n in self.names):
            raise EnsmlError(
                f"{self.command}: cannot write {shown}: the run did not reserve it for this worker"
            )
        where = run_dir(Path(self.root), self.run_id)
        if not where.is_dir():
            raise EnsmlError(
                f"{self.command}: cannot write {shown}: "
                f"run {self.run_id} is over (its staging folder is gone)"
            )
        return final, key, shown, where

    @contextmanager
    def write(self, name: str) -> Iterator[Path]:
        """Yield a temporary path for output ``name``; rename it into place when the block ends.

        Write a file or a folder (a zarr store) at the path. On success it is fsync'ed and
        renamed onto ``<root>/<name>`` (replacing a previous one), and the folder fsync'ed.

        Raises
        ------
        EnsmlError
            The name is not a relative name inside the folder or not one of :attr:`names`; the
            run's staging folder is gone (the run is over); or a write failed: one line naming
            the final path and the reason (no space left on device, disk quota exceeded,
            read-only file system, …). The temporary is removed and the previous output kept.
        """
        final, _, shown, where = self._target(name)
        with staged(where, shown, self.command) as tmp:
            yield tmp
        try:
            put_in_place(tmp, final, where, self.command, shown)
        finally:
            discard(tmp, where)

    def ready(self, name: str) -> Path:
        """Where :meth:`hold` keeps output ``name`` until the run places it."""
        return ready_path(run_dir(Path(self.root), self.run_id), str(self.final(name).relative_to(self.root)))

    @contextmanager
    def hold(self, name: str) -> Iterator[Path]:
        """As :meth:`write`, but the finished output stays in the run's staging folder
        (:meth:`ready`) until the run places it (:meth:`~ensml.data.outputs.OutputFolder.place`).

        So an output is in place only once the run has recorded it: a worker that finishes
        after the run was stopped (Ctrl-C, a lost client) leaves nothing beside the records,
        and its file goes with the staging folder.
        """
        _, key, shown, where = self._target(name)
        with staged(where, shown, self.command) as tmp:
            yield tmp
        ready = ready_path(where, key)
        try:
            ready.parent.mkdir(parents=True, exist_ok=True)
            os.replace(tmp, ready)
            fsync_dir(ready.parent)
        except OSError as err:
            raise write_error(self.command, shown, err) from None
        finally:
            discard(tmp, where)


def put_in_place(new: Path, final: Path, where: Path, command: str, shown: Path) -> None:
    """Rename the finished ``new`` onto ``final`` (:func:`swap`, the previous one kept in the
    staging folder ``where`` until the rename is durable), creating its folder; an OSError is one
    line naming ``shown``."""
    old = None
    try:
        final.parent.mkdir(parents=True, exist_ok=True)
        old = swap(new, final, where)
        fsync_dir(final.parent)
    except OSError as err:
        raise write_error(command, shown, err) from None
    finally:
        if old is not None:
            delete_path(old)


def ready_path(where: Path, key: str) -> Path:
    """Where a held output ``key`` waits in the staging folder ``where`` (see :meth:`Staging.hold`)."""
    return where / "ready" / key


__all__ = [
    "STAGING",
    "Staging",
    "Writes",
    "delete_path",
    "discard",
    "fsync_tree",
    "make_folders",
    "put_in_place",
    "ready_path",
    "run_dir",
    "staged",
    "swap",
    "temporary",
    "undo_folders",
    "unswap",
]
