"""Anemoi datasets from the main test environment.

anemoi-datasets pins zarr 2 (``zarr<=2.18.7``) and an earthkit-meteo before 1.0, while ensml's
test environment has zarr 3 and earthkit-meteo 1.2: the ``ensml[anemoi]`` extra lives in its own
environment, ``.venv-anemoi`` (``make env-anemoi``). :func:`test_anemoi_suite_in_its_environment`
runs ``tests/data/test_anemoi.py`` there in a subprocess; without that environment it skips, unless
``ENSML_REQUIRE_ANEMOI`` is set (``.ci/run`` sets it), which makes its absence a failure.
``ENSML_ANEMOI_PYTHON`` names another interpreter with the extra.

The other tests need no anemoi-datasets: an anemoi store's metadata alone (no data) is enough to
check how it is recognised, and the settings refused before anemoi opens it.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from ensml.cli.main import main
from ensml.data.layouts.formats import detect_format
from tests.conftest import REPO, SHARED_DATA

ANEMOI_PYTHON = Path(os.environ.get("ENSML_ANEMOI_PYTHON", REPO / ".venv-anemoi" / "bin" / "python"))


@pytest.mark.slow
@pytest.mark.realdata
@pytest.mark.timeout(900)
def test_anemoi_suite_in_its_environment() -> None:
    required = bool(os.environ.get("ENSML_REQUIRE_ANEMOI"))
    if not ANEMOI_PYTHON.is_file():
        reason = f"no anemoi environment at {ANEMOI_PYTHON} (make env-anemoi)"
        if required:
            pytest.fail(f"ENSML_REQUIRE_ANEMOI is set but {reason}")
        pytest.skip(reason)
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    cmd = [str(ANEMOI_PYTHON), "-m", "pytest", "-q", "-p", "no:cacheprovider", "-rs"]
    cmd += ["-W", "ignore::DeprecationWarning", "tests/data/test_anemoi.py"]
    done = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=850)
    tail = done.stdout[-4000:] + done.stderr[-2000:]
    assert done.returncode == 0, tail
    summary = done.stdout.strip().splitlines()[-1]
    if "skipped" in summary:
        if required or SHARED_DATA.is_dir():
            pytest.fail(f"the anemoi tests skipped in {ANEMOI_PYTHON}: {tail}")
        pytest.skip(f"the anemoi tests skipped: {summary}")


def fake_store(path: Path, members: int = 10) -> Path:
    """An anemoi dataset's metadata (zarr v2, no chunks: nothing here reads its data)."""
    path.mkdir()
    (path / ".zgroup").write_text(json.dumps({"zarr_format": 2}))
    attrs = {"variables": ["t_850", "2t"], "field_shape": [3, 4], "frequency": "6h"}
    (path / ".zattrs").write_text(json.dumps(attrs))
    shapes = {"data": [2, 2, members, 12], "dates": [2], "latitudes": [12], "longitudes": [12]}
    for name, shape in shapes.items():
        (path / name).mkdir()
        meta = {
            "zarr_format": 2,
            "shape": shape,
            "chunks": shape,
            "dtype": "<M8[s]" if name == "dates" else "<f4" if name == "data" else "<f8",
            "compressor": None,
            "fill_value": None,
            "filters": None,
            "order": "C",
        }
        (path / name / ".zarray").write_text(json.dumps(meta))
    return path


def test_recognised_by_content(tmp_path: Path) -> None:
    store = fake_store(tmp_path / "any-name.zarr")
    assert detect_format(store) == "anemoi"
    (store / ".zattrs").write_text(json.dumps({"variables": ["t_850"]}))  # no field_shape: plain zarr
    assert detect_format(store) == "zarr"


def _hashes(*roots: Path) -> dict[str, str]:
    out = {}
    for root in roots:
        for path in sorted(root.rglob("*")):
            out[str(path)] = hashlib.sha256(path.read_bytes()).hexdigest() if path.is_file() else "dir"
    return out


GRIB = str(SHARED_DATA / "cfgrib" / "era5-levels-members.grib")
ROWS = [
    (
        "anemoi-datasets not installed",
        ["--forecast", "{store}", "--analysis", "{store}"],
        ["is an anemoi dataset, but anemoi-datasets is not installed", "pip install 'ensml[anemoi]'"],
    ),
    (
        "GRIB filters on an anemoi dataset",
        ["--forecast", "{store}", "--analysis", "{store}", "--reader.filter_by_keys", "{dataType: pf}"],
        ["is an anemoi dataset: reader.filter_by_keys applies to GRIB files only", "reader.anemoi"],
    ),
    (
        "drop_control on an anemoi dataset",
        ["--forecast", "{store}", "--analysis", "{store}", "--reader.drop_control", "true"],
        ["reader.drop_control applies to GRIB files only"],
    ),
    (
        "anemoi options on a GRIB file",
        ["--forecast", GRIB, "--analysis", "{store}", "--reader.anemoi", "{members: [0]}"],
        ["reader.anemoi applies to anemoi datasets only, and this is a grib file"],
    ),
]


@pytest.mark.parametrize("row", ROWS, ids=[row[0] for row in ROWS])
def test_bad_settings_are_one_line_and_harmless(
    row: tuple, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture
) -> None:
    _, args, says = row
    if GRIB in args and not SHARED_DATA.is_dir():
        pytest.skip(f"real sample data not found at {SHARED_DATA}")
    monkeypatch.setitem(sys.modules, "anemoi.datasets", None)  # as if the extra were not installed
    monkeypatch.chdir(tmp_path)
    store = fake_store(tmp_path / "ens.zarr")
    (tmp_path / "notes.txt").write_text("the user's own file\n")
    before = _hashes(tmp_path)
    args = [a.replace("{store}", str(store)) for a in args]
    status = main(["evaluate", *args, "--leads", "0h", "--out_dir", str(tmp_path / "eval")])
    lines = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert status == 1 and len(lines) == 1, lines
    assert lines[0].startswith("ensml: ") and "Traceback" not in lines[0]
    for text in says:
        assert text in lines[0], (text, lines[0])
    assert _hashes(tmp_path) == before
