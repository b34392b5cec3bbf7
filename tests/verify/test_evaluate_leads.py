"""``ensml evaluate`` and ``ensml report`` score every lead time the predictions hold.

A tiny synthetic ensemble (8 × 16 grid, two months of inits every 3 days, leads 0/24/48 h) and
Gaussian predictions made here from the oracle plus noise, at +24 h and +48 h along a
``lead_time`` dim (as ``ensml postprocess`` writes them) or at one lead with a scalar
``lead_time`` (as ``ensml predict`` writes them), each with the run metadata that says which
leads it holds. References: properscoring's empirical ensemble CRPS and closed-form Gaussian
CRPS, area-weighted by hand.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import properscoring as ps
import pytest
import xarray as xr

from ensml.cli.main import main
from ensml.report.scores import skill_by_lead
from ensml.verify.evaluate import evaluate
from tests.conftest import cell_area_weights
from tests.verify.reference_inputs import run_meta
from tests.verify.test_cases import run_failing

HOUR = np.timedelta64(1, "h")
VARS = ("z", "t")
LEVELS = (500.0, 850.0)


@pytest.fixture(scope="module")
def data(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """forecast/analysis/oracle and predictions files (see the module docstring)."""
    from ensml.data.synth.generate import synth

    root = tmp_path_factory.mktemp("leads")
    paths = dict(
        synth(root / "synth", n_lat=8, n_lon=16, start="2017-11-01", end="2017-12-31", every_days=3, seed=1)
    )
    rng = np.random.default_rng(7)
    with xr.open_dataset(paths["oracle"]) as orc:
        # the predictions leave out the first two inits: evaluate scores the inits they share
        sub = orc[[f"{v}_{s}" for v in VARS for s in ("mean", "std")]].isel(init_time=slice(2, None))
        sub = sub.sel(lead_time=np.array([24, 48], "timedelta64[h]").astype("timedelta64[ns]")).load()
    for v in VARS:
        sub[f"{v}_mean"] = sub[f"{v}_mean"] + 0.4 * sub[f"{v}_std"] * rng.standard_normal(
            sub[f"{v}_std"].shape
        )
        sub[f"{v}_std"] = sub[f"{v}_std"] * 1.3
    sub.attrs = {"title": "test predictions at two leads", **run_meta("MixedTask")}
    paths["preds2"] = root / "preds2.nc"
    sub.to_netcdf(paths["preds2"])
    for h in (24, 48):  # one lead, scalar lead_time, no lead dim (ensml predict)
        paths[f"preds{h}"] = root / f"preds{h}.nc"
        one = sub.sel(lead_time=np.timedelta64(h, "h")).assign_attrs(run_meta("MixedTask", leads=[h]))
        one.to_netcdf(paths[f"preds{h}"])
    paths["spread48"] = root / "spread48.nc"  # a spread model's file, lead dim holding 48 h only
    spread = sub[[f"{v}_std" for v in VARS]].sel(lead_time=[np.timedelta64(48, "h")])
    spread.assign_attrs(run_meta("SpreadTask", leads=[48])).to_netcdf(paths["spread48"])
    paths["preds24dim"] = root / "preds24dim.nc"
    sub.sel(lead_time=[np.timedelta64(24, "h")]).assign_attrs(run_meta("MixedTask", leads=[24])).to_netcdf(
        paths["preds24dim"]
    )
    return paths


def _reference(data: dict[str, Path], lead_h: int, var: str, level: float) -> dict[str, object]:
    """properscoring's CRPS (raw ensemble, predictions' Gaussian, oracle) at one lead, by hand."""
    lead = np.timedelta64(lead_h, "h")
    with (
        xr.open_dataset(data["forecast"]) as fc,
        xr.open_dataset(data["analysis"]) as an,
        xr.open_dataset(data["preds2"]) as pr,
        xr.open_dataset(data["oracle"]) as orc,
    ):
        inits = pr["init_time"].values
        # the init times verified at every scored lead (24 h and 48 h)
        inits = inits[np.isin(inits + np.timedelta64(48, "h"), an["time"].values)]
        x = fc[var].sel(init_time=inits, lead_time=lead, level=level).transpose(..., "member").values
        y = an[var].sel(time=inits + lead, level=level).values.astype(np.float64)
        mu, sd = (
            pr[f"{var}_{p}"].sel(init_time=inits, lead_time=lead, level=level).values for p in ("mean", "std")
        )
        om, osd = (
            orc[f"{var}_{p}"].sel(init_time=inits, lead_time=lead, level=level).values
            for p in ("mean", "std")
        )
        w = cell_area_weights(fc["latitude"].values)[None, :, None] * np.ones_like(y)
    per_point = {
        "raw": ps.crps_ensemble(y, x.astype(np.float64)),
        "gauss": ps.crps_gaussian(y, mu.astype(np.float64), sd.astype(np.float64)),
        "oracle": ps.crps_gaussian(y, om.astype(np.float64), osd.astype(np.float64)),
    }
    out: dict[str, object] = {k: float((v * w).sum() / w.sum()) for k, v in per_point.items()}
    out["raw_field"] = per_point["raw"].mean(axis=0)  # (latitude, longitude), mean over inits
    out["n_inits"] = inits.size
    return out


def _row(table: pd.DataFrame, lead_h: int, var: str, level: float, forecast: str) -> pd.Series:
    sel = table[(table["lead_h"] == lead_h) & (table["variable"] == var) & (table["level_hPa"] == level)]
    sel = sel[sel["forecast"].str.startswith(forecast)]
    assert len(sel) == 1, (lead_h, var, level, forecast, sel)
    return sel.iloc[0]


@pytest.mark.slow
def test_every_lead_of_the_predictions_is_scored(data, tmp_path) -> None:
    out = tmp_path / "eval"
    table = evaluate(
        str(data["forecast"]),
        str(data["analysis"]),
        predictions=str(data["preds2"]),
        oracle=str(data["oracle"]),
        out_dir=str(out),
    ).table
    assert list(dict.fromkeys(table["lead_h"])) == [24, 48]  # one block of rows per lead, in order
    assert table["lead_h"].is_monotonic_increasing
    assert len(table) == 2 * len(VARS) * len(LEVELS) * 4  # raw, subset, post-processed, oracle
    refs = {}
    for lead_h in (24, 48):
        for var in VARS:
            for lev in LEVELS:
                ref = refs[lead_h, var, lev] = _reference(data, lead_h, var, lev)
                raw = _row(table, lead_h, var, lev, "raw ensemble")
                gauss = _row(table, lead_h, var, lev, "post-processed (Gaussian)")
                orc = _row(table, lead_h, var, lev, "oracle (Gaussian)")
                assert (
                    raw["estimator"] == "empirical ensemble" and gauss["estimator"] == "Gaussian closed form"
                )
                np.testing.assert_allclose(raw["crps"], ref["raw"], rtol=1e-5)
                np.testing.assert_allclose(gauss["crps"], ref["gauss"], rtol=1e-5)
                np.testing.assert_allclose(orc["crps"], ref["oracle"], rtol=1e-5)
                # skill and gap closed against the raw ensemble and the oracle at the same lead
                np.testing.assert_allclose(
                    gauss["skill_vs_raw_ensemble"], 1 - ref["gauss"] / ref["raw"], rtol=1e-5
                )
                gap = (ref["raw"] - ref["gauss"]) / (ref["raw"] - ref["oracle"])
                np.testing.assert_allclose(gauss["gap_closed"], gap, rtol=1e-4)
                assert raw["skill_vs_raw_ensemble"] == 0.0
    for var in VARS:  # the raw ensemble's CRPS grows with lead: another lead's would be far off
        for lev in LEVELS:
            other = 1 - refs[24, var, lev]["gauss"] / refs[48, var, lev]["raw"]
            assert abs(_row(table, 24, var, lev, "post-processed")["skill_vs_raw_ensemble"] - other) > 0.02
    md = (out / "scores.md").read_text()
    assert "| z | 500 | 24 | raw ensemble" in md and "| t | 850 | 48 | oracle (Gaussian)" in md
    assert f"Scores over {refs[24, 'z', 500.0]['n_inits']} init times" in md
    # per-point scores: a lead_time dim (timedelta64, CF attributes), readable with plain xarray
    with xr.open_dataset(out / "scores.nc") as scores:
        field = scores["crps_raw_ensemble_z"]
        assert field.dims == ("lead_time", "level", "latitude", "longitude")
        assert scores["lead_time"].dtype == np.dtype("timedelta64[ns]")
        assert list(scores["lead_time"].values / HOUR) == [24, 48]
        assert scores["lead_time"].attrs["standard_name"] == "forecast_period"
        assert scores["crps_post_processed_t"].dims == field.dims
        for lead_h in (24, 48):
            np.testing.assert_allclose(
                field.sel(lead_time=np.timedelta64(lead_h, "h"), level=500.0).values,
                refs[lead_h, "z", 500.0]["raw_field"],
                rtol=1e-5,
            )


@pytest.mark.slow
def test_one_lead_file_scores_its_lead_in_the_one_lead_layout(data, tmp_path) -> None:
    table = evaluate(
        str(data["forecast"]),
        str(data["analysis"]),
        predictions=str(data["preds24"]),
        out_dir=str(tmp_path / "a"),
    ).table
    assert set(table["lead_h"]) == {24}
    ref = _reference(data, 24, "t", 850.0)
    np.testing.assert_allclose(_row(table, 24, "t", 850.0, "post-processed")["crps"], ref["gauss"], rtol=1e-5)
    # the layout of a one-lead run, as before leads were scored together: a scalar lead_time
    with xr.open_dataset(tmp_path / "a" / "scores.nc") as scores:
        assert "lead_time" not in scores.dims and scores["lead_time"].values == np.timedelta64(24, "h")
        assert {str(v) for v in scores.data_vars} == {
            f"crps_{s}_{v}" for s in ("raw_ensemble", "raw_subset", "post_processed") for v in VARS
        }
        for v in scores.data_vars.values():
            assert v.dims == ("level", "latitude", "longitude")
        one = scores.load()
    # asked for one lead of a two-lead file: the same layout, the same numbers
    evaluate(
        str(data["forecast"]),
        str(data["analysis"]),
        predictions=str(data["preds2"]),
        leads=24,
        out_dir=str(tmp_path / "b"),
    )
    with xr.open_dataset(tmp_path / "b" / "scores.nc") as scores:
        xr.testing.assert_allclose(scores.load(), one)
        assert scores.attrs["init_times"] == one.attrs["init_times"]


@pytest.mark.slow
def test_no_predictions_scores_every_forecast_lead_but_zero(data, tmp_path) -> None:
    scores = evaluate(
        str(data["forecast"]), str(data["analysis"]), variables=["t"], out_dir=str(tmp_path / "e")
    )
    assert list(dict.fromkeys(scores.table["lead_h"])) == [24, 48]
    scores = evaluate(
        str(data["forecast"]),
        str(data["analysis"]),
        variables=["t"],
        leads=[48, "0h"],
        out_dir=str(tmp_path / "f"),
    )
    assert list(dict.fromkeys(scores.table["lead_h"])) == [0, 48]
    scores = evaluate(
        str(data["forecast"]),
        str(data["analysis"]),
        variables=["t"],
        leads="P1D",
        out_dir=str(tmp_path / "g"),
    )
    assert list(scores.table["lead_h"].unique()) == [24]


@pytest.mark.parametrize(
    ("files", "extra", "match"),
    [
        # a lead the predictions lack (a one-lead file holds its scalar lead_time)
        ({"predictions": "preds48"}, ["--leads=[24, 48]"], "preds48.nc has no lead time(s) 24 h (found: 48"),
        ({"predictions": "preds48"}, ["--leads=24h"], "preds48.nc has no lead time(s) 24 h (found: 48 h)"),
        ({"predictions": "preds2"}, ["--leads=[24, 36]"], "preds2.nc has no lead time(s) 36 h (found: 24,"),
        # by default the leads of the runs: each file must hold every one of them
        (
            {"predictions": "preds2", "spread_predictions": "spread48"},
            [],
            "spread48.nc has no lead time(s) 24 h (found: 48 h); --leads common scores the leads every file",
        ),
        # no lead in common
        (
            {"predictions": "preds24dim", "spread_predictions": "spread48"},
            ["--leads=common"],
            "the inputs have no lead time in common",
        ),
        # a lead the forecast lacks
        ({}, ["--leads=72"], "has no lead time(s) 72 h (found: 0, 24, 48 h)"),
        # not a lead time: a one-line error before any work
        ({}, ["--leads=soon"], "lead time 'soon' is not understood"),
        ({}, ["--leads=-6"], "lead time -6 is negative"),
    ],
)
def test_bad_leads_are_one_line_and_write_nothing(
    data, tmp_path, monkeypatch, capsys, files, extra, match
) -> None:
    monkeypatch.chdir(tmp_path)
    args = [
        "evaluate",
        f"--forecast={data['forecast']}",
        f"--analysis={data['analysis']}",
        *(f"--{k}={data[v]}" for k, v in files.items()),
        *extra,
        "--out_dir=out",
    ]
    line = run_failing(args, capsys, match, tmp_path)
    if "common:" in line:
        assert "preds24dim.nc 24 h" in line and "spread48.nc 48 h" in line


@pytest.mark.slow
def test_common_leads_are_scored_and_the_dropped_ones_said(data, tmp_path, monkeypatch, capsys) -> None:
    monkeypatch.chdir(tmp_path)
    args = [
        "evaluate",
        f"--forecast={data['forecast']}",
        f"--analysis={data['analysis']}",
        f"--predictions={data['preds2']}",
        f"--spread_predictions={data['spread48']}",
        "--leads=common",
        "--out_dir=out",
    ]
    assert main(args) == 0
    captured = capsys.readouterr()
    said = [line for line in captured.err.splitlines() if "dropped" in line]
    assert said == ["evaluate: scoring 48 h, the leads every file holds; dropped 24 h"]
    table = pd.read_csv(tmp_path / "out" / "scores.csv")
    assert set(table["lead_h"]) == {48} and set(pd.read_csv(tmp_path / "out" / "spread.csv")["lead_h"]) == {
        48
    }
    header = (tmp_path / "out" / "scores.md").read_text().splitlines()[0]
    assert header.endswith("Leads every file holds: 48 h; dropped 24 h.")
    assert "(Leads every file holds: 48 h; dropped 24 h)" in captured.out  # the printed table's title
    # the same numbers as asking for 48 h alone
    alone = evaluate(
        str(data["forecast"]),
        str(data["analysis"]),
        predictions=str(data["preds2"]),
        leads=48,
        spread_predictions=str(data["spread48"]),
        out_dir=str(tmp_path / "alone"),
    )
    pd.testing.assert_frame_equal(table, pd.read_csv(tmp_path / "alone" / "scores.csv"))
    assert not alone.dropped.size and "dropped" not in (tmp_path / "alone" / "scores.md").read_text()


def test_skill_by_lead_refers_to_the_raw_ensemble_at_each_lead() -> None:
    rows = [
        ("z", 500.0, 24, "raw ensemble (10 members)", 2.0),
        ("z", 500.0, 24, "post-processed (Gaussian)", 1.5),
        ("z", 500.0, 48, "raw ensemble (10 members)", 4.0),
        ("z", 500.0, 48, "post-processed (Gaussian)", 3.0),
        ("t2m", np.nan, 24, "raw ensemble (10 members)", 1.0),
        ("t2m", np.nan, 24, "oracle (Gaussian)", 0.8),
    ]
    df = pd.DataFrame(rows, columns=["variable", "level_hPa", "lead_h", "forecast", "crps"])
    out = skill_by_lead(df)
    assert list(out.columns) == [*df.columns, "skill_vs_raw_ensemble"] and len(out) == len(df)
    np.testing.assert_allclose(out["skill_vs_raw_ensemble"], [0.0, 0.25, 0.0, 0.25, 0.0, 0.2])


@pytest.mark.slow
def test_report_plots_skill_by_lead(data, tmp_path) -> None:
    from ensml.report.assemble import report

    out = report(
        str(data["forecast"]),
        str(data["analysis"]),
        predictions=str(data["preds2"]),
        oracle=str(data["oracle"]),
        variables=["t"],
        out_dir=str(tmp_path / "report"),
    ).path
    png = out / "figures" / "crps_skill_by_lead.png"
    assert png.read_bytes().startswith(b"\x89PNG") and png.stat().st_size > 10_000
    md = (out / "report.md").read_text()
    assert "(figures/crps_skill_by_lead.png)" in md and "CRPS skill vs raw ensemble by lead time" in md
    assert "empirical ensemble CRPS for ensembles" in md and "closed form for Gaussian" in md
    assert md.index("crps_by_lead.png") < md.index("crps_skill_by_lead.png") < md.index("spread_skill.png")
    assert "Global scores at +24 h, +48 h" in md
    assert "| t | 850 | 24 | post-processed (Gaussian) | Gaussian closed form" in md
    assert "| t | 850 | 48 | post-processed (Gaussian) | Gaussian closed form" in md
    assert (out / "figures" / "crps_skill_map.png").is_file()  # the map at the report's lead, 48 h


@pytest.mark.slow
def test_report_maps_the_last_lead_scored_by_default(data, tmp_path, monkeypatch, capsys) -> None:
    """Predictions of +24 h only: the maps, histograms and reliability are at +24 h, not +48 h."""
    monkeypatch.chdir(tmp_path)
    args = [
        "report",
        f"--forecast={data['forecast']}",
        f"--analysis={data['analysis']}",
        f"--predictions={data['preds24']}",
        "--variables=[t]",
        "--out_dir=report",
    ]
    assert main(args) == 0
    printed = capsys.readouterr().out
    assert "CRPS over" in printed and printed.strip().endswith("report/report.md and report/report.html")
    md = (tmp_path / "report" / "report.md").read_text()
    assert "## Global scores at +24 h\n" in md
    assert "## Rank histograms at +24 h" in md and "## Reliability at +24 h" in md
    assert (tmp_path / "report" / "figures" / "crps_skill_map.png").is_file()
    assert "No map of the per-point CRPS skill" not in md


def test_report_lead_the_forecast_lacks_is_one_line(data, tmp_path, monkeypatch, capsys) -> None:
    monkeypatch.chdir(tmp_path)
    args = [
        "report",
        f"--forecast={data['forecast']}",
        f"--analysis={data['analysis']}",
        "--lead=P3D",
        "--out_dir=report",
    ]
    run_failing(args, capsys, "has no lead time(s) 72 h (found: 0, 24, 48 h)", tmp_path)


def test_report_lead_not_scored_is_one_line(data, tmp_path, monkeypatch, capsys) -> None:
    """The report's lead is one of the leads scored: the forecast's 0 h, which evaluate does not
    score without a run, is refused before any lead is read."""
    monkeypatch.chdir(tmp_path)
    args = [
        "report",
        f"--forecast={data['forecast']}",
        f"--analysis={data['analysis']}",
        "--lead=0",
        "--out_dir=report",
    ]
    run_failing(args, capsys, "report: lead +0 h is not among the leads scored (24, 48 h)", tmp_path)
