"""Names of outputs: relative, inside the output folder, never inside ensml's own ``.ensml``.

A name is what the ledger records (``scores.csv``, ``cases/case_a.png``,
``2020/forecast_20200101.nc``). It may come from a user's template (``data archive --name``),
so it is checked as untrusted text: no absolute path, no ``..`` component, no NUL, nothing
under ``.ensml``, no component longer than the system allows, and no symbolic link on the way
(a link can lead out of the folder, and two names for one file would confuse the ledger).
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from ensml.errors import EnsmlError

#: ensml's own folder inside every output folder: ledger, lock, staging.
STATE_DIR = ".ensml"
_NAME_MAX = 255  # bytes per component on Linux, macOS and the usual cluster file systems


def _problem(text: object) -> str | None:
    """Why ``text`` is not a relative output name (a phrase after the name), or None."""
    if not isinstance(text, str):  # bytes paths: keep one kind of name in the ledger
        return "must be text"
    if "\0" in text:
        return "holds a NUL character"
    if text.startswith("/"):
        return "is absolute; names are relative to out_dir"
    parts = [p for p in text.split("/") if p not in ("", ".")]
    if not parts:
        return "is empty"
    if ".." in parts:
        return "leaves out_dir ('..')"
    if parts[0] == STATE_DIR:
        return f"is inside {STATE_DIR}, ensml's own folder"
    for part in parts:
        try:
            if len(os.fsencode(part)) > _NAME_MAX:
                return f"has a component longer than {_NAME_MAX} bytes"
        except UnicodeError:
            return "cannot be encoded as a file name"
    return None


def normalise(name: str | os.PathLike[str]) -> str:
    """``name`` as the ledger writes it (``a/b.nc``), or raise why it is not a relative name.

    Only the text is checked; :func:`resolve` also checks the file system.

    Raises
    ------
    EnsmlError
        One line quoting the name: empty, absolute, a NUL character, a ``..`` component, a
        component too long, or under ``.ensml``.
    """
    text = os.fspath(name)
    problem = _problem(text)
    if problem:
        raise EnsmlError(f"output name {text!r} {problem}")
    return "/".join(p for p in text.split("/") if p not in ("", "."))


def resolve(root: Path, name: str | os.PathLike[str]) -> tuple[str, Path]:
    """The ledger name and the path of ``name`` in the output folder ``root``.

    ``root`` must be the folder's real path (:func:`os.path.realpath`). No component of the
    name may be a symbolic link: the path returned always lies inside ``root``.

    Raises
    ------
    EnsmlError
        As :func:`normalise`, or when a component is a symbolic link (naming where it points)
        or a file where a folder is needed.
    """
    key = normalise(name)
    path = root
    parts = key.split("/")
    for i, part in enumerate(parts):
        path = path / part
        if os.path.islink(path):
            target = os.readlink(path)
            raise EnsmlError(
                f"output name {key!r}: {'/'.join(parts[: i + 1])} is a symbolic link (to {target}); "
                "ensml writes only real files inside out_dir"
            )
        if i < len(parts) - 1 and path.exists() and not path.is_dir():
            raise EnsmlError(f"output name {key!r}: {'/'.join(parts[: i + 1])} is a file, not a folder")
    return key, path


def format_name(template: str, **fields: Any) -> str:
    """``template.format(**fields)`` checked as an output name (:func:`normalise`).

    ``forecast_{init:%Y%m%d}.nc`` with ``init=datetime(2020, 1, 1)`` gives
    ``forecast_20200101.nc``; ``../escape_{init}.nc`` is refused.

    Raises
    ------
    EnsmlError
        One line when a field is unknown or its format does not apply, or the result is not a
        relative name inside out_dir.
    """
    known = ", ".join(sorted(fields)) or "none"
    try:
        text = template.format(**fields)
    except KeyError as exc:
        raise EnsmlError(f"name template {template!r} uses an unknown field {exc} (known: {known})") from None
    except IndexError:
        raise EnsmlError(f"name template {template!r} uses a field without a name (known: {known})") from None
    except (ValueError, AttributeError, TypeError) as exc:
        raise EnsmlError(f"name template {template!r} cannot be formatted: {exc}") from None
    problem = _problem(text)
    if problem:
        raise EnsmlError(f"name template {template!r} gives {text!r}, which {problem}")
    return normalise(text)


def distinct(names: Iterable[str], sources: Mapping[str, Any] | None = None) -> list[str]:
    """The normalised ``names``, raising if two are the same output (e.g. a template without a
    field that varies). ``sources`` maps a name to what produced it, for the message."""
    seen: dict[str, str] = {}
    for raw in names:
        key = normalise(raw)
        if key in seen:
            what = f" (from {sources[seen[key]]!s} and {sources[raw]!s})" if sources else ""
            raise EnsmlError(f"two outputs would both be written to {key!r}{what}")
        seen[key] = raw
    return list(seen)


__all__ = ["STATE_DIR", "distinct", "format_name", "normalise", "resolve"]
