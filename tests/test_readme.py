"""The README is the front page and the guides in ``docs/guide/`` are the manual.

The README says what ensml is, gives the two Quickstart commands and the demo's tables, lists
every verb in one line each and links every guide; the guides hold the rest. These checks read
the Markdown only (fast); ``tests/test_docs.py`` checks the built site.
"""

from __future__ import annotations

import json
import re
import shlex
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
GUIDES = sorted((ROOT / "docs" / "guide").glob("*.md"))
# The demo's tables live in the README; the Quickstart guide includes them between these lines.
TABLES_START = "<!-- the demo's tables: docs/guide/quickstart.md includes them from here -->"
TABLES_END = "<!-- end of the demo's tables -->"
MAX_LINES = 250
_FENCE = re.compile(r"^```(\S*)\n(.*?)^```$", re.S | re.M)
_LINK = re.compile(r"(?<!!)\[[^\]]*\]\(([^)\s]+)\)")
SHELL = {"bash", "sh", "shell", "console"}


def _prose(text: str) -> str:
    """``text`` without its fenced code blocks."""
    return _FENCE.sub("", text)


def _commands(text: str) -> list[str]:
    """Every ``ensml …`` command line of the shell blocks in ``text``, continuations joined."""
    found = []
    for lang, body in _FENCE.findall(text):
        if lang not in SHELL:
            continue
        for line in body.replace("\\\n", " ").splitlines():
            line = line.strip().removeprefix("$ ").removeprefix(".venv/bin/")
            if line.startswith("ensml "):
                found.append(line)
    return found


def test_readme_is_a_front_page() -> None:
    text = README.read_text(encoding="utf-8")
    assert len(text.splitlines()) <= MAX_LINES
    sections = [line[3:] for line in _prose(text).splitlines() if line.startswith("## ")]
    assert sections == ["Quickstart", "The verbs", "Guides"]
    quickstart = text.split("## Quickstart\n", 1)[1].split("\n## ", 1)[0]
    blocks = [body for lang, body in _FENCE.findall(quickstart) if lang == "bash"]
    assert [line.split("#")[0].strip() for line in blocks[0].splitlines()] == ["make demo", "make test"]
    assert "`make check` runs the fast tier for everyday work." in quickstart.splitlines()


def test_readme_links_every_guide() -> None:
    text = README.read_text(encoding="utf-8")
    targets = [t.split("#")[0] for t in _LINK.findall(text) if not re.match(r"[a-z]+:", t)]
    missing = [t for t in targets if not (ROOT / t).exists()]
    assert not missing, missing
    linked = {t for t in targets if t.startswith("docs/guide/")}
    assert {f"docs/guide/{g.name}" for g in GUIDES} <= linked


def test_the_demo_tables_are_written_once() -> None:
    """In the README, between the markers the Quickstart guide includes them by."""
    readme = README.read_text(encoding="utf-8")
    assert readme.count(TABLES_START) == 1 and readme.count(TABLES_END) == 1
    tables = readme.split(TABLES_START, 1)[1].split(TABLES_END, 1)[0]
    assert "| variable | forecast | CRPS 48 h |" in tables and "spread model from 5 members" in tables
    guide = (ROOT / "docs/guide/quickstart.md").read_text(encoding="utf-8")
    assert f':start-after: "{TABLES_START}"' in guide and f':end-before: "{TABLES_END}"' in guide
    # the guides own their text: no other part of the README is included anywhere
    includes = [g.name for g in GUIDES if "../../README.md" in g.read_text(encoding="utf-8")]
    assert includes == ["quickstart.md"]


def test_the_verb_table_lists_every_verb() -> None:
    from ensml.cli.main import commands

    text = README.read_text(encoding="utf-8")
    table = text.split("## The verbs\n", 1)[1].split("\n## ", 1)[0]
    cells = [row.split("|")[1] for row in table.splitlines() if row.startswith("| `ensml ")]
    shown = {w.strip() for cell in cells for w in cell.strip().strip("`")[len("ensml ") :].split("/")}
    words = [w for w, _ in commands()]
    # "fit / validate / test / predict" is one row
    assert set(words) == shown, set(words) ^ shown
    assert len(cells) == len(set(cells))


@pytest.mark.parametrize("page", [README, *GUIDES], ids=lambda p: p.name)
def test_every_command_shown_names_a_command_and_its_options(page: Path) -> None:
    """Each ``ensml VERB --option …`` line in a shell block names a command that exists and options
    its ``--help`` lists (the stored help, which ``tests/cli`` keeps equal to the live one).
    ``--model.init_args.*`` options are the model class's, which the help lists only for the
    class it is given, so only ``--model`` is checked for them."""
    store = json.loads((ROOT / "ensml/cli/help_store.json").read_text(encoding="utf-8"))["help"]
    problems = []
    for line in _commands(page.read_text(encoding="utf-8")):
        words = [
            w for w in shlex.split(line, comments=True)[1:] if w not in ("-q", "--quiet", "-v", "--verbose")
        ]
        verb = " ".join(words[:2]) if words[0] == "data" else words[0]
        if verb not in store:
            problems.append(f"{line}: no command 'ensml {verb}'")
            continue
        for word in words:
            option = word.split("=", 1)[0]
            if option.startswith("--model.init_args."):
                option = "--model"
            if option.startswith("--") and not re.search(re.escape(option) + r"[\s,=\]]", store[verb]):
                problems.append(f"{line}: 'ensml {verb} --help' lists no {option}")
    assert not problems, problems
