"""``ensml data synth|physics|archive``: the embedded synthetic ensemble, the physics testbed, and a
forecast split into one file per init."""

from __future__ import annotations

import os

from ensml.cli.verb import run_function

#: The commands this module runs: their options and help are the library functions'.
COMMANDS = {
    "data synth": "ensml.data.synth.generate:synth",
    "data physics": "ensml.data.physics.generate:physics",
    "data archive": "ensml.data.archive:archive",
}
SUMMARIES = {
    "data synth": "Generate a synthetic ensemble with a known predictive distribution.",
    "data physics": "Run a Held–Suarez primitive-equation ensemble and its verifying truth run.",
    "data archive": "Write every init time of forecast (within period) to its own netCDF file.",
}


def run(args: list[str]) -> None:
    """Run ``ensml data synth|physics|archive ARGS`` and say what was written."""
    commands = {words.split()[1]: target for words, target in COMMANDS.items()}
    written = run_function(commands, args)
    if isinstance(written, dict):  # synth, physics: {"forecast": path, …}
        folder = next(iter(written.values())).parent
        command = next(arg for arg in args[1:] if arg in commands)
        print(f"ensml data {command}: wrote {', '.join(p.name for p in written.values())} to {folder}")
    elif written:  # archive: the files, in init order
        folder = os.path.commonpath([p.parent for p in written])
        print(f"ensml data archive: wrote {len(written)} files to {folder}")
