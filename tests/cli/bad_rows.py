"""The runner of the bad-input tables (:mod:`tests.cli.test_cli_table` and the tables of other
verbs and options): a row runs in a sandbox of a user's files and must end in one ``ensml:``
line with its exit status, every file of the sandbox and the inputs byte-identical after."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

from ensml.cli.main import main
from tests.conftest import CONFIGS, SMOKE, tiny_data_args

#: One row: a name, the arguments (``{fc}``, ``{an}``, ``{dir}``, ``{sandbox}`` filled in), the exit
#: status and words the one line must contain.
Row = tuple[str, str, int, tuple[str, ...]]

#: The ``fit`` command line of the smoke config on the tiny data (rows add their options).
FIT = "fit --config {smoke} {data}"


def sandbox(root: Path) -> None:
    """A user's files around and inside the working folder, shaped like what ensml writes."""
    (root / ".predictions.abc123.tmp").mkdir()
    (root / ".predictions.abc123.tmp" / "part.nc").write_bytes(b"user's partial download\n")
    (root / ".notes.9f8e7d.tmp").write_text("hidden user file\n")
    (root / "forecast_2017010100.nc").write_bytes(b"\x89HDF\r\n\x1a\n user's own archive")
    (root / "predictions.nc").write_bytes(b"CDF\x01 user's predictions")
    (root / "manifest.jsonl").write_text('{"user": "own manifest"}\n')
    (root / "benchmark.md").write_text("# my benchmark notes\n")
    (root / "sibling").mkdir()
    (root / "sibling" / "thesis.tex").write_text("\\documentclass{article}\n")
    (root / "sibling" / ".cache.1a2b3c.tmp").mkdir()


def hashes(*roots: Path) -> dict[str, str]:
    """sha256 of every file (and a mark for every folder) under ``roots``."""
    out = {}
    for root in roots:
        for path in sorted(root.rglob("*")):
            out[str(path)] = hashlib.sha256(path.read_bytes()).hexdigest() if path.is_file() else "dir"
    return out


@pytest.fixture(scope="module")
def inputs(tiny_data: dict[str, Path], tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """Placeholders of the rows: the tiny dataset, a folder of inputs, the smoke config."""
    folder = tmp_path_factory.mktemp("table-inputs")
    (folder / "readme.txt").write_text("inputs\n")
    (folder / "empty.yaml").write_text("# nothing yet\n")
    (folder / "repeated.yaml").write_text("k: 3\nk: 5\n")
    (folder / "nested.yaml").write_text("reader:\n  rename: {a: b}\n  rename: {c: d}\n")
    (folder / "list.yaml").write_text("- forecast.nc\n- analysis.nc\n")
    far = "name: far\nvariable: z\nlevel: 500\nlead: 48h\nregion: {lat: [-75, -35], lon: [350, 80]}\n"
    (folder / "far_case.yaml").write_text(
        far + "window: [1600-01-01, 1600-01-03]\nthreshold: {quantile: 0.1}\n"
    )
    data = "\n".join(tiny_data_args(tiny_data))
    return {
        "fc": str(tiny_data["forecast"]),
        "an": str(tiny_data["analysis"]),
        "dir": str(folder),
        "smoke": SMOKE,
        "generative": str(CONFIGS / "generative.yaml"),
        "data": data,
        "inputs": str(Path(tiny_data["forecast"]).parent),
    }


def row_args(row: Row, inputs: dict[str, str]) -> list[str]:
    args: list[str] = []
    for word in row[1].split():
        args += inputs["data"].split("\n") if word == "{data}" else [word.format(**inputs)]
    return args


def check(row: Row, status: int, err: str, before: dict[str, str], after: dict[str, str]) -> None:
    name, _, expected, says = row
    lines = [line for line in err.splitlines() if line.strip()]
    assert status == expected, f"{name}: exit status {status}: {lines[-5:]}"
    assert len(lines) == 1, f"{name}: expected one line on stderr, got {len(lines)}: {lines[:8]}"
    line = lines[0]
    assert line.startswith("ensml: ") and "Traceback" not in line, line
    for text in says:
        assert text.format() in line, f"{name}: {text!r} not in {line!r}"
    assert after == before, f"{name}: the sandbox or the inputs changed"


def run_row(
    row: Row,
    inputs: dict[str, str],
    folder: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture,
    roots: tuple[Path, ...] | None = None,
    args: list[str] | None = None,
) -> None:
    """Run ``row`` in ``folder`` beside the sandbox's user files (``main(args)``; by default the
    row's command line) and check it: its exit status, one ``ensml:`` line, and every file under
    ``roots`` (by default the folder and the inputs) byte-identical afterwards."""
    monkeypatch.chdir(folder)
    sandbox(folder)
    roots = roots or (folder, Path(inputs["dir"]), Path(inputs["inputs"]))
    before = hashes(*roots)
    status = main(row_args(row, inputs) if args is None else args)
    check(row, status, capsys.readouterr().err, before, hashes(*roots))


__all__ = ["FIT", "Row", "check", "hashes", "inputs", "row_args", "run_row", "sandbox"]
