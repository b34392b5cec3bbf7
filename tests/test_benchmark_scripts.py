"""Every benchmark script starts the way the guides run it (``python benchmarks/<name>.py``).

Run as a script, a benchmark's folder comes first on ``sys.path``, so a script named after a
package it imports shadows that package (``benchmarks/distributed.py`` hid dask's
``distributed`` from ``benchmarks/postprocess.py``). ``--help`` imports everything the script
imports and times nothing.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SCRIPTS = sorted(
    p.name for p in (ROOT / "benchmarks").glob("*.py") if "__main__" in p.read_text(encoding="utf-8")
)


def test_no_script_is_named_after_a_package_it_could_shadow() -> None:
    import importlib.util

    shadowing = [s for s in SCRIPTS if importlib.util.find_spec(s.removesuffix(".py")) is not None]
    assert not shadowing, f"benchmarks/ scripts named after installed modules: {shadowing}"


@pytest.mark.slow  # a Python process per script (about 5 s each)
@pytest.mark.parametrize("script", SCRIPTS)
def test_script_help_runs_as_the_guides_run_it(script: str) -> None:
    run = subprocess.run(
        [sys.executable, f"benchmarks/{script}", "--help"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert run.returncode == 0, run.stderr[-2000:]
    assert "usage:" in run.stdout
