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


@pytest.mark.slow  # a small archive, two local workers, four evaluate runs and two reports (about a minute)
@pytest.mark.distributed
@pytest.mark.timeout(600)
def test_evaluate_benchmark_runs_at_its_tiny_setting() -> None:
    """``benchmarks/evaluate.py`` end to end on a tiny grid: its lines, the tables checked equal."""
    args = ["--n_lat", "16", "--n_lon", "32", "--inits", "8", "--lengths", "4,8", "--repeats", "1"]
    run = subprocess.run(
        [sys.executable, "benchmarks/evaluate.py", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=540,
    )
    assert run.returncode == 0, run.stderr[-2000:]
    out = run.stdout
    assert "tables identical" in out, out
    assert "evaluate 8 inits 16x32: 2 workers " in out and "inits/s vs one process " in out, out
    assert "evaluate peak memory per worker (16x32, init_block 4): 4 inits " in out, out
    assert "report peak memory per worker (16x32, init_block 4): 4 inits " in out, out
