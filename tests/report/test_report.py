"""``ensml report``: one complete report, or nothing at all (section 5 bad input)."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import xarray as xr
import yaml

from ensml.cli.main import main
from ensml.data.frame import EnsembleFrame
from ensml.errors import EnsmlError
from ensml.report import plots
from ensml.report.assemble import report
from ensml.scores.calibration import spread_skill_ratio
from ensml.scores.crps import crps_ensemble
from ensml.scores.twcrps import twcrps_ensemble
from ensml.times import lead_hours, parse_lead
from tests.verify.test_cases import CASE, run_failing, write_case

FIGURES = {"crps_by_lead.png", "spread_skill.png", "rank_histograms.png", "reliability.png"}


def report_args(data: dict[str, Path], out: Path, *extra: str) -> list[str]:
    return [
        "report",
        f"--forecast={data['forecast']}",
        f"--analysis={data['analysis']}",
        f"--oracle={data['oracle']}",
        f"--out_dir={out}",
        *extra,
    ]


@pytest.mark.slow  # report end to end
def test_report_with_predictions_and_cases(fitted, tiny_data, tmp_path, capsys) -> None:
    # away from the test period's stored storm, which n_storm_cases adds (a repeat would be skipped)
    case = write_case(tmp_path / "storm.yaml", region={"lat": [-35, 0], "lon": [340, 20]})
    out = tmp_path / "report"
    preds = fitted / "runs" / "smoke" / "predictions.nc"
    extra = [f"--predictions={preds}", f"--cases={case}", "--n_storm_cases=1", "--n_extreme_cases=1"]
    assert main(report_args(tiny_data, out, *extra)) == 0
    figures = {p.name for p in (out / "figures").iterdir()}
    assert FIGURES | {"crps_skill_map.png", "case_tiny_storm.png"} <= figures
    assert len([f for f in figures if f.startswith("case_")]) == 3  # YAML case, one storm, one extreme
    for f in (out / "figures").iterdir():
        assert f.read_bytes().startswith(b"\x89PNG") and f.stat().st_size > 10_000, f
    md = (out / "report.md").read_text()
    for section in (
        "Global scores",
        "Scores by lead time",
        "Spread and skill",
        "Rank histograms",
        "Reliability",
        "Case studies",
        "tiny storm",
        "post-processed (Gaussian)",
    ):
        assert section in md, section
    for ref in re.findall(r"\(figures/([^)]+)\)", md):
        assert (out / "figures" / ref).is_file()
    html = (out / "report.html").read_text()
    assert html.count("data:image/png;base64,") == len(figures) and "<table>" in html
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")], "temporary folder left"


@pytest.mark.slow  # report end to end
def test_report_replaces_old_report(tiny_data, tmp_path) -> None:
    out = tmp_path / "report"
    assert main(report_args(tiny_data, out)) == 0
    (out / "figures" / "mine.png").write_text("a user's")  # not in the report's ledger: kept
    assert main(report_args(tiny_data, out)) == 0
    assert (out / "figures" / "mine.png").read_text() == "a user's" and (out / "report.html").is_file()
    assert FIGURES <= {p.name for p in (out / "figures").iterdir()}
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")], "temporary folder left"


def test_report_reads_each_lead_once(tiny_data, tmp_path, monkeypatch) -> None:
    """One frame, one pass: the global scores and the scores by lead time, rank histograms and
    reliability come from one read of the forecast at each lead scored (the report's by-lead
    rows cover those leads, and no other: not the forecast's 0 h, which evaluate does not score)."""
    read: list[np.timedelta64] = []
    at = EnsembleFrame.at

    def counted(self: EnsembleFrame, lead, **kwargs):
        read.append(parse_lead(lead))
        return at(self, lead, **kwargs)

    monkeypatch.setattr(EnsembleFrame, "at", counted)
    charted: list[pd.DataFrame] = []
    chart = plots.scores_by_lead
    monkeypatch.setattr(plots, "scores_by_lead", lambda df, *a: charted.append(df) or chart(df, *a))
    fc, an = str(tiny_data["forecast"]), str(tiny_data["analysis"])
    out = tmp_path / "report"
    done = report(fc, an, oracle=str(tiny_data["oracle"]), variables="z", levels=500, out_dir=str(out))
    scored = list(done.scores.leads)
    assert len(scored) == 2 and np.timedelta64(0, "h") not in scored  # the tiny forecast has 0 h too
    assert read == scored  # each lead once, in order
    (by_lead,) = charted
    assert set(by_lead["lead_h"]) == {lead_hours(x) for x in scored} == set(done.scores.table["lead_h"])


def _variant(src: Path, dst: Path, change) -> Path:
    with xr.open_dataset(src) as ds:
        change(ds.load()).to_netcdf(dst)
    return dst


@pytest.mark.parametrize(
    ("what", "match"),
    [
        ("no_member", "has 1 members"),  # no member dim: a deterministic run, an ensemble of one
        ("other_grid", "different grids"),
        ("no_level", "has no level(s)"),
        ("empty_region", "selects no grid point"),
        ("empty_window", "selects no init time"),
        ("threshold", "outside the range"),
        ("bad_yaml", "unknown key(s)"),
    ],
)
def test_bad_input_leaves_no_report(tiny_data, tmp_path, capsys, what, match) -> None:
    data = dict(tiny_data)
    extra = []
    if what == "no_member":
        data["forecast"] = _variant(
            data["forecast"], tmp_path / "f.nc", lambda d: d.isel(member=0, drop=True)
        )
    elif what == "other_grid":
        data["analysis"] = _variant(
            data["analysis"], tmp_path / "a.nc", lambda d: d.isel(latitude=slice(1, None))
        )
    elif what == "no_level":
        data["analysis"] = _variant(data["analysis"], tmp_path / "a.nc", lambda d: d.isel(level=0, drop=True))
    else:
        change = {
            "empty_region": {"region": {"lat": [10.0, 10.5], "lon": [0, 30]}},
            "empty_window": {"window": ["2030-01-01", "2030-01-02"]},
            "threshold": {"threshold": {"value": -1.0e6, "tail": "lower"}},
            "bad_yaml": {"colour": "red"},
        }[what]
        extra = [f"--cases={write_case(tmp_path / 'bad.yaml', **change)}"]
    run_failing(report_args(data, tmp_path / "report", *extra), capsys, match, tmp_path)


def test_metric_bad_input_is_one_line() -> None:
    rng = np.random.default_rng(0)
    fc = xr.DataArray(rng.normal(size=(5, 4, 3)), dims=("member", "latitude", "longitude"))
    obs = xr.DataArray(rng.normal(size=(4, 3)), dims=("latitude", "longitude"))
    cases = [
        (lambda: crps_ensemble(fc, obs.rename(latitude="lat")), "do not match observation dims"),
        (lambda: crps_ensemble(fc.isel(member=0), obs), "no member dimension"),
        (
            lambda: crps_ensemble(fc, obs, weights=xr.DataArray(np.ones(7), dims="latitude")),
            "weights have size",
        ),
        (lambda: spread_skill_ratio(fc, obs, weights=xr.DataArray(np.ones(2), dims="time")), "weights dims"),
        (lambda: twcrps_ensemble(fc, obs, 100.0), "above the data range"),
        (lambda: twcrps_ensemble(fc, obs, -100.0, tail="lower"), "below the data range"),
    ]
    for call, match in cases:
        with pytest.raises(EnsmlError, match=match) as err:
            call()
        assert "\n" not in str(err.value)


def test_case_yaml_list_and_duplicates(tmp_path) -> None:
    from ensml.verify.cases import load_cases

    f = tmp_path / "two.yaml"
    f.write_text(yaml.safe_dump({"cases": [CASE, {**CASE, "name": "second"}]}))
    assert [c.name for c in load_cases(f)] == ["tiny storm", "second"]
    f.write_text(yaml.safe_dump({"cases": [CASE, CASE]}))
    with pytest.raises(EnsmlError, match="unique"):
        load_cases(f)


def test_markdown_table_with_missing_values() -> None:
    from ensml.verify.tables import to_markdown

    md = to_markdown(pd.DataFrame({"forecast": ["raw", None], "crps": [1.0, np.nan], "note": ["a", np.nan]}))
    assert md.splitlines()[3] == "|  |  |  |"


@pytest.mark.slow  # report end to end
def test_points_that_never_vary_are_left_out_of_the_reliability_not_infinite(tiny_data, tmp_path) -> None:
    """An analysis constant at some points all month (no rain) has a climatological std of 0:
    the report leaves those points out of the standardised anomalies instead of failing on Inf."""

    def flat_row(ds: xr.Dataset) -> xr.Dataset:
        ds["t"][{"latitude": 0}] = 250.0
        return ds

    analysis = _variant(tiny_data["analysis"], tmp_path / "analysis.nc", flat_row)
    out = tmp_path / "report"
    assert main(report_args({**tiny_data, "analysis": analysis}, out)) == 0
    assert (out / "report.html").is_file()
