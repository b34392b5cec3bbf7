"""``ensml fit`` writes only its run folder, through the output module.

A run folder that holds files ensml did not write is refused before any work and left byte for
byte as it was; a full disk while writing ``config.yaml`` is one line naming it, with no 0-byte
``config.yaml`` left; a finished fit records what it wrote in the folder's ledger.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from ensml.cli.main import main
from ensml.data.outputs import OutputFolder
from tests.conftest import SMOKE, tiny_data_args
from tests.data.outputs_sandbox import make_sandbox, run_cli_on_small_disk, skip_unless_mounts, snapshot

pytestmark = pytest.mark.timeout(600)


def fit(data: dict[str, Path], *extra: str) -> list[str]:
    return ["fit", "--config", SMOKE, *tiny_data_args(data), "--trainer.max_epochs=1", *extra]


@pytest.mark.slow
def test_fit_refuses_a_run_folder_of_the_users(tiny_data, tmp_path, monkeypatch, capsys) -> None:
    monkeypatch.chdir(tmp_path)
    make_sandbox(tmp_path / "runs" / "smoke", tmp_path / "elsewhere")
    before = snapshot(tmp_path)
    assert main(fit(tiny_data)) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1, err
    assert re.fullmatch(
        r"ensml: fit: out_dir \S*runs/smoke holds 7 entries ensml did not write \(e\.g\. .+\); "
        r"name a new or empty folder",
        err[0],
    ), err[0]
    assert snapshot(tmp_path) == before


@pytest.mark.slow
def test_fit_records_its_run_folder_in_the_ledger(tiny_data, tmp_path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    assert main(fit(tiny_data)) == 0
    run = tmp_path / "runs" / "smoke"
    with OutputFolder.open(run, "inspect", shared=True) as folder:
        entries = {k: e.to_json() for k, e in folder.ledger.entries.items()}
    assert {k for k, e in entries.items() if e["command"] == "fit"} >= {
        "config.yaml",
        "hparams.yaml",
        "metrics.csv",
        "checkpoints",
    }
    assert all(e["state"] == "done" for e in entries.values()), json.dumps(entries, indent=1)
    assert list((run / ".ensml" / "staging").iterdir()) == []


@pytest.mark.slow  # fit end to end
def test_fit_on_a_full_disk_leaves_no_empty_config(tiny_data, tmp_path) -> None:
    skip_unless_mounts()
    fill = json.dumps({"class_path": "tests.train.pausing.FillDisk"})
    report = run_cli_on_small_disk(tmp_path / "disk", fit(tiny_data, f"--trainer.callbacks+={fill}"), "8m")
    if report is None:
        pytest.skip("cannot mount a size-limited tmpfs here")
    status, err, files = report
    assert status == 1 and not any("Traceback" in line for line in err), err[-20:]
    assert re.fullmatch(r"ensml: fit: cannot write \S*config\.yaml: no space left on device", err[-1]), err[
        -1
    ]
    assert not [p for p in files if p.endswith("config.yaml")], files  # no 0-byte config.yaml
    assert not [p for p in files if "/.ensml/staging/" in p and not p.endswith("/lock")], files
