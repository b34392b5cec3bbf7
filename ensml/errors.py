"""The one exception type for user-facing problems, and the exit codes of ``ensml``.

Anything a user can cause (a missing variable, a wrong option, a corrupt file, a full disk)
raises :class:`EnsmlError` with a one-line message naming the file, the variable and what was
expected. The CLI prints it as ``ensml: <message>`` and exits with the error's
:attr:`~EnsmlError.exit_code`; other exceptions are bugs and keep their traceback.

Exit codes (:data:`EXIT_CODES`): 0 everything asked for was done; 1 nothing was done (a bad
argument, input or output folder); 2 the work ran but part of it failed (the last line says
how much); 130 and 143 interrupted by SIGINT (Ctrl-C) or SIGTERM, after cleaning up.
"""

from __future__ import annotations

import errno
import os
import signal
from collections.abc import Iterator
from contextlib import contextmanager

#: ``ensml``'s exit codes and what they mean.
EXIT_CODES = {
    0: "everything asked for was done",
    1: "nothing was done: a bad argument, option, input file or output folder (one line says which)",
    2: "the work ran but part of it failed (the last line says how much; the rest is complete)",
    130: "interrupted by SIGINT (Ctrl-C); what was complete is kept, temporaries removed",
    143: "interrupted by SIGTERM (e.g. scancel, a job's time limit); as for 130",
}

#: What the user reads for the OS errors a write can meet (the one errno-to-text map; others
#: use the system's text).
OS_REASONS = {
    errno.ENOSPC: "no space left on device",
    errno.EDQUOT: "disk quota exceeded",
    errno.EROFS: "read-only file system",
    errno.EFBIG: "file too large",
    errno.EACCES: "permission denied",
    errno.EPERM: "permission denied",
}


class EnsmlError(Exception):
    """A problem with the user's input, options or files (not a bug in ensml)."""

    #: The process exit status the CLI gives this error.
    exit_code = 1

    def __init__(self, message: str) -> None:
        message = str(message)
        # torch's DataLoader re-raises a worker's exception with the worker traceback in the
        # message: keep only the original one-line message.
        marker = "EnsmlError: "
        if message.startswith("Caught EnsmlError") and marker in message:
            message = message.rsplit(marker, 1)[1]
        # Keep messages on one line so the CLI can print them as such.
        super().__init__(" ".join(message.split()))


class PartialFailure(EnsmlError):
    """The work ran, but part of it failed (e.g. some post-processing units): exit status 2."""

    exit_code = 2


#: How the line of a run stopped by a signal begins, in every verb.
SIGNAL_WORDS = {signal.SIGINT: "interrupted (Ctrl-C)", signal.SIGTERM: "terminated (SIGTERM)"}
#: What it says by default after those words.
KEPT = "; complete outputs are kept, run the same command to finish"


def interrupted_line(signum: int, detail: str = KEPT) -> str:
    """``interrupted (Ctrl-C)`` or ``terminated (SIGTERM)`` (:data:`SIGNAL_WORDS`), then ``detail``."""
    return SIGNAL_WORDS.get(signal.Signals(signum), f"stopped by {signal.Signals(signum).name}") + detail


class Interrupted(EnsmlError):
    """The run was stopped by a signal and cleaned up: exit status 128 + the signal's number."""

    def __init__(self, message: str, signum: int = signal.SIGINT) -> None:
        super().__init__(message)
        self.signum = int(signum)
        self.exit_code = 128 + self.signum


@contextmanager
def signal_as_interrupted(signum: int, message: str | None = None) -> Iterator[None]:
    """While inside, signal ``signum`` raises :class:`Interrupted` (``message``, by default
    :func:`interrupted_line`; exit 128 + ``signum``) in this process, so cleanup runs on the
    way out as for any error. A forked child (a data-loader worker) gets ``KeyboardInterrupt``,
    Python's own. Outside the main thread (an embedding program), the handlers are left alone."""
    owner = os.getpid()
    message = interrupted_line(signum) if message is None else message

    def interrupt(signum: int, frame: object) -> None:
        if os.getpid() != owner:
            raise KeyboardInterrupt
        raise Interrupted(message, signum)

    try:
        previous = signal.signal(signum, interrupt)
    except ValueError:  # not the main thread
        yield
        return
    try:
        yield
    finally:
        signal.signal(signum, previous)


def exception_reason(exc: BaseException) -> str:
    """The first line of a third-party exception's message (its type name if it has none)."""
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


__all__ = [
    "EXIT_CODES",
    "SIGNAL_WORDS",
    "EnsmlError",
    "Interrupted",
    "PartialFailure",
    "exception_reason",
    "interrupted_line",
    "signal_as_interrupted",
]
