"""``ensml postprocess``: apply trained checkpoints to forecast files on a dask cluster, exactly once."""

from __future__ import annotations

from ensml.cli.verb import run_function

#: The command this module runs: its options and help are the library function's.
COMMANDS = {"postprocess": "ensml.postprocess.run:postprocess"}
SUMMARIES = {"postprocess": "Post-process forecast files with trained checkpoints into calibrated products."}


def run(args: list[str]) -> None:
    """Run ``ensml postprocess ARGS``."""
    run_function(COMMANDS["postprocess"], args)
