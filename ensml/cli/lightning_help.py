"""``ensml fit|validate|test|predict --help`` without building LightningCLI's parser.

LightningCLI builds its parser from the signatures of the trainer, the tasks and the data module,
which imports torch and Lightning: about 4.5 s before a line of help. The four help texts are
rendered once (``python -m ensml.cli.lightning_help``) into ``lightning_help.json`` beside this
module, with the versions of the libraries that shape them; a plain ``ensml VERB --help`` prints
the stored text when those versions are the installed ones, and renders it live otherwise.
``tests/cli/test_lightning_help.py`` fails when the stored text differs from the live one, so an
option added to a task or the data module cannot leave it stale.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import sys
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path

#: The stored help texts and the versions they were rendered with.
STORE = Path(__file__).with_name("lightning_help.json")
#: The libraries whose versions shape the options (the trainer's signature, the parser's layout).
LIBRARIES = ("lightning", "jsonargparse", "torch")
#: The width the texts are rendered at (argparse's default without a terminal).
COLUMNS = 80
HELP_FLAGS = (["-h"], ["--help"])


def installed() -> dict[str, str]:
    """The installed versions of :data:`LIBRARIES` ("" for one that is missing)."""

    def one(name: str) -> str:
        try:
            return version(name)
        except PackageNotFoundError:
            return ""

    return {name: one(name) for name in LIBRARIES}


def stored(verb: str) -> str | None:
    """The stored help of ``verb``, or None when it was rendered with other library versions."""
    try:
        store = json.loads(STORE.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if store.get("versions") != installed():
        return None
    return store.get("help", {}).get(verb)


def render(verb: str) -> str:
    """``ensml VERB --help`` as LightningCLI prints it, at :data:`COLUMNS` columns."""
    from ensml.train.lightning_cli import run_lightning

    out, before, argv0 = io.StringIO(), os.environ.get("COLUMNS"), sys.argv[0]
    os.environ["COLUMNS"] = str(COLUMNS + 2)  # argparse leaves two columns free
    sys.argv[0] = "ensml"  # the program name in the usage line
    try:
        with contextlib.redirect_stdout(out), contextlib.suppress(SystemExit):
            run_lightning([verb, "--help"])
    finally:
        sys.argv[0] = argv0
        if before is None:
            del os.environ["COLUMNS"]
        else:
            os.environ["COLUMNS"] = before
    return out.getvalue()


def write_store(verbs: tuple[str, ...]) -> None:
    """Render every verb's help and store it with the installed versions."""
    store = {"versions": installed(), "columns": COLUMNS, "help": {verb: render(verb) for verb in verbs}}
    STORE.write_text(json.dumps(store, indent=1, sort_keys=True) + "\n", encoding="utf-8")


if __name__ == "__main__":  # pragma: no cover - a developer's tool
    from ensml.cli.fit import SUMMARIES

    write_store(tuple(SUMMARIES))
    print(f"wrote {STORE}", file=sys.stderr)
