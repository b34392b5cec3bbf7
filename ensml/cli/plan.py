"""``ensml plan-parallel``: recommend a spatial × data split of the devices for a U-Net task."""

from __future__ import annotations

from ensml.cli.verb import run_function

#: The command this module runs: its options and help are the library function's.
COMMANDS = {"plan-parallel": "ensml.experiments.plan:plan_parallel_cli"}
SUMMARIES = {"plan-parallel": "Print the predicted cost of every data × lat × lon split of devices ranks."}


def run(args: list[str]) -> None:
    """Run ``ensml plan-parallel ARGS``."""
    run_function(COMMANDS["plan-parallel"], args)
