"""Checks made before any side effect: may this command write this folder and these names?

Everything here only reads the file system. A refusal is one line,
``<command>: out_dir <path> …``, which the CLI prints as ``ensml: <line>``.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path

from ensml.data.outputs.ledger import LEDGER, LOG, Ledger, unchanged
from ensml.data.outputs.names import STATE_DIR, distinct, normalise, resolve
from ensml.errors import EnsmlError


def _nearest_existing(path: Path) -> Path:
    """``path`` or the first of its ancestors that exists."""
    while not os.path.lexists(path) and path != path.parent:
        path = path.parent
    return path


#: Bytes kept free under PATH_MAX for what ensml writes inside an out_dir (``.ensml/`` and its
#: staging names: a 12-character token and a folder or two).
STATE_ROOM = 64


def _limits(base: Path) -> tuple[int, int]:
    """NAME_MAX and PATH_MAX (bytes; PATH_MAX counts the final NUL) of the file system of ``base``."""
    limits = []
    for key, default in (("PC_NAME_MAX", 255), ("PC_PATH_MAX", 4096)):  # Linux's, where unknown
        try:
            value = os.pathconf(base, key)
        except (OSError, ValueError):
            value = -1
        limits.append(value if value > 0 else default)
    return limits[0], limits[1]


def _short(text: str) -> str:
    """``text`` cut to about 60 characters for a message (the ends kept)."""
    return text if len(text) <= 60 else f"{text[:40]}…{text[-16:]}"


def _fits(real: Path, base: Path, command: str, display: str) -> None:
    """Raise when a name in ``real`` is longer than the file system of ``base`` allows (NAME_MAX),
    or the path, with room for ensml's own entries inside, longer than PATH_MAX."""
    name_max, path_max = _limits(base)
    for part in real.parts:
        size = len(os.fsencode(part))
        if size > name_max:
            raise EnsmlError(
                f"{command}: out_dir {_short(display)}: the name {_short(part)} is {size} bytes, longer "
                f"than the file system allows (NAME_MAX: {name_max} bytes)"
            )
    size = len(os.fsencode(real))
    if size + STATE_ROOM >= path_max:
        raise EnsmlError(
            f"{command}: out_dir {_short(display)}: the path is {size} bytes, longer than the file system "
            f"allows with ensml's files inside (PATH_MAX: {path_max} bytes, less {STATE_ROOM})"
        )


def _writable(base: Path, command: str, display: str) -> None:
    """Raise unless new entries can be made in the existing folder ``base``."""
    try:
        read_only = bool(os.statvfs(base).f_flag & os.ST_RDONLY)
    except OSError:
        read_only = False
    if read_only:
        raise EnsmlError(f"{command}: out_dir {display}: folder {base} is on a read-only file system")
    # os.access asks the kernel with the real uid: root passes except on read-only mounts.
    if not os.access(base, os.W_OK | os.X_OK):
        raise EnsmlError(f"{command}: out_dir {display}: folder {base} is not writable (permission denied)")


def _place(path: Path, command: str, display: str, shared: bool) -> Path:
    """The real path of the out_dir, or raise why it cannot be one (nothing is read inside it)."""
    if os.path.islink(path) and not path.exists():
        raise EnsmlError(f"{command}: out_dir {display} is a broken symbolic link (to {os.readlink(path)})")
    real = Path(os.path.realpath(path))
    _fits(real, _nearest_existing(real), command, display)  # first: a longer path cannot even be stat'ed
    if real == Path(real.anchor):
        raise EnsmlError(f"{command}: out_dir {display} is the root folder; name a new folder")
    if STATE_DIR in real.parts:
        raise EnsmlError(f"{command}: out_dir {display} is inside a {STATE_DIR} folder, ensml's own")
    here = Path(os.path.realpath(os.getcwd()))
    if not shared and (real == here or real in here.parents):
        raise EnsmlError(f"{command}: out_dir {display} is the current folder or above it; name a new folder")
    if real.exists() and not real.is_dir():
        raise EnsmlError(f"{command}: out_dir {display} is a file, not a folder")
    base = _nearest_existing(real)
    if not base.is_dir():
        raise EnsmlError(f"{command}: out_dir {display}: {base} is a file, not a folder")
    _writable(base, command, display)
    return real


def read_ledger(real: Path, command: str, display: str, shared: bool) -> Ledger:
    """The ledger of the existing or new folder ``real``; raise if it holds what ensml did not write.

    A folder is ensml's when ``.ensml`` holds a ledger (snapshot or log). A folder without one
    must be empty (``.ensml`` aside), whatever its contents, unless ``shared``.
    """
    state = real / STATE_DIR
    if os.path.lexists(state) and (state.is_symlink() or not state.is_dir()):
        raise EnsmlError(f"{command}: out_dir {display} holds {STATE_DIR}, which is not ensml's folder")
    if (state / LEDGER).exists() or (state / LOG).exists():
        try:
            return Ledger.load(state)
        except EnsmlError as exc:
            raise EnsmlError(
                f"{command}: out_dir {display}: {exc}; move the folder away or name another"
            ) from None
    content = sorted(n for n in os.listdir(real) if n != STATE_DIR) if real.is_dir() else []
    if content and not shared:
        entries = f"{len(content)} {'entry' if len(content) == 1 else 'entries'}"
        raise EnsmlError(
            f"{command}: out_dir {display} holds {entries} ensml did not write (e.g. {content[0]}); "
            "name a new or empty folder"
        )
    return Ledger(state)


def ownership_problem(ledger: Ledger, command: str, key: str, path: Path) -> str | None:
    """Why ``command`` may not write or replace the output ``key`` at ``path``, or None.

    Allowed: a new name; or one owned (itself, or a ``dir`` entry above it) by the same command
    and either ``reserved`` or unchanged since ensml recorded it.
    """
    found = ledger.owner(key)
    if found is None:
        return f"{key} exists and ensml did not write it; move it away" if os.path.lexists(path) else None
    name, entry = found
    if entry.command != command:
        return f"{name} was written by ensml {entry.command}; name another folder"
    if entry.state == "done" and not unchanged(entry, ledger.state_dir.parent / name):
        return f"{name} was changed after ensml wrote it; move it away"
    return None


def check_names(
    ledger: Ledger, root: Path, command: str, display: str, names: Iterable[str]
) -> list[tuple[str, Path]]:
    """The ledger names and paths of ``names``, each checked (:func:`ownership_problem`).

    Raises
    ------
    EnsmlError
        One line for the first bad name: not a relative name inside out_dir, two names for one
        output, a user's file, another command's output, or an output changed since.
    """
    out = []
    path_max = _limits(_nearest_existing(root))[1]
    try:
        keys = [normalise(name) for name in distinct(names)]
        for key in keys:  # first: a longer path cannot even be stat'ed
            size = len(os.fsencode(root / key))
            if size >= path_max:
                raise EnsmlError(
                    f"out_dir {_short(display)}: output {_short(key)} would have a path of {size} bytes, "
                    f"longer than the file system allows (PATH_MAX: {path_max} bytes)"
                )
        resolved = [resolve(root, key) for key in keys]
    except EnsmlError as exc:
        raise EnsmlError(f"{command}: {exc}") from None
    for key, path in resolved:
        problem = ownership_problem(ledger, command, key, path)
        if problem:
            raise EnsmlError(f"{command}: out_dir {display}: {problem}")
        out.append((key, path))
    return out


def check_out_dir(
    path: str | os.PathLike[str], command: str, *, names: Iterable[str] = (), shared: bool = False
) -> Path:
    """Raise unless ``command`` may write the output folder ``path`` and the outputs ``names``.

    Only reads the file system; call it before any work. Refused, each in one line naming the
    command and the path: an empty path; a file; a folder under a file; the root folder; the
    current folder or one above it (unless ``shared``); a folder inside ``.ensml``; a name in
    the path longer than the file system allows (NAME_MAX) or a path longer than PATH_MAX less
    :data:`STATE_ROOM` (an output's longer than PATH_MAX); a folder
    (or its nearest existing ancestor) that is not writable or on a read-only mount; an
    existing non-empty folder without an ensml ledger, whatever it holds (unless ``shared``); a
    ledger that cannot be read; and any of ``names`` that is not a relative name inside the
    folder, or is a user's file, another command's output or an output changed since ensml
    wrote it.

    Parameters
    ----------
    path
        The output folder, new, empty or written by ensml.
    command
        The command that writes it (``evaluate``, ``fit``, …): recorded in the ledger, and the
        first word of every message.
    names
        The outputs the command will write, relative to ``path``.
    shared
        The folder may hold the user's own files (``predict``'s one file in any folder): it
        need not be empty or ensml's, and may be the current folder. Only ``names`` are checked.

    Returns
    -------
    Path
        The folder's real path (symbolic links resolved).

    Raises
    ------
    EnsmlError
        One line saying what is wrong (see above).
    """
    display = os.fspath(path)
    if not display:
        raise EnsmlError(f"{command}: out_dir is empty; name a folder")
    real = _place(Path(display), command, display, shared)
    ledger = read_ledger(real, command, display, shared)
    check_names(ledger, real, command, display, names)
    return real


__all__ = ["check_names", "check_out_dir", "ownership_problem", "read_ledger"]
