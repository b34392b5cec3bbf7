"""Ctrl-C (SIGINT) and SIGTERM in every verb that works for long: exit 130 or 143 with one
``ensml:`` line last and no traceback; what was complete is kept, nothing else is left.

Each run pauses at a known point of its work (``signal_hook/sitecustomize.py``: after the first
unit of work it counts, or as ``report`` starts to draw) and writes ``ready``; the test sends the
signal to its process group, as a terminal's Ctrl-C or a batch system's kill would, then lets
the run go on (to its next safe point, where a verb that defers signals stops).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.cli.process import cli_env, finish
from tests.conftest import SMOKE, tiny_data_args, write_smoke_config

pytestmark = pytest.mark.timeout(300)

HOOK = Path(__file__).parent / "signal_hook"
SIGNALS = {
    "SIGINT": (signal.SIGINT, 130, "ensml: interrupted (Ctrl-C)"),
    "SIGTERM": (signal.SIGTERM, 143, "ensml: terminated (SIGTERM)"),
}


def _verbs(tiny: dict[str, Path], ckpt: Path, work: Path) -> dict[str, tuple[list[str], str, str]]:
    """verb: (arguments, where it pauses, what its output folder keeps: nothing, or what was complete)."""
    data = [f"--forecast={tiny['forecast']}", f"--analysis={tiny['analysis']}", "--out_dir=out"]
    benchmark = Path(__file__).parents[2] / "configs/benchmark/smoke.yaml"
    pp, root = [*data[1:], "--cluster=none"], ["--trainer.default_root_dir=out"]
    fit = ["--config", str(write_smoke_config(tiny, work / "fit.yaml"))]
    return {
        "data synth": (
            ["data", "synth", "--out_dir=out", "--n_lat=8", "--n_lon=16", "--end=2017-01-31"],
            "advance",
            "nothing",
        ),
        "data archive": (["data", "archive", *data[:1], "--out_dir=out"], "advance", "complete"),
        "evaluate": (["evaluate", *data], "advance", "nothing"),
        "report": (["report", *data], "savefig", "nothing"),
        "postprocess": (
            ["postprocess", f"--checkpoints=[{ckpt}]", f"--forecasts={tiny['forecast']}", *pp],
            "advance",
            "complete",
        ),
        "predict": (
            ["predict", "--config", SMOKE, *tiny_data_args(tiny), f"--ckpt_path={ckpt}", *root],
            "advance",
            "nothing",
        ),
        "prune": (  # paused after the first epoch of retraining (Lightning's fit)
            ["prune", f"--ckpt_path={ckpt}", "--sparsity=0.5", "--out_dir=out", "--retrain_epochs=2", *fit],
            "advance",
            "nothing",
        ),
        "plan-memory": (  # paused after the first grid size is measured
            ["plan-memory", *fit, "--memory_budget=2GiB", "--steps=1", "--out=out/fit.yaml"],
            "advance",
            "nothing",
        ),
        "benchmark": (
            ["benchmark", f"--config={benchmark}", "--out_dir=out", "--data_dir=data"],
            "advance",
            "nothing",
        ),
    }


def _start(args: list[str], where: str, cwd: Path) -> subprocess.Popen:
    env = {**cli_env(), "ENSML_TEST_PAUSE": where}
    env["PYTHONPATH"] = os.pathsep.join([str(HOOK), env["PYTHONPATH"]])
    cmd = [sys.executable, "-m", "ensml.cli.main", *args]
    pipe = {"stdout": subprocess.PIPE, "stderr": subprocess.STDOUT, "text": True}
    # SIGINT back to its default in the child: a suite started as a background job (`cmd &` in a
    # script, nohup) inherits SIGINT ignored, and Python then installs no KeyboardInterrupt.
    return subprocess.Popen(cmd, cwd=cwd, env=env, start_new_session=True, preexec_fn=_default_sigint, **pipe)


def _default_sigint() -> None:
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def _left(out: Path) -> tuple[list[str], set[str]]:
    """The files in ``out`` (``.ensml`` aside) and the names its ledger records."""
    files = sorted(str(p.relative_to(out)) for p in out.rglob("*") if p.is_file() and ".ensml" not in p.parts)
    ledger = out / ".ensml" / "ledger.json"
    recorded = set(json.loads(ledger.read_text())["entries"]) if ledger.is_file() else set()
    return files, recorded


def _station_fit(work: Path) -> tuple[list[str], str, str]:
    """``ensml fit`` of a station config on small synthetic stations (made here, not a fixture:
    only this verb needs them); paused after the first lead of the station table."""
    import yaml

    from ensml.data.synth.generate import synth
    from tests.train.test_station_fit import station_config

    paths = synth(
        work / "stdata",
        n_lat=8,
        n_lon=16,
        start="2019-01-01",
        end="2019-02-28",
        members=4,
        surface=True,
        stations=8,
    )
    config = station_config(
        paths, Path("out"), train_period=["2019-01-01", "2019-01-31"], test_period=None, epochs=2
    )
    (work / "stations.yaml").write_text(yaml.safe_dump(config))
    return ["fit", "--config", str(work / "stations.yaml")], "advance", "nothing"


def _station_benchmark(work: Path) -> tuple[list[str], str, str]:
    """``ensml benchmark`` of the station smoke config on its data, made here beforehand (so that
    the pause falls in the benchmark's own work: after the first lead of its station table)."""
    import yaml

    from ensml.data.synth.generate import synth

    smoke = Path(__file__).parents[2] / "configs/benchmark/stations_smoke.yaml"
    config = yaml.safe_load(smoke.read_text())
    synth(work / "stdata", **config["synth"], stations=config["stations"])
    return ["benchmark", f"--config={smoke}", "--data_dir=stdata", "--out_dir=out"], "advance", "nothing"


VERBS = [
    "data synth",
    "data archive",
    "evaluate",
    "report",
    "postprocess",
    "predict",
    "prune",
    "plan-memory",
    "benchmark",
    "fit stations",
    "benchmark stations",
]


@pytest.mark.slow
@pytest.mark.parametrize("verb", VERBS)
@pytest.mark.parametrize("name", ["SIGINT", "SIGTERM"])
def test_a_signal_ends_every_verb_in_one_line_and_keeps_what_was_complete(
    verb: str, name: str, tiny_data, fitted: Path, tmp_path: Path
) -> None:
    if verb == "fit stations":
        args, where, keeps = _station_fit(tmp_path)
    elif verb == "benchmark stations":
        args, where, keeps = _station_benchmark(tmp_path)
    else:
        args, where, keeps = _verbs(tiny_data, fitted / "runs/smoke/checkpoints/best.ckpt", tmp_path)[verb]
    sig, code, words = SIGNALS[name]
    proc = _start(args, where, tmp_path)
    deadline = time.monotonic() + 200
    while not (tmp_path / "ready").exists():
        if proc.poll() is not None or time.monotonic() > deadline:
            pytest.fail(f"{verb} ended (or hung) before its pause:\n{finish(proc, verb).stdout[-3000:]}")
        time.sleep(0.05)
    os.killpg(proc.pid, sig)
    time.sleep(0.5)  # the signal is handled (at once, or noted for the next safe point)
    (tmp_path / "go").write_text("go\n")
    done = finish(proc, f"the interrupted {verb}", timeout=60)
    lines = [line for line in done.stdout.strip().splitlines() if line.strip()]
    assert done.returncode == code, done.stdout[-3000:]
    assert lines[-1].startswith(words), lines[-5:]
    assert "Traceback" not in done.stdout and "KeyboardInterrupt" not in done.stdout, done.stdout[-3000:]
    out = tmp_path / "out"
    if keeps == "nothing":  # a whole-folder verb, or a folder the run created: as if never run
        assert not out.exists() or _left(out)[0] == [], sorted(out.rglob("*"))
    else:  # the units done before the signal, complete and in the ledger; no temporary anywhere
        files, recorded = _left(out)
        assert files and set(files) <= recorded, (files, recorded)
    staging = [p for p in tmp_path.rglob("staging/*") if p.name != "lock"]
    assert not staging, staging
    assert not (tmp_path / "data").exists() or not [p for p in (tmp_path / "data").rglob("*.nc")]
