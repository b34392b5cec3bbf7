"""What the jsonargparse verbs share: parse the arguments into one typed function and call it.

A verb's function (in its module of :mod:`ensml.cli`) declares every option with its type, range
and default; jsonargparse reads ``--config file.yaml`` and dotted overrides into it, checks each
value against its type (a range type such as ``PositiveInt`` included) and reports a bad one as
an :class:`~argparse.ArgumentError`, which :func:`ensml.cli.main.main` prints as one line.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any


def run_function(target: Callable[..., Any] | dict[str, Callable[..., Any]], args: Sequence[str]) -> None:
    """Parse ``args`` (the verb's name first) into ``target`` (a function, or sub-commands) and run it."""
    from jsonargparse import auto_cli

    prog = f"ensml {args[0]}"
    # No abbreviations: `--limit -3` must not quietly mean `--limit_train_batches -3`.
    auto_cli(
        target, args=list(args[1:]), as_positional=False, exit_on_error=False, prog=prog, allow_abbrev=False
    )


def summary(fn: Callable[..., Any]) -> str:
    """The first line of ``fn``'s docstring (its one-line summary in ``ensml --help``)."""
    doc = (fn.__doc__ or "").strip()
    return doc.splitlines()[0].replace("``", "") if doc else ""


__all__ = ["run_function", "summary"]
