"""Output folders that ensml replaces as a whole, and only when it wrote them itself.

``evaluate``, ``report``, case studies and ``benchmark`` write a folder of results. The folder
is built under a temporary name beside the target and replaces it only when complete, so it
always holds one run's results. Replacing deletes what was there, so it is refused unless the
target is new, empty, or was written by the same command: it holds the marker file
:data:`MARKER`, or (folders of ensml before the marker) only names that command writes. A
user's folder given by mistake (``--out_dir runs``, ``--out_dir .``) is refused with one line.
"""

from __future__ import annotations

import fnmatch
import json
import os
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from datetime import datetime, timezone
from pathlib import Path

from ensml import __version__
from ensml.data.writers import atomic_path, check_writable
from ensml.errors import EnsmlError

MARKER = ".ensml-output"


def owner(folder: Path) -> str | None:
    """The command named by ``folder``'s marker, or None."""
    try:
        return str(json.loads((folder / MARKER).read_text())["command"])
    except (OSError, ValueError, KeyError, TypeError):
        return None


def check_output_folder(path: str | os.PathLike[str], command: str, names: Sequence[str] = ()) -> Path:
    """Check that ``command`` may write (and replace) the folder ``path``; return it.

    Parameters
    ----------
    path
        The output folder.
    command
        The command that writes it, e.g. ``"report"``; recorded in the marker.
    names
        Glob patterns of the files ``command`` writes: a folder without marker that holds only
        such names is an earlier run's output of ``command``.

    Raises
    ------
    EnsmlError
        One line, when ``path`` is a file, the current folder or one above it, a folder with
        other content, read-only, or under a file or a folder that cannot be written.
    """
    p = Path(path)
    where = p.resolve()
    here = Path.cwd().resolve()
    if where == here or where in here.parents:
        raise EnsmlError(f"{command}: out_dir {path} is the current folder or above it; name a new folder")
    check_writable(p, f"{command} out_dir", folder=True)
    content = [c.name for c in p.iterdir() if c.name != MARKER] if p.is_dir() else []
    ours = owner(p) == command or all(any(fnmatch.fnmatch(c, n) for n in names) for c in content)
    if content and not ours:
        raise EnsmlError(
            f"{command}: out_dir {path} holds files that ensml {command} did not write "
            f"({len(content)} entries, e.g. {sorted(content)[0]}); name a new or empty folder"
        )
    return p


@contextmanager
def replace_folder(path: str | os.PathLike[str], command: str, names: Sequence[str] = ()) -> Iterator[Path]:
    """Yield an empty temporary folder that replaces the folder ``path`` when the block succeeds.

    ``path`` is checked first (:func:`check_output_folder`); the new folder gets the marker. On
    any failure ``path`` is left as it was and the temporary is removed (or, after SIGKILL, by
    the next run).
    """
    p = check_output_folder(path, command, names)
    try:
        p.parent.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise EnsmlError(f"{command}: cannot create out_dir {path}: {err.strerror or err}") from None
    with atomic_path(p) as tmp:
        tmp.mkdir()
        yield tmp
        stamp = datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
        mark = {"command": command, "ensml": __version__, "written": stamp}
        (tmp / MARKER).write_text(json.dumps(mark) + "\n")


__all__ = ["MARKER", "check_output_folder", "owner", "replace_folder"]
