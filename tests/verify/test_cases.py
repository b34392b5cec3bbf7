"""Case definitions, automatic case finding, case scoring and ``ensml evaluate --cases``."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import xarray as xr
import yaml

from ensml.cli.main import main
from ensml.errors import EnsmlError
from ensml.scores.crps import crps_ensemble
from ensml.scores.gaussian import crps_gaussian_xr
from ensml.verify.casefind import find_extreme_cases, lon_span, storm_cases
from ensml.verify.cases import Region, case_from_dict, load_cases
from ensml.verify.casestudy import score_case
from ensml.verify.families import gaussian_members
from tests.conftest import CONFIGS

CASE = {
    "name": "tiny storm",
    "variable": "z",
    "level": 500,
    "lead": "48h",
    "region": {"lat": [-75, -35], "lon": [350, 80]},
    "window": ["2017-11-07", "2017-11-09"],
    "threshold": {"quantile": 0.1, "tail": "lower"},
}


def write_case(path: Path, **changes: object) -> Path:
    path.write_text(yaml.safe_dump({**CASE, **changes}))
    return path


def run_failing(args: list[str], capsys, match: str, root: Path) -> str:
    """Run ``ensml args``: exit status 1, one ``ensml: …`` line naming ``match``, no traceback, and
    nothing written under ``root``. Returns the line."""
    before = sorted(root.rglob("*"))
    assert main(args) == 1
    err = capsys.readouterr().err.strip()
    assert "Traceback" not in err, err
    lines = err.splitlines()
    assert lines and lines[-1].startswith("ensml: ") and match in lines[-1], lines
    assert sorted(root.rglob("*")) == before, "partial output left behind"
    return lines[-1]


def test_region_across_zero_and_dateline() -> None:
    lon = np.arange(0.0, 360.0, 10.0)
    np.testing.assert_array_equal(lon[Region((0, 10), (340, 20)).lon_indices(lon)], [340, 350, 0, 10, 20])
    dateline = case_from_dict({**CASE, "region": {"lat": [-10, 10], "lon": [160, -160]}})
    assert dateline.region.lon == (160, 200)
    np.testing.assert_array_equal(lon[dateline.region.lon_indices(lon)], [160, 170, 180, 190, 200])
    assert lon_span(np.array([350.0, 355.0, 5.0])) == (350.0, 5.0)


def test_case_window_is_inclusive_and_round_trips() -> None:
    case = case_from_dict(CASE)
    assert case.end == np.datetime64("2017-11-10") - np.timedelta64(1, "ns")
    again = case_from_dict(case.to_dict())
    assert (again.region, again.start, again.threshold, again.lead) == (
        case.region,
        case.start,
        case.threshold,
        case.lead,
    )


@pytest.mark.parametrize("lead", [48, "48", "48h", "2d", "P2D", "PT48H"])
def test_case_lead_in_hours_or_as_a_duration(lead: object) -> None:
    assert case_from_dict({**CASE, "lead": lead}).lead == np.timedelta64(48, "h")


@pytest.mark.parametrize(
    ("change", "match"),
    [
        ({"colour": "red"}, "unknown key(s) colour"),
        ({"region": {"lat": [10, -10], "lon": [0, 10]}}, "south < north"),
        ({"region": {"lat": [0, 10]}}, "region must be"),
        ({"window": ["2017-02-01", "2017-01-01"]}, "ends"),
        ({"window": ["yesterday", "2017-01-01"]}, "not a date"),
        ({"window": ["1600-01-01", "2017-01-01"]}, "1600-01-01 is out of range"),
        ({"threshold": {"quantile": 1.5}}, "quantile must be in (0, 1)"),
        ({"threshold": {"value": 1, "quantile": 0.5}}, "threshold must be"),
        ({"threshold": {"value": 1, "tail": "both"}}, "tail must be"),
        ({"lead": -6}, "lead: lead time -6 is negative"),
        ({"lead": "tomorrow"}, "lead: lead time 'tomorrow' is not understood"),
        ({"lead_hours": 48}, "unknown key(s) lead_hours"),
    ],
)
def test_bad_case_definitions(change: dict, match: str) -> None:
    with pytest.raises(EnsmlError, match=match.replace("(", r"\(").replace(")", r"\)")) as err:
        case_from_dict({**CASE, **change}, "case file x.yaml")
    assert "\n" not in str(err.value) and "x.yaml" in str(err.value)


def test_repository_cases_load() -> None:
    cases = load_cases(CONFIGS / "cases")
    assert len(cases) >= 2
    assert any(c.region.lon[0] > c.region.lon[1] for c in cases)  # one crosses 0° / the dateline


def test_storm_and_extreme_cases(tiny_data) -> None:
    with xr.open_dataset(tiny_data["oracle"]) as orc:
        storms = storm_cases(orc, n=2, lead="P2D")
    assert len(storms) == 2 and all(c.threshold.tail == "lower" for c in storms)
    assert "amplitude" in storms[0].description
    with xr.open_dataset(tiny_data["analysis"]) as an:
        found = find_extreme_cases(
            an["t"].sel(level=850), variable="t", level=850, lead=24, n=2, quantile=0.95
        )
    assert all(c.lead == np.timedelta64(24, "h") for c in found) and storms[0].lead == np.timedelta64(48, "h")
    assert len(found) == 2 and abs(found[0].start - found[1].start) >= np.timedelta64(7, "D")


@pytest.mark.slow  # about a minute
def test_gaussian_quantile_members_match_closed_form() -> None:
    rng = np.random.default_rng(0)
    mu, sd = xr.DataArray(rng.normal(size=500), dims="x"), xr.DataArray(rng.uniform(0.5, 2, 500), dims="x")
    y = xr.DataArray(rng.normal(size=500) * 1.5, dims="x")
    exact = float(crps_gaussian_xr(mu, sd, y))
    assert float(crps_ensemble(gaussian_members(mu, sd), y)) == pytest.approx(exact, rel=2e-3)


@pytest.mark.slow
def test_score_case_on_tiny_data(tiny_data) -> None:
    case = case_from_dict(CASE)
    res = score_case(case, tiny_data["forecast"], tiny_data["analysis"], oracle=str(tiny_data["oracle"]))
    t = res.table.set_index("forecast")
    assert list(t.index) == ["raw ensemble (10 members)", "raw subset (5 members)", "oracle (Gaussian)"]
    assert (t["crps"] > 0).all() and (t["twcrps"] > 0).all() and (t["twcrps"] <= t["crps"]).all()
    assert t["crps_vs_raw"].iloc[0] == 0 and np.isfinite(t["crps_vs_raw"]).all()  # one init: noisy
    assert res.figure.startswith(b"\x89PNG") and res.n_inits == 1


@pytest.mark.slow  # evaluate end to end
def test_evaluate_with_cases(tiny_data, tmp_path, capsys) -> None:
    case = write_case(tmp_path / "storm.yaml")
    out = tmp_path / "eval"
    args = [
        "evaluate",
        f"--forecast={tiny_data['forecast']}",
        f"--analysis={tiny_data['analysis']}",
        f"--oracle={tiny_data['oracle']}",
        f"--out_dir={out}",
        f"--cases={case}",
    ]
    assert main(args) == 0
    files = sorted(p.name for p in (out / "cases").iterdir())
    assert files == ["case_tiny_storm.png", "cases.csv", "cases.md"]
    assert "twcrps_vs_raw" in (out / "cases" / "cases.csv").read_text()


@pytest.mark.parametrize(
    ("change", "match"),
    [
        ({"region": {"lat": [10.0, 10.5], "lon": [0, 30]}}, "selects no grid point"),
        ({"window": ["2030-01-01", "2030-01-02"]}, "selects no init time"),
        ({"threshold": {"value": 1.0e6, "tail": "upper"}}, "outside the range"),
        ({"variable": "q"}, "has no variable 'q'"),
        ({"level": 700}, "no level(s) [700.0] hPa"),
    ],
)
def test_evaluate_bad_case_leaves_nothing(tiny_data, tmp_path, capsys, change, match) -> None:
    case = write_case(tmp_path / "bad.yaml", **change)
    args = [
        "evaluate",
        f"--forecast={tiny_data['forecast']}",
        f"--analysis={tiny_data['analysis']}",
        f"--out_dir={tmp_path / 'eval'}",
        f"--cases={case}",
    ]
    run_failing(args, capsys, match, tmp_path)
