"""``ensml plan-parallel`` and ``ensml plan-memory``: plan how a U-Net task fits the hardware."""

from __future__ import annotations

from ensml.cli.verb import run_function

#: The commands this module runs: their options and help are the library functions'.
COMMANDS = {
    "plan-parallel": "ensml.experiments.plan:plan_parallel_cli",
    "plan-memory": "ensml.experiments.memory_plan:plan_memory_cli",
}
SUMMARIES = {
    "plan-parallel": "Print the predicted cost of every data × lat × lon split of devices ranks.",
    "plan-memory": "Predict step time and peak memory of every memory policy for a fit config.",
}


def run(args: list[str]) -> None:
    """Run ``ensml plan-parallel ARGS`` or ``ensml plan-memory ARGS``."""
    run_function(COMMANDS[args[0]], args)
