"""Every ``ensml COMMAND --help``, stored, so that it answers without importing the library.

A command's options are declared once, by the library function it runs (its signature and
numpydoc docstring: :mod:`ensml.verify.evaluate`, :mod:`ensml.postprocess.run`, …) or, for the
Lightning verbs, by the trainer, the tasks and the data module. Building the parser from them
imports xarray, torch or Lightning: 1–4.5 s before a line of help. So the help texts are rendered
once (``python -m ensml.cli.help_store``) into ``help_store.json`` beside this module, with the
versions of the libraries that shape them; a plain ``ensml COMMAND --help`` prints the stored
text when those versions are the installed ones and renders it live otherwise.
``tests/cli/test_help_store.py`` fails when a stored text differs from the live one, so an option
added to a function, a task or the data module cannot leave it stale.
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
from collections.abc import Sequence
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path

#: The stored help texts and the versions they were rendered with.
STORE = Path(__file__).with_name("help_store.json")
#: The libraries whose versions shape the options (the trainer's signature, the parser's layout).
LIBRARIES = ("lightning", "jsonargparse", "torch")
#: The width the texts are rendered at (argparse's default without a terminal).
COLUMNS = 80
HELP_FLAGS = ("-h", "--help")
_LIVE: list[bool] = []  # set while rendering: the store is not consulted


def installed() -> dict[str, str]:
    """The installed versions of :data:`LIBRARIES` ("" for one that is missing)."""

    def one(name: str) -> str:
        try:
            return version(name)
        except PackageNotFoundError:
            return ""

    return {name: one(name) for name in LIBRARIES}


def stored(words: str) -> str | None:
    """The stored help of ``ensml WORDS``, or None (other library versions, or none stored)."""
    if _LIVE:
        return None
    try:
        store = json.loads(STORE.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if store.get("versions") != installed():
        return None
    return store.get("help", {}).get(words)


def print_stored(args: Sequence[str]) -> bool:
    """Print the stored help if ``args`` ask only for it (``data synth --help``); say if it did."""
    *words, flag = list(args) or [""]
    if flag not in HELP_FLAGS or not words or any(w.startswith("-") for w in words):
        return False
    text = stored(" ".join(words))
    if text is not None:
        sys.stdout.write(text)
    return text is not None


def render(words: str) -> str:
    """``ensml WORDS --help`` as the live parser prints it in a new process, at :data:`COLUMNS`
    columns (a new process: LightningCLI lists the callback classes imported so far)."""
    code = f"from ensml.cli.help_store import _print_live; _print_live({words!r})"
    env = {**os.environ, "COLUMNS": str(COLUMNS + 2)}  # argparse leaves two columns free
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, check=False)
    if run.returncode != 0:
        raise RuntimeError(f"ensml {words} --help failed: {run.stderr.strip()}")
    return run.stdout


def _print_live(words: str) -> None:
    """Print ``ensml WORDS --help`` from the live parser (in :func:`render`'s process)."""
    from ensml.cli.main import verb_module

    args = [*words.split(), "--help"]
    sys.argv[0] = "ensml"  # the program name in the usage line
    _LIVE.append(True)
    with contextlib.suppress(SystemExit):
        verb_module(args[0]).run(args)


def every_command() -> list[str]:
    """The words of every command with a ``--help``: each verb, ``data`` and its sub-commands."""
    from ensml.cli.main import commands

    words = [w for w, _ in commands()]
    groups = {w.split()[0] for w in words if " " in w}
    return sorted(set(words) | groups)


def write_store() -> None:
    """Render every command's help and store it with the installed versions."""
    texts = {words: render(words) for words in every_command()}
    store = {"versions": installed(), "columns": COLUMNS, "help": texts}
    STORE.write_text(json.dumps(store, indent=1, sort_keys=True) + "\n", encoding="utf-8")


if __name__ == "__main__":  # pragma: no cover - a developer's tool
    write_store()
    print(f"wrote {STORE}", file=sys.stderr)
