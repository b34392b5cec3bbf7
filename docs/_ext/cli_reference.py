"""Sphinx extension: the command-line reference, generated from ensml's own parsers.

On ``builder-inited`` it writes ``cli.md`` beside ``conf.py`` (generated, gitignored): the output
of ``ensml --help`` and of every command's ``--help``, each under its own heading as a literal
block. The help comes from calling :func:`ensml.cli.main.main` in this process with stdout captured, the
program name set to ``ensml`` and ``COLUMNS`` fixed, so the page is the same on every machine. The
commands come from :func:`ensml.cli.main.commands`, so a new command appears here without editing
the docs.
"""

from __future__ import annotations

import contextlib
import io
import os
import re
import sys
from collections.abc import Iterator
from pathlib import Path

from sphinx.application import Sphinx
from sphinx.errors import ExtensionError

PAGE = "cli.md"
COLUMNS = "100"


def commands() -> list[list[str]]:
    """Every command of ``ensml`` as its words: ``[["fit"], …, ["data", "synth"], …]``."""
    from ensml.cli.main import commands as ensml_commands

    return [words.split() for words, _ in ensml_commands()]


@contextlib.contextmanager
def _as_terminal() -> Iterator[None]:
    """Run as ``ensml`` in a terminal ``COLUMNS`` wide (argparse reads both)."""
    argv0, columns = sys.argv[0] if sys.argv else None, os.environ.get("COLUMNS")
    if sys.argv:
        sys.argv[0] = "ensml"
    else:
        sys.argv.append("ensml")
    os.environ["COLUMNS"] = COLUMNS
    try:
        yield
    finally:
        if argv0 is None:
            sys.argv.clear()
        else:
            sys.argv[0] = argv0
        if columns is None:
            os.environ.pop("COLUMNS", None)
        else:
            os.environ["COLUMNS"] = columns


def help_text(words: list[str]) -> str:
    """What ``ensml WORDS --help`` prints (raises if it fails or prints nothing)."""
    from ensml.cli.main import main

    out, err = io.StringIO(), io.StringIO()
    with _as_terminal(), contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            status = main([*words, "--help"])
        except SystemExit as exc:  # argparse exits after printing the help
            status = exc.code
    text = out.getvalue().rstrip()
    if status not in (0, None) or not text:
        command = " ".join(["ensml", *words, "--help"])
        raise ExtensionError(f"{command} exited with {status!r}: {err.getvalue().strip() or text}")
    return text


def _literal(text: str) -> str:
    """A fenced code block holding ``text`` verbatim (the fence longer than any run of backticks)."""
    fence = "`" * max(3, 1 + max((len(run) for run in re.findall("`+", text)), default=0))
    return f"{fence}text\n{text}\n{fence}"


def render() -> str:
    """The Markdown of the command-line reference page."""
    parts = [
        "# Command-line reference",
        "",
        "Every command's `--help`, generated from ensml's parsers when these pages are built. Every "
        "command takes `--config file.yaml` and dotted overrides (`--data.k 3`); see "
        "[the command line](guide/command-line.md) for how they combine.",
        "",
        "## `ensml`",
        "",
        _literal(help_text([])),
    ]
    for words in commands():
        parts += ["", f"## `ensml {' '.join(words)}`", "", _literal(help_text(words))]
    return "\n".join(parts) + "\n"


def write_page(app: Sphinx) -> None:
    """Write ``cli.md`` into the source folder, touching it only when its text changes."""
    path = Path(app.srcdir) / PAGE
    text = render()
    if path.is_file() and path.read_text(encoding="utf-8") == text:
        return
    tmp = path.with_name(f".{PAGE}.{os.getpid()}.tmp")
    tmp.write_text(text, encoding="utf-8")
    os.replace(tmp, path)  # concurrent builds each leave a whole page


def setup(app: Sphinx) -> dict:
    app.connect("builder-inited", write_page)
    return {"version": "1", "parallel_read_safe": True, "parallel_write_safe": True}
