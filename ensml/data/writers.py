"""The old writers, kept only for the verbs not yet wired to :mod:`ensml.data.outputs`.

``evaluate``, ``report``, case studies and ``benchmark`` still build their folders with
:mod:`ensml.data.outdir` (which uses :func:`atomic_path` and :func:`check_writable`), and
``evaluate``'s tables are written with :func:`write_netcdf`. Every other verb writes through
the output module; this module goes when those four do. New code must not use it.
"""

from __future__ import annotations

import fcntl
import glob
import os
import re
import shutil
import uuid
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import xarray as xr

from ensml.data.outputs.netcdf import global_attrs, netcdf_encoding
from ensml.errors import EnsmlError


def check_writable(path: str | os.PathLike[str], what: str, *, folder: bool) -> Path:
    """Raise unless the folder (``folder=True``) or file ``path`` can be created or replaced.

    Nothing is created: the first existing folder on the way to ``path`` must be a writable
    folder, and an existing ``path`` must be a folder (``folder``) or a file (not ``folder``).

    Raises
    ------
    EnsmlError
        One line naming ``what``, ``path`` and the culprit: a file where a folder is needed, a
        folder where the file goes, or a read-only folder.
    """
    p = Path(path)
    if p.exists() and p.is_dir() != folder:
        raise EnsmlError(f"cannot write {what} {p}: it is {'a file' if folder else 'a folder'}")
    base = p if folder and p.is_dir() else p.absolute().parent
    while not base.exists() and base != base.parent:
        base = base.parent
    if not base.is_dir():
        raise EnsmlError(f"cannot write {what} {p}: {base} is a file, not a folder")
    # os.access asks the kernel (read-only mounts included); root may write anywhere else.
    if not os.access(base, os.W_OK | os.X_OK):
        raise EnsmlError(f"cannot write {what} {p}: folder {base} is read-only")
    return p


TMP_SUFFIX = ".tmp"


def temporary_name(path: Path) -> Path:
    """The hidden temporary sibling ``.<name>.<random>.tmp`` of ``path``."""
    return path.with_name(f".{path.name}.{uuid.uuid4().hex[:12]}{TMP_SUFFIX}")


def _remove_if_abandoned(p: Path) -> bool:
    """Remove the temporary ``p`` unless its writer is alive (it holds an ``flock`` on the folder)."""
    if not p.is_dir():  # only folders are locked; a file is debris of an earlier ensml
        p.unlink(missing_ok=True)
        return True
    try:
        fd = os.open(p, os.O_RDONLY)
    except OSError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:  # held: a live writer (or a filesystem without flock: leave it)
        return False
    else:
        shutil.rmtree(p, ignore_errors=True)
        return True
    finally:
        os.close(fd)


def _sweep(path: Path) -> list[Path]:
    """Remove what killed writers of ``path`` left beside it (its abandoned temporaries), with the
    lock on ``path.parent`` held by the caller."""
    pattern = re.compile(rf"^\.{re.escape(path.name)}\.[0-9a-f]{{12}}{re.escape(TMP_SUFFIX)}$")
    if not path.parent.is_dir():
        return []
    found = [p for p in path.parent.glob(f".{glob.escape(path.name)}.*{TMP_SUFFIX}") if pattern.match(p.name)]
    return [p for p in found if _remove_if_abandoned(p)]


# The temporaries this process holds: writes inside them need no folder lock (and taking one
# would wait forever on the flock that marks them live).
_OWN_FOLDERS: set[Path] = set()


@contextmanager
def temporary_folder(path: str | os.PathLike[str], *, sweep: bool = True) -> Iterator[Path]:
    """A new hidden folder ``.<name>.<random>.tmp`` beside ``path``, removed on exit.

    The process holds an ``flock`` on the folder while it lives; the kernel drops it when the
    process dies, even by SIGKILL, so a later writer of ``path`` knows the folder is abandoned
    and removes it (``sweep``, on by default, does that first for ``path``'s earlier temporaries).

    Raises
    ------
    EnsmlError
        When the folder cannot be created beside ``path`` (no such folder, a file in the way,
        permission denied).
    """
    path = Path(path)
    # Sweeping and creating-then-locking happen under a lock on the parent folder, so no
    # sweeper can take a new folder for abandoned in the moment before its writer locks it.
    with _folder_lock(path.parent, path):
        if sweep:
            _sweep(path)
        box = temporary_name(path)
        try:
            box.mkdir()
        except OSError as err:
            raise EnsmlError(f"cannot write {path}: {err.strerror or err}") from err
        fd = os.open(box, os.O_RDONLY)
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    own = box.resolve()
    _OWN_FOLDERS.add(own)
    try:
        yield box
    finally:
        _OWN_FOLDERS.discard(own)
        shutil.rmtree(box, ignore_errors=True)
        os.close(fd)


@contextmanager
def atomic_path(path: str | os.PathLike[str], *, sweep: bool = True) -> Iterator[Path]:
    """Yield a temporary path for ``path``; on success rename it to ``path`` (atomic on POSIX).

    The temporary lies in a :func:`temporary_folder` beside ``path``, so what a killed writer
    left is removed by the next write of ``path``. On any failure, including
    ``KeyboardInterrupt``, the temporary (a file or a folder, such as a zarr store) is removed
    and ``path`` is left as it was. An existing ``path`` is replaced. Writers of the same
    ``path`` at the same time each write their own temporary; ``path`` ends as one of them, whole.
    """
    path = Path(path)
    with temporary_folder(path, sweep=sweep) as box:
        tmp = box / path.name
        yield tmp
        if not tmp.is_dir():
            os.replace(tmp, path)  # atomic: concurrent writers each leave a whole file
            return
        with _folder_lock(path.parent, path):
            if path.is_dir():
                # os.replace cannot replace a non-empty folder: move the old one into the box
                # first. Two renames, so concurrent writers of ``path`` take turns (a lock).
                os.replace(path, box / f"{path.name}.old")
            os.replace(tmp, path)


@contextmanager
def _folder_lock(folder: Path, path: Path) -> Iterator[None]:
    """Hold an exclusive ``flock`` on ``folder`` (waiting for it) to write ``path``; writes nothing.

    Held only for a few file-system calls: creating and locking a temporary, sweeping abandoned
    ones, swapping a folder into place.
    """
    here = folder.resolve()
    if here in _OWN_FOLDERS or not _OWN_FOLDERS.isdisjoint(here.parents):
        yield  # inside a temporary of this process: no one else writes there (and it is locked)
        return
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError as err:
        raise EnsmlError(f"cannot write {path}: {err.strerror or err}") from err
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # releases the lock


def write_netcdf(
    ds: xr.Dataset,
    path: str | os.PathLike[str],
    encoding: Mapping[str, Mapping[str, Any]] | None = None,
    *,
    history: str | None = None,
) -> Path:
    """Write ``ds`` as CF netCDF4 to ``path`` atomically.

    The data go to a hidden temporary file in the same directory, which is renamed to
    ``path`` only after a complete write (``os.replace``, atomic on POSIX); on any failure,
    including ``KeyboardInterrupt``, the temporary file is removed and ``path`` is left as it
    was. An existing ``path`` is replaced.

    Parameters
    ----------
    ds
        The dataset. It is not modified; the globals of :func:`global_attrs` are added to a
        shallow copy.
    path
        Output file. Its directory must exist.
    encoding
        Per-variable netCDF encoding, as for :meth:`xarray.Dataset.to_netcdf`; merged over the
        defaults: zlib level 1 with shuffle for numeric data variables, and no ``_FillValue`` on
        floating-point coordinates. ``shards`` (zarr v3's) is ignored.
    history
        What produced the file (for example the command line); default ``"written"``.

    Returns
    -------
    Path
        The path written.

    Raises
    ------
    EnsmlError
        When the directory does not exist or the file cannot be written (permissions, disk
        full), or when ``encoding`` names variables that ``ds`` lacks.
    """
    path = Path(path)
    if not path.parent.is_dir():
        raise EnsmlError(f"cannot write {path}: directory {path.parent} does not exist")
    if path.is_dir():
        raise EnsmlError(f"cannot write {path}: it is a directory")
    enc = netcdf_encoding(ds, encoding or {})

    out = ds.copy(deep=False)
    out.attrs = global_attrs(ds.attrs, history)

    try:
        with atomic_path(path) as tmp:
            out.to_netcdf(tmp, engine="netcdf4", format="NETCDF4", encoding=enc)
    except OSError as err:
        raise EnsmlError(f"cannot write {path}: {err}") from err
    return path
