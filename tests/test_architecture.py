"""The architecture holds: one direction of imports between the rooms (docs/architecture.md).

The contracts live in ``pyproject.toml`` (``[tool.importlinter]``); import-linter builds the
import graph of ``ensml`` and fails on any import that goes up a layer or across independent
siblings, and on a reader in ``data/layouts`` importing the entry point above it.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Callable
from pathlib import Path
from types import FrameType

import dask
import pytest

from tests.conftest import SMOKE, tiny_data_args

REPO = Path(__file__).resolve().parents[1]


def test_import_layers_hold(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture) -> None:
    from importlinter.cli import lint_imports

    monkeypatch.chdir(REPO)
    status = lint_imports(config_filename=str(REPO / "pyproject.toml"), no_cache=True)
    out = capsys.readouterr().out
    assert status == 0, out
    assert "BROKEN" not in out and out.count("KEPT") >= 2


# -- The spines: which ensml modules a sample crosses (docs/architecture.md, "The spines") -----------
# Counted: every ensml module on the call stack when xarray opens or reads a file, a network runs
# or a score is computed. Not counted: the bottom layer that every room uses (vocabulary, times,
# run metadata, errors, progress) and the verb's command-line front. A package of readers, networks,
# scores or output files counts once, as the page lists it.
SHARED = (
    "ensml.names",
    "ensml.times",
    "ensml.predictions",
    "ensml.errors",
    "ensml.progress",
    "ensml.logs",
    "ensml.provenance",
    "ensml.compat",
    "ensml.cli.",
)
FRONT = {"fit": ("ensml.train.lightning_cli",)}
GROUPS = ("ensml.data.layouts", "ensml.data.outputs", "ensml.models", "ensml.scores")
READS = {"open_dataset", "open_mfdataset", "open_zarr", "__getitem__", "_getitem"}
LIMIT = 8
#: evaluate's spine since the predictive families (docs/architecture.md, "ensml evaluate").
EVALUATE_LIMIT = 11
#: evaluate's steps a run of Gaussian variables without predictions does not take.
EVALUATE_OPTIONAL = {"ensml.data.runfiles", "ensml.verify.events", "ensml.verify.event_tables"}
#: fit's start-up: the data module's checks of the files and the normalisation statistics.
STARTUP = {"ensml.data.datamodule", "ensml.data.stats"}


def _step(module: str) -> str:
    """The spine step a module belongs to: its package group, or itself."""
    return next((g for g in GROUPS if module == g or module.startswith(g + ".")), module)


def _documented_spine(verb: str) -> set[str]:
    """The steps docs/architecture.md lists for ``ensml <verb>`` (after its command-line front)."""
    page = (REPO / "docs" / "architecture.md").read_text(encoding="utf-8")
    block = page.split(f"**`ensml {verb}`**", 1)[1].split("\n\n", 2)[1]
    paths = re.findall(r"`([a-z_/]+(?:\.py|/))`", block)
    steps = {_step("ensml." + p.removesuffix(".py").removesuffix("/").replace("/", ".")) for p in paths}
    return {s for s in steps if not s.startswith(SHARED + FRONT.get(verb, ()))}


def _traced_events(run: Callable[[], object], verb: str) -> set[frozenset[str]]:
    """The steps on the stack whenever xarray opens or reads a file, a network runs or a score is computed."""
    skip = SHARED + FRONT.get(verb, ())
    seen: set[frozenset[str]] = set()

    def on_call(frame: FrameType, event: str, arg: object) -> None:  # a global trace: calls only
        module, code = frame.f_globals.get("__name__", ""), frame.f_code.co_name
        reading = module.startswith("xarray.backends") and code in READS
        network = module.startswith("ensml.models") and code == "forward"
        computing = network or module.startswith("ensml.scores")
        if not (reading or computing):
            return
        names, outer = [], frame  # the stack's modules (inspect.getouterframes reads every source file)
        while outer is not None:
            names.append(outer.f_globals.get("__name__", ""))
            if outer.f_code.co_name == "<module>" and names[-1].startswith("ensml."):
                return  # a module being imported (a lazy import in a verb), not a sample on its way
            outer = outer.f_back
        steps = {_step(n) for n in names if n.startswith("ensml.") and not n.startswith(skip)}
        if steps - {_step(module)}:  # called by another ensml module: a sample on its way, not an import
            seen.add(frozenset(steps))

    with dask.config.set(scheduler="synchronous"):
        sys.settrace(on_call)
        try:
            run()
        finally:
            sys.settrace(None)
    return seen


def _traced_spine(run: Callable[[], object], verb: str) -> set[str]:
    """Every step of :func:`_traced_events`."""
    return set().union(*_traced_events(run, verb))


def test_fit_spine_is_the_documented_one(tiny_data: dict[str, Path], tmp_path: Path, monkeypatch) -> None:
    from ensml.cli.main import main

    monkeypatch.chdir(tmp_path)
    short = ["--trainer.max_epochs=1", "--trainer.limit_train_batches=1", "--trainer.limit_val_batches=1"]
    args = ["fit", "--config", SMOKE, *tiny_data_args(tiny_data), *short]
    events = _traced_events(lambda: main(args), "fit")
    # Before training, the data module checks the files and computes the normalisation statistics:
    # the same reader, once; a sample's own way (the training and validation steps) is the rest.
    start_up = {s for s in events if STARTUP & s}
    samples = set().union(*(events - start_up))
    assert samples == _documented_spine("fit") and len(samples) <= LIMIT, sorted(samples)
    assert set().union(*start_up) <= STARTUP | {"ensml.data.open", "ensml.data.layouts"}, start_up


def test_evaluate_spine_is_at_most_eight_documented_modules(
    tiny_data: dict[str, Path], tmp_path: Path
) -> None:
    from ensml.cli.main import main

    documented = _documented_spine("evaluate")
    args = [
        "evaluate",
        f"--forecast={tiny_data['forecast']}",
        f"--analysis={tiny_data['analysis']}",
        f"--oracle={tiny_data['oracle']}",
        f"--out_dir={tmp_path / 'eval'}",
    ]
    traced = _traced_spine(lambda: main(args), "evaluate")
    # The run files' metadata (data/runfiles.py) is read only with --predictions, the threshold
    # scores (verify/events.py) only for a bounded variable; the rest always.
    assert documented - traced <= EVALUATE_OPTIONAL, (sorted(traced), sorted(documented))
    # Eleven with the families, more than the eight of the other verbs: docs/architecture.md says
    # which steps came with them and which could go.
    assert traced <= documented and len(documented) <= EVALUATE_LIMIT


#: Where a number of hours may still be written by hand outside ensml/times.py, and why: wall-clock
#: seconds shown as hours, a span in seconds checked against the last date, a lifetime kept to whole
#: seconds as the case windows were found with.
HOURS_BY_HAND = {"progress.py": 1, "data/physics/generate.py": 1, "verify/casefind.py": 1}


def test_nothing_but_times_converts_hours() -> None:
    """docs/architecture.md: lead times are timedelta64[ns] inside; hours only through times.py."""
    package = Path(__file__).parents[1] / "ensml"
    pattern = re.compile(r"timedelta64\(1,\s*['\"]h['\"]\)|timedelta64\[h\]|\b3600(?:e9)?\b")
    found = {}
    for path in sorted(package.rglob("*.py")):
        rel = path.relative_to(package).as_posix()
        if rel == "times.py":
            continue
        hits = [line for line in path.read_text().splitlines() if pattern.search(line)]
        if hits:
            found[rel] = len(hits)
    assert found == HOURS_BY_HAND, found
