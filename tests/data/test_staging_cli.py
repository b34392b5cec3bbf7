"""Bad reader settings on the command line: one ``ensml:`` line, exit 1, every file untouched.

The rows run like those of ``tests/cli/test_cli_table.py`` (its sandbox, hashes and checks).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.cli.bad_rows import FIT, Row, inputs, run_row  # noqa: F401

ROWS: list[Row] = [
    (
        "fit: prefetch readers unknown",
        FIT + " --data.prefetch_readers fibres",
        1,
        ("--data.prefetch_readers", "fibres"),
    ),
    (
        "fit: reader processes inside DataLoader workers",
        FIT + " --data.prefetch_readers processes --data.prefetch_workers 2 --data.num_workers 2",
        1,
        ("data.prefetch_readers=processes cannot run inside DataLoader workers (data.num_workers=2)",),
    ),
]


@pytest.mark.timeout(60)
@pytest.mark.parametrize("row", ROWS, ids=[row[0] for row in ROWS])
def test_bad_reader_setting_is_one_line_and_harmless(
    row: Row,
    inputs: dict[str, str],  # noqa: F811
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture,
) -> None:
    run_row(row, inputs, tmp_path, monkeypatch, capsys)
