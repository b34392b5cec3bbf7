"""``ensml fit|validate|test|predict --help`` print the stored text, which is the live one."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from ensml.cli.fit import SUMMARIES
from ensml.cli.lightning_help import installed, render, stored

REGENERATE = "run `python -m ensml.cli.lightning_help` and commit ensml/cli/lightning_help.json"


@pytest.mark.parametrize("verb", list(SUMMARIES))
def test_stored_help_is_what_lightningcli_prints(verb: str) -> None:
    live = render(verb)
    assert live.startswith(f"usage: ensml [options] {verb} ") and "--data.forecast" in live
    text = stored(verb)
    if text is None:  # other library versions than the store's: the help is rendered live instead
        assert _help_in_subprocess(verb)[0] == live
        return
    assert text == live, f"the stored help of {verb} is stale: {REGENERATE}"


def test_help_needs_neither_torch_nor_lightning() -> None:
    if stored("fit") is None:
        pytest.skip(f"the stored help is for {installed()} only: {REGENERATE}")
    text, modules = _help_in_subprocess("fit")
    assert text == stored("fit")
    assert not {"torch", "lightning", "xarray"} & modules


def _help_in_subprocess(verb: str) -> tuple[str, set[str]]:
    """What ``ensml VERB --help`` prints (80 columns) and the top-level modules it imported."""
    code = (
        "import sys; sys.argv[0] = 'ensml'\n"
        "from ensml.cli.main import main\n"
        f"status = main([{verb!r}, '--help'])\n"
        "print('\\x00' + ' '.join(sorted({m.split('.')[0] for m in sys.modules})), end='')\n"
        "sys.exit(status)\n"
    )
    env = {**os.environ, "COLUMNS": "82"}
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120)
    assert run.returncode == 0, run.stderr
    text, modules = run.stdout.rsplit("\x00", 1)
    return text, set(modules.split())
