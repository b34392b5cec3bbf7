"""What long commands print: lines without a terminal, a bar on one, nothing under --quiet;
third-party logs only under --verbose."""

from __future__ import annotations

import io
import logging
import re
from pathlib import Path

import pytest

from ensml import logs
from ensml.cli.main import main
from ensml.progress import Progress, seconds
from tests.conftest import SMOKE, tiny_data_args


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


@pytest.fixture(autouse=True)
def default_verbosity():
    logs.configure()
    yield
    logs.configure()


def test_a_line_per_unit_with_elapsed_and_remaining() -> None:
    out = io.StringIO()
    with Progress("benchmark", 3, "models", stream=out) as progress:
        for name in ("EMOS", "U-Net", "temporal"):
            progress.advance(f"{name} trained in 2 s")
    lines = out.getvalue().splitlines()
    assert len(lines) == 3
    assert re.fullmatch(
        r"benchmark: 1/3 models, EMOS trained in 2 s; \d+ s elapsed, about \d+ s left", lines[0]
    )
    assert lines[2].startswith("benchmark: 3/3 models, temporal trained in 2 s;") and lines[2].endswith(
        "finished"
    )


def test_throttled_lines_still_report_the_end_and_failures() -> None:
    out = io.StringIO()
    progress = Progress("postprocess", 50, "units", every_s=3600, failures=True, stream=out)
    for i in range(50):
        progress.advance(ok=i % 10 != 0)
    lines = out.getvalue().splitlines()
    assert len(lines) == 1 and lines[0].startswith("postprocess: 50/50 units (5 failed);")  # the last unit


def test_resumed_run_counts_from_where_it_was() -> None:
    out = io.StringIO()
    progress = Progress("fit", 10, "epochs", start=8, stream=out)
    progress.advance()
    assert out.getvalue().startswith("fit: 9/10 epochs;")


def test_terminal_gets_a_bar_and_quiet_gets_nothing() -> None:
    term = Terminal()
    with Progress("archive", 4, "files", stream=term) as progress:
        progress.advance(n=4)
    assert "archive" in term.getvalue() and "4/4" in term.getvalue() and "elapsed" not in term.getvalue()
    logs.configure(quiet=True)
    for stream in (io.StringIO(), Terminal()):
        with Progress("archive", 4, "files", stream=stream) as progress:
            progress.advance(n=4)
        assert stream.getvalue() == ""


def test_collected_keeps_only_what_ensml_reports(caplog) -> None:
    log = logging.getLogger("cfgrib.dataset")
    with logs.collected("cfgrib", lambda record: record.getMessage().startswith("skipping")) as records:
        log.error("skipping variable: paramId==131 shortName='u'")
        log.warning("ecCodes provides no latitudes/longitudes for gridType='sh'")
    assert [r.getMessage() for r in records] == ["skipping variable: paramId==131 shortName='u'"]
    assert "no latitudes/longitudes" in caplog.text  # not ensml's to report: passed on
    assert "skipping variable" not in caplog.text


def test_durations_read_as_people_read_them() -> None:
    assert [seconds(s) for s in (42, 450, 9000)] == ["42 s", "7.5 min", "2.5 h"]


def test_help_lists_the_global_flags_and_they_exclude_each_other(capsys) -> None:
    assert main(["--help"]) == 0
    out = capsys.readouterr().out
    assert "-q, --quiet" in out and "-v, --verbose" in out
    assert main(["-q", "data", "synth", "--verbose"]) == 1
    assert capsys.readouterr().err == "ensml: --quiet and --verbose exclude each other: give one\n"


@pytest.mark.slow
def test_fit_without_terminal_logs_a_line_per_epoch(tiny_data, tmp_path, monkeypatch, capfd) -> None:
    monkeypatch.chdir(tmp_path)
    assert main(["fit", "--config", SMOKE, *tiny_data_args(tiny_data)]) == 0
    err = capfd.readouterr().err
    epochs = [line for line in err.splitlines() if line.startswith("fit: ")]
    assert len(epochs) == 2 and "val/loss" in epochs[0] and epochs[1].endswith("finished")
    assert logging.getLogger("lightning.fabric").getEffectiveLevel() == logging.INFO  # its notes stay

    assert (
        main(
            [
                "predict",
                "--quiet",
                "--config",
                SMOKE,
                *tiny_data_args(tiny_data),
                "--ckpt_path=runs/smoke/checkpoints/best.ckpt",
            ]
        )
        == 0
    )
    captured = capfd.readouterr()
    assert captured.err == "" and captured.out == ""
    assert logging.getLogger("lightning.fabric").getEffectiveLevel() == logging.WARNING
    assert (tmp_path / "runs/smoke/predictions.nc").is_file()


def test_synth_reports_progress_unless_quiet(tmp_path, capfd) -> None:
    args = [
        "data",
        "synth",
        "--n_lat=8",
        "--n_lon=16",
        "--start=2017-01-01",
        "--end=2017-01-31",
    ]  # every 2 days
    assert main([*args, f"--out_dir={tmp_path / 'a'}"]) == 0
    assert re.search(
        r"^ensml synth: 16/16 init times drawn and written; .*finished$", capfd.readouterr().err, re.M
    )
    assert main(["--quiet", *args, f"--out_dir={tmp_path / 'b'}"]) == 0
    assert capfd.readouterr().err == ""


def test_verbose_shows_library_logs_and_the_traceback(real_data: Path, tmp_path: Path, capfd, caplog) -> None:
    t = real_data / "metview-python" / "ds" / "an" / "t_pl.grib"
    mixed = tmp_path / "mixed.grib"
    mixed.write_bytes(t.read_bytes() + (t.parents[1] / "oper" / "u_pl.grib").read_bytes())
    args = [
        "evaluate",
        f"--forecast={mixed}",
        f"--analysis={mixed}",
        "--variables=[u]",
        f"--out_dir={tmp_path / 'o'}",
    ]
    assert main(args) == 1
    quiet_err = capfd.readouterr().err
    assert quiet_err.count("\n") == 1 and "variable 'u' cannot be read beside the others" in quiet_err
    assert "skipping variable" not in caplog.text  # collected, not passed on
    assert main(["--verbose", *args]) == 1
    err = capfd.readouterr().err
    assert "skipping variable: paramId==131 shortName='u'" in caplog.text  # cfgrib's own record, passed on
    assert "Traceback (most recent call last)" in err
    assert err.splitlines()[-1] == quiet_err.strip()
