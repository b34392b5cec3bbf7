"""The architecture holds: one direction of imports between the rooms (docs/architecture.md).

The contracts live in ``pyproject.toml`` (``[tool.importlinter]``); import-linter builds the
import graph of ``ensml`` and fails on any import that goes up a layer or across independent
siblings, and on a reader in ``data/layouts`` importing the entry point above it.
"""

from __future__ import annotations

from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


def test_import_layers_hold(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture) -> None:
    from importlinter.cli import lint_imports

    monkeypatch.chdir(REPO)
    status = lint_imports(config_filename=str(REPO / "pyproject.toml"), no_cache=True)
    out = capsys.readouterr().out
    assert status == 0, out
    assert "BROKEN" not in out and out.count("KEPT") >= 2
