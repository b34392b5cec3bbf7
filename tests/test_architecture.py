"""The architecture holds: one direction of imports between the rooms (docs/architecture.md).

The contracts live in ``pyproject.toml`` (``[tool.importlinter]``); import-linter builds the
import graph of ``ensml`` and fails on any import that goes up a layer or across independent
siblings, and on a reader in ``data/layouts`` importing the entry point above it. The same graph
(grimp's, static: well under a second) keeps the page's spines true, and a scan of the sources
keeps its "only here" statements true.
"""

from __future__ import annotations

import importlib
import re
from functools import cache
from pathlib import Path

import grimp
import pytest

REPO = Path(__file__).resolve().parents[1]
PACKAGE = REPO / "ensml"
PAGE = REPO / "docs" / "architecture.md"
#: A path the page names in backquotes: a module (``data/open.py``, ``cli/main.py:VERBS``) or a
#: folder (``data/layouts/``), relative to the package or to the repository.
PATH = re.compile(r"`([a-z_][\w/.-]*(?:\.py|/))(?::\w+)?`")


def test_import_layers_hold(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture) -> None:
    from importlinter.cli import lint_imports

    monkeypatch.chdir(REPO)
    status = lint_imports(config_filename=str(REPO / "pyproject.toml"), no_cache=True)
    out = capsys.readouterr().out
    assert status == 0, out
    assert "BROKEN" not in out and out.count("KEPT") >= 2


def test_every_path_the_page_names_exists() -> None:
    """A renamed or removed module makes the page wrong; say so here, not to the next reader."""
    paths = set(PATH.findall(PAGE.read_text(encoding="utf-8")))
    missing = sorted(p for p in paths if not (PACKAGE / p).exists() and not (REPO / p).exists())
    assert not missing, missing


# -- The spines: the files a reader enters from the command line to the files on disk -------------
# docs/architecture.md, "The spines": each verb's numbered list starts at the verb's module in
# cli/ (cli/main.py:VERBS) and every file after it is entered from one listed above it (or in the
# same step): it imports it, or names it as its library function (a cli module's COMMANDS).
#: The verbs whose spine the page must describe.
SPINES = ("evaluate", "fit", "postprocess")


@cache
def _imports() -> dict[str, set[str]]:
    """Every ensml module and the ensml modules it imports anywhere in its source (or runs by name)."""
    graph = grimp.build_graph("ensml", cache_dir=None)
    edges = {m: set(graph.find_modules_directly_imported_by(m)) for m in graph.modules}
    for module in (m for m in graph.modules if m.startswith("ensml.cli.")):
        commands = getattr(importlib.import_module(module), "COMMANDS", {})  # light: no torch here
        edges[module] |= {target.split(":")[0] for target in commands.values()}
    return edges


def _modules(path: str) -> set[str]:
    """The modules a step's path stands for: one module, or every module of a package folder."""
    name = "ensml." + path.removesuffix(".py").removesuffix("/").replace("/", ".")
    return {m for m in _imports() if m == name or (path.endswith("/") and m.startswith(name + "."))}


def _spine(verb: str) -> list[list[str]]:
    """The paths of each numbered step under ``**`ensml <verb>`**`` on the page."""
    page = PAGE.read_text(encoding="utf-8")
    assert f"**`ensml {verb}`**" in page, f"docs/architecture.md describes no spine of `ensml {verb}`"
    block = page.split(f"**`ensml {verb}`**", 1)[1].split("\n\n", 2)[1]
    items = re.split(r"^\d+\. ", block, flags=re.MULTILINE)[1:]
    return [PATH.findall(item) for item in items]


@pytest.mark.parametrize("verb", SPINES)
def test_spine_is_the_way_through_the_imports(verb: str) -> None:
    from ensml.cli.main import VERBS

    steps = _spine(verb)
    assert steps and steps[0][0] == f"cli/{VERBS[verb]}.py", steps[:1]
    entered: set[str] = set()
    for step in steps:
        for path in step:
            modules = _modules(path)
            assert modules, f"`ensml {verb}`: {path} is no module or package of ensml"
            others = set().union(*(_modules(p) for p in step if p != path))
            if entered:
                importers = entered | others
                assert any(_imports()[m] & modules for m in importers), (
                    f"`ensml {verb}`: nothing above {path} enters it"
                )
        entered |= set().union(*(_modules(p) for p in step))


# -- "Only here" statements (docs/architecture.md, "Facts written once") -----------------------


def _lines(pattern: str, skip: tuple[str, ...]) -> dict[str, int]:
    """How many lines of each ensml source outside ``skip`` (paths or folders) match ``pattern``."""
    found = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        rel = path.relative_to(PACKAGE).as_posix()
        if rel.startswith(skip):
            continue
        hits = [line for line in path.read_text(encoding="utf-8").splitlines() if re.search(pattern, line)]
        if hits:
            found[rel] = len(hits)
    return found


#: Where a number of hours may still be written by hand outside ensml/times.py, and why: wall-clock
#: seconds shown as hours, a span in seconds checked against the last date, a lifetime kept to whole
#: seconds as the case windows were found with.
HOURS_BY_HAND = {"progress.py": 1, "data/physics/generate.py": 1, "verify/casefind.py": 1}


def test_nothing_but_times_converts_hours() -> None:
    """Lead times are timedelta64[ns] inside; hours only through times.py."""
    pattern = r"timedelta64\(1,\s*['\"]h['\"]\)|timedelta64\[h\]|\b3600(?:e9)?\b"
    assert _lines(pattern, ("times.py",)) == HOURS_BY_HAND


def test_nothing_but_the_output_module_writes_a_dataset_or_removes_a_tree() -> None:
    """Every output file goes through data/outputs/ (its staging, its ledger)."""
    assert _lines(r"\.to_netcdf\(|\.to_zarr\(|rmtree\(", ("data/outputs/",)) == {}


#: Where torch.load runs outside the one checkpoint reader, and why: ``ensml prune``'s record of its
#: own pruning, read back from a checkpoint that it wrote; the station model's one reader (a file
#: of plain containers and tensors, read with ``weights_only=True``).
LOADS_BY_HAND = {"experiments/prune.py": 1, "train/station_model.py": 1}


def test_one_function_reads_checkpoints() -> None:
    """``train/checkpoint_file.py:read_checkpoint`` is the checkpoint reader of every verb."""
    assert _lines(r"torch\.load\(", ("train/checkpoint_file.py",)) == LOADS_BY_HAND


def test_networks_and_scores_never_import_lightning() -> None:
    graph = grimp.build_graph("ensml", cache_dir=None, include_external_packages=True)
    rooms = [m for m in graph.modules if m.startswith(("ensml.models", "ensml.scores"))]
    lightning = {"lightning", "pytorch_lightning", "lightning_fabric"}
    found = {m: graph.find_modules_directly_imported_by(m) & lightning for m in rooms}
    assert not {m: sorted(s) for m, s in found.items() if s}
