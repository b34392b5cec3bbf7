"""The command that produced an output, for the ``history`` and provenance attributes."""

from __future__ import annotations

import shlex
import sys
from collections.abc import Sequence

_COMMAND: list[str] = []


def set_command(args: Sequence[str]) -> None:
    """Record the arguments of the running ``ensml`` command (called by the CLI)."""
    _COMMAND[:] = ["ensml", *args]


def command() -> str:
    """The running command line: what the CLI recorded, else this process's argv."""
    return shlex.join(_COMMAND or ["python", *sys.argv])
