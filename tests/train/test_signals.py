"""Ctrl-C and SIGTERM in a Lightning verb: exit 130 and 143 with one ``ensml:`` line, the run
folder closed (Lightning alone exits 1 on Ctrl-C with its own "Detected KeyboardInterrupt")."""

from __future__ import annotations

import json
import os
import signal
import time
from pathlib import Path

import pytest

from tests.cli.process import finish, start_cli
from tests.conftest import SMOKE, tiny_data_args

pytestmark = pytest.mark.timeout(300)


@pytest.mark.slow
@pytest.mark.parametrize(
    ("sig", "code", "words"),
    [(signal.SIGINT, 130, "interrupted (Ctrl-C)"), (signal.SIGTERM, 143, "terminated (SIGTERM)")],
)
def test_a_signal_in_fit_ends_in_one_line_with_its_status(
    tiny_data, tmp_path: Path, sig, code, words
) -> None:
    pause = {"class_path": "tests.train.pausing.PauseAtEpoch", "init_args": {"epoch": 1}}
    args = ["fit", "--config", SMOKE, *tiny_data_args(tiny_data), "--trainer.max_epochs=3"]
    proc = start_cli([*args, f"--trainer.callbacks+={json.dumps(pause)}"], tmp_path)
    deadline = time.monotonic() + 150
    while not (tmp_path / "ready").exists():
        if proc.poll() is not None or time.monotonic() > deadline:
            pytest.fail(f"the run ended (or hung) before epoch 1:\n{finish(proc, 'fit').stdout[-3000:]}")
        time.sleep(0.05)
    os.killpg(proc.pid, sig)  # as a terminal's Ctrl-C or a batch system's kill: the whole group
    done = finish(proc, "the interrupted fit", timeout=60)
    lines = done.stdout.strip().splitlines()
    assert done.returncode == code, done.stdout[-3000:]
    assert lines[-1].startswith(f"ensml: {words}"), lines[-5:]
    assert "Detected KeyboardInterrupt" not in done.stdout and "Traceback" not in done.stdout
    # The epoch before the signal is kept: the run resumes from it.
    assert (tmp_path / "runs/smoke/checkpoints/last.ckpt").is_file()
