"""Every ``ensml COMMAND --help`` prints the stored text, which is what the live parser prints."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from ensml.cli.help_store import every_command, installed, render, stored
from ensml.cli.main import VERBS, verb_module
from ensml.cli.verb import load, summary

REGENERATE = "run `python -m ensml.cli.help_store` and commit ensml/cli/help_store.json"


@pytest.mark.parametrize("words", every_command())
@pytest.mark.slow  # builds every verb's parser
def test_stored_help_is_what_the_parser_prints(words: str) -> None:
    live = render(words)
    usage = live.splitlines()[0].split()
    assert usage[:2] == ["usage:", "ensml"] and words.split()[0] in usage, live[:200]
    text = stored(words)
    if text is None:  # other library versions than the store's: the help is rendered live instead
        assert _help_in_subprocess(words)[0] == live
        return
    assert text == live, f"the stored help of `ensml {words}` is stale: {REGENERATE}"


@pytest.mark.parametrize("words", ["fit", "evaluate", "data synth", "postprocess"])
def test_help_needs_neither_torch_nor_xarray(words: str) -> None:
    if stored(words) is None:
        pytest.skip(f"the stored help is for {installed()} only: {REGENERATE}")
    text, modules = _help_in_subprocess(words)
    assert text == stored(words)
    assert not {"torch", "lightning", "xarray", "dask"} & modules


def test_the_summaries_are_the_first_lines_of_the_library_docstrings() -> None:
    for verb in VERBS:
        module = verb_module(verb)
        for words, target in module.COMMANDS.items():
            assert module.SUMMARIES[words] == summary(load(target)), words


def _help_in_subprocess(words: str) -> tuple[str, set[str]]:
    """What ``ensml WORDS --help`` prints (80 columns) and the top-level modules it imported."""
    code = (
        "import sys; sys.argv[0] = 'ensml'\n"
        "from ensml.cli.main import main\n"
        f"status = main({[*words.split(), '--help']!r})\n"
        "print('\\x00' + ' '.join(sorted({m.split('.')[0] for m in sys.modules})), end='')\n"
        "sys.exit(status)\n"
    )
    env = {**os.environ, "COLUMNS": "82"}
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120)
    assert run.returncode == 0, run.stderr
    text, modules = run.stdout.rsplit("\x00", 1)
    return text, set(modules.split())
