"""The commit phase: staged outputs renamed into place, all of them or none.

A commit of several outputs (or one folder replacing another, or removals) first writes a
journal, ``commit.json``, into the run's staging folder: what goes where. The renames follow
at once, with SIGINT and SIGTERM held back until they are done; an error in the middle puts
back what was already moved. If the process is killed in the middle (SIGKILL, power loss),
the next run that opens the folder finds the journal in the dead run's staging folder and
finishes the renames (:func:`recover`, called by :meth:`ensml.data.outputs.OutputFolder.open`),
so the folder holds one run's results whole.
"""

from __future__ import annotations

import json
import os
import signal
import threading
import uuid
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ensml.data.outputs.check import ownership_problem
from ensml.data.outputs.errors import write_error
from ensml.data.outputs.ledger import Ledger, fsync_dir, unchanged, write_atomic
from ensml.data.outputs.names import normalise, resolve
from ensml.data.outputs.staging import swap, unswap
from ensml.errors import EnsmlError

JOURNAL = "commit.json"


@dataclass(frozen=True)
class Item:
    """One staged output: ledger ``name``, its temporary ``new`` and its ``final`` path."""

    name: str
    new: Path
    final: Path
    shown: Path  # the final path as the user named the folder, for messages


@dataclass(frozen=True)
class Removal:
    """One output of the command to delete: ledger ``name`` at ``final``."""

    name: str
    final: Path
    shown: Path


@contextmanager
def signals_held() -> Iterator[None]:
    """Hold back SIGINT and SIGTERM during the block, and deliver them after it.

    A Ctrl-C between two renames of a commit would otherwise leave a folder holding parts of
    two runs. Only the main thread can set handlers; elsewhere the block runs unprotected.
    """
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    caught: list[int] = []
    saved = {s: signal.signal(s, lambda signum, frame: caught.append(signum)) for s in _SIGNALS}
    try:
        yield
    finally:
        for s, handler in saved.items():
            signal.signal(s, signal.SIG_DFL if handler is None else handler)
        for s in dict.fromkeys(caught):
            signal.raise_signal(s)


_SIGNALS = (signal.SIGINT, signal.SIGTERM)


def write_journal(run_dir: Path, command: str, items: Sequence[Item], removals: Sequence[Removal]) -> None:
    """Record, durably, what the commit of ``items`` and ``removals`` will move."""
    data = {
        "command": command,
        "items": [{"name": i.name, "new": str(i.new.relative_to(run_dir))} for i in items],
        "remove": [r.name for r in removals],
    }
    write_atomic(run_dir / JOURNAL, json.dumps(data).encode(), run_dir)


def read_journal(run_dir: Path) -> dict[str, Any] | None:
    """The journal of a commit that a killed run left unfinished, or None (none, or unreadable:
    a kill while writing the journal means no rename had started)."""
    try:
        data = json.loads((run_dir / JOURNAL).read_bytes())
    except (OSError, ValueError):
        return None
    ok = (
        isinstance(data, dict)
        and isinstance(data.get("items"), list)
        and isinstance(data.get("remove"), list)
    )
    return data if ok else None


def apply(command: str, items: Sequence[Item], removals: Sequence[Removal], box: Path) -> list[Path]:
    """Rename every item into place and move every removal into ``box``: all or none.

    Returns the previous versions and the removed outputs, now in ``box``, to delete once the
    ledger says so.

    Raises
    ------
    EnsmlError
        One line naming the output whose rename failed; everything done before is undone.
    """
    undo: list[tuple[Path, Path, Path | None]] = []  # (new, final, old) as for unswap
    gone: list[Path] = []
    current: Item | Removal | None = None
    try:
        for current in items:
            old = swap(current.new, current.final, box)
            undo.append((current.new, current.final, old))
            gone += [old] if old is not None else []
        for current in removals:
            aside = box / f"old-{uuid.uuid4().hex[:12]}"
            os.replace(current.final, aside)
            undo.append((current.final, aside, None))
            gone.append(aside)
    except BaseException as exc:
        for new, final, old in reversed(undo):
            try:
                unswap(new, final, old)
            except OSError:
                pass  # the journal stays: the next run finishes the commit instead
        if isinstance(exc, OSError) and current is not None:
            raise write_error(command, current.shown, exc) from None
        raise
    for folder in dict.fromkeys([i.final.parent for i in items] + [r.final.parent for r in removals]):
        fsync_dir(folder)
    return gone


def recover(root: Path, display: str, ledger: Ledger, dead: Path) -> tuple[str, list[str], list[str]]:
    """Finish the commit the killed run of staging folder ``dead`` left half done.

    Its journal lists the outputs; every one still staged whose target the dead run's command
    may still replace (reserved by it before the journal was written) is renamed into place.
    Called under the folder's lock with signals held; the caller records the result.

    Parameters
    ----------
    root, display
        The output folder's real path, and the path as the user named it (for messages).
    ledger
        The folder's ledger (read only here).
    dead
        The staging folder of the killed run.

    Returns
    -------
    tuple
        The dead run's command, the journal's names now in place and owned by that command
        (to record as done), and the names it removed (to drop); empty without a journal.
    """
    journal = read_journal(dead)
    if journal is None:
        return "", [], []
    command = str(journal.get("command"))
    items, names = [], []
    for raw in journal["items"]:
        try:
            key, final = resolve(root, raw["name"])
            new = dead / normalise(raw["new"])
        except (EnsmlError, KeyError, TypeError):
            continue  # not a journal ensml wrote: finish nothing of it
        names.append(key)
        allowed = ownership_problem(ledger, command, key, final) is None
        if os.path.lexists(new) and final.parent.is_dir() and allowed:
            items.append(Item(key, new, final, Path(display) / key))
    gone = []
    for key in journal["remove"]:
        entry = ledger.get(key) if isinstance(key, str) else None
        if entry is not None and entry.command == command and unchanged(entry, root / key):
            gone.append(Removal(key, root / key, Path(display) / key))
    apply(command, items, gone, dead)
    owned = [k for k in names if _owned_by(ledger, k, command) and os.path.lexists(root / k)]
    return command, owned, [r.name for r in gone]


def _owned_by(ledger: Ledger, key: str, command: str) -> bool:
    owner = ledger.owner(key)
    return owner is not None and owner[1].command == command


__all__ = ["JOURNAL", "Item", "Removal", "apply", "read_journal", "recover", "signals_held", "write_journal"]
