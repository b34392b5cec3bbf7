"""The one exception type for user-facing problems.

Anything a user can cause (a missing variable, a wrong option, a corrupt file) raises
:class:`EnsmlError` with a one-line message naming the file, the variable and what was expected.
The CLI prints it as ``ensml: <message>`` and exits non-zero; other exceptions are bugs and keep
their traceback.
"""

from __future__ import annotations


class EnsmlError(Exception):
    """A problem with the user's input, options or files (not a bug in ensml)."""

    def __init__(self, message: str) -> None:
        message = str(message)
        # torch's DataLoader re-raises a worker's exception with the worker traceback in the
        # message: keep only the original one-line message.
        marker = "EnsmlError: "
        if message.startswith("Caught EnsmlError") and marker in message:
            message = message.rsplit(marker, 1)[1]
        # Keep messages on one line so the CLI can print them as such.
        super().__init__(" ".join(message.split()))


def exception_reason(exc: BaseException) -> str:
    """The first line of a third-party exception's message (its type name if it has none)."""
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__
