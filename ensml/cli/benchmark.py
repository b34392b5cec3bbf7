"""``ensml benchmark``: train every model of the zoo on the embedded data and compare them in one table."""

from __future__ import annotations

from ensml.cli.verb import run_function

#: The command this module runs: its options and help are the library function's.
COMMANDS = {"benchmark": "ensml.experiments.benchmark:benchmark"}
SUMMARIES = {"benchmark": "Train and score every model; write benchmark.csv and benchmark.md to out_dir."}


def run(args: list[str]) -> None:
    """Run ``ensml benchmark ARGS``."""
    run_function(COMMANDS["benchmark"], args)
