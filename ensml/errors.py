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
        # Keep messages on one line so the CLI can print them as such.
        super().__init__(" ".join(str(message).split()))
