"""``ensml prune``: a pruned copy of a task checkpoint (magnitude or channels), optionally retrained."""

from __future__ import annotations

from ensml.cli.verb import run_function

#: The command this module runs: its options and help are the library function's.
COMMANDS = {"prune": "ensml.experiments.prune:prune_cli"}
SUMMARIES = {"prune": "Write a pruned copy of a task checkpoint that every other verb takes."}


def run(args: list[str]) -> None:
    """Run ``ensml prune ARGS``."""
    run_function(COMMANDS[args[0]], args)
